//! `Record`: an event as stored and printed — the `--json` line
//! `{"run","seq","ts","type","step","data"}` (DESIGN Appendix A).

use serde::Serialize;

use super::{Event, Timestamp};
use crate::{RunId, StepName};

/// One appended event with its place in the run.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub run: RunId,
    /// Contiguous per run, starting at 1.
    pub seq: u64,
    pub ts: Timestamp,
    /// The step the event belongs to (`null` for run-level events).
    pub step: Option<StepName>,
    pub event: Event,
}

/// Why a JSON line is not a record.
#[derive(Debug, thiserror::Error)]
#[error("not an event line: {0}")]
pub struct RecordError(#[from] serde_json::Error);

#[derive(Serialize)]
struct Line<'a> {
    run: &'a RunId,
    seq: u64,
    ts: Timestamp,
    #[serde(rename = "type")]
    kind: &'a str,
    step: Option<&'a StepName>,
    data: &'a serde_json::value::RawValue,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct OwnedLine {
    run: RunId,
    seq: u64,
    ts: Timestamp,
    #[serde(rename = "type")]
    kind: String,
    step: Option<StepName>,
    data: serde_json::Value,
}

impl Record {
    /// The one-line JSON form, keys in the contract's order. The events of an outcome run's
    /// phase steps (`t1.execute`) carry their task as `data.task` (DESIGN §13), first, unless
    /// the event has a `task` of its own.
    pub fn to_json_line(&self) -> String {
        let mut data_text = self.event.data_json();
        if let Some((task, _)) = self.step.as_ref().and_then(StepName::task)
            && !self.event.has_task()
            && let Some(rest) = data_text.strip_prefix('{')
        {
            let task = serde_json::to_string(task).unwrap_or_default();
            let comma = if rest.starts_with('}') { "" } else { "," };
            data_text = format!("{{\"task\":{task}{comma}{rest}");
        }
        let null = serde_json::value::RawValue::NULL;
        let raw = serde_json::value::RawValue::from_string(data_text).ok();
        let data = raw.as_deref().unwrap_or(null);
        let line = Line {
            run: &self.run,
            seq: self.seq,
            ts: self.ts,
            kind: self.event.kind(),
            step: self.step.as_ref(),
            data,
        };
        serde_json::to_string(&line).unwrap_or_default()
    }

    /// Parses a line [`Record::to_json_line`] wrote.
    pub fn from_json_line(text: &str) -> Result<Record, RecordError> {
        let mut line: OwnedLine = serde_json::from_str(text)?;
        // The task of a phase step's event is its step's, added on the way out.
        if line.step.as_ref().and_then(StepName::task).is_some()
            && let serde_json::Value::Object(data) = &mut line.data
            && !matches!(
                line.kind.as_str(),
                "task.state" | "policy.grant" | "policy.refuse"
            )
        {
            data.remove("task");
        }
        let event = Event::from_parts(&line.kind, &line.data.to_string())?;
        Ok(Record {
            run: line.run,
            seq: line.seq,
            ts: line.ts,
            step: line.step,
            event,
        })
    }
}
