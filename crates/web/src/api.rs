//! The JSON API (Appendix A): `GET /api/runs`, `/api/runs/<id>`,
//! `/api/runs/<id>/events?type=&step=&after=&limit=`, `/api/runs/<id>/egress`; and
//! `/api/runs/<id>/diffs/<blob>`, a step attempt's recorded diff as text.

use axum::extract::{Path, RawQuery, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use cordon_protocol::{Event, Record, StepName};
use cordon_store::EventFilter;
use serde::Serialize;

use crate::{AppState, RunView, WebError, query};

/// The largest page of events one request returns; page on with `after=`.
pub const MAX_EVENTS: usize = 10_000;

/// A JSON response.
fn json(value: &impl Serialize) -> Response {
    json_text(serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned()))
}

fn json_text(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// One line of `GET /api/runs`: the `runs --json` shape.
#[derive(Serialize)]
pub struct RunSummary {
    pub id: String,
    pub pipeline: String,
    pub status: &'static str,
    pub started: Option<String>,
    pub finished: Option<String>,
    pub attempt: u32,
}

impl RunSummary {
    pub fn of(view: &RunView) -> RunSummary {
        RunSummary {
            id: view.id.to_string(),
            pipeline: view.pipeline.clone(),
            status: view.status().as_str(),
            started: view.started.map(|t| t.to_string()),
            finished: view.finished.map(|t| t.to_string()),
            attempt: view.attempt,
        }
    }
}

pub(crate) async fn runs(State(state): State<AppState>) -> Result<Response, WebError> {
    let views = state.summaries().await?;
    let list: Vec<RunSummary> = views.iter().rev().map(RunSummary::of).collect();
    Ok(json(&list))
}

pub(crate) async fn run(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, WebError> {
    let row = state.resolve(id).await?;
    Ok(json(&state.view(row).await?))
}

/// Records as their `--json` objects (`run, seq, ts, type, step, data`).
pub(crate) fn records_json(records: &[Record]) -> String {
    let mut out = String::from("[");
    for (i, record) in records.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&record.to_json_line());
    }
    out.push(']');
    out
}

/// Parses `type` (repeatable, prefix match), `step`, `after` and `limit`.
pub(crate) fn filter(raw: Option<&str>) -> Result<EventFilter, WebError> {
    let mut filter = EventFilter {
        limit: Some(MAX_EVENTS),
        ..EventFilter::default()
    };
    let bad = |name: &str, detail: String| WebError::BadQuery {
        name: name.to_owned(),
        detail,
    };
    for (key, value) in query::pairs(raw) {
        match key.as_str() {
            "type" => filter.types.extend(
                value
                    .split(',')
                    .filter(|t| !t.is_empty())
                    .map(str::to_owned),
            ),
            "step" if !value.is_empty() => {
                filter.step =
                    Some(StepName::parse(&value).map_err(|e| bad("step", e.to_string()))?);
            }
            "after" if !value.is_empty() => {
                filter.after = value
                    .parse()
                    .map_err(|_| bad("after", format!("`{value}` is not a sequence number")))?;
            }
            "limit" if !value.is_empty() => {
                let limit: usize = value
                    .parse()
                    .map_err(|_| bad("limit", format!("`{value}` is not a count")))?;
                filter.limit = Some(limit.clamp(1, MAX_EVENTS));
            }
            _ => {}
        }
    }
    Ok(filter)
}

pub(crate) async fn events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, WebError> {
    let filter = filter(raw.as_deref())?;
    let row = state.resolve(id).await?;
    let records = state.read(move |r| Ok(r.events(row.id, &filter)?)).await?;
    Ok(json_text(records_json(&records)))
}

/// One egress record with where it sits in the run.
#[derive(Serialize)]
pub struct EgressEntry {
    pub seq: u64,
    pub ts: String,
    /// `allow`, `deny` or `close`.
    pub event: &'static str,
    #[serde(flatten)]
    pub audit: cordon_protocol::event::AuditRecord,
}

pub(crate) async fn egress(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, WebError> {
    let row = state.resolve(id).await?;
    let filter = EventFilter {
        types: vec!["egress".to_owned()],
        ..EventFilter::default()
    };
    let records = state.read(move |r| Ok(r.events(row.id, &filter)?)).await?;
    let entries: Vec<EgressEntry> = records
        .into_iter()
        .filter_map(|record| {
            let (event, mut audit) = match record.event {
                Event::EgressAllow(a) => ("allow", a),
                Event::EgressDeny(a) => ("deny", a),
                Event::EgressClose(a) => ("close", a),
                _ => return None,
            };
            // The step the event was attributed to wins over the listener's own label.
            if let Some(step) = record.step {
                audit.step = Some(step.as_str().to_owned());
            }
            Some(EgressEntry {
                seq: record.seq,
                ts: record.ts.to_string(),
                event,
                audit,
            })
        })
        .collect();
    Ok(json(&entries))
}

/// The largest diff served; a recorded patch is capped well below (`PatchLimits`).
pub const MAX_DIFF: usize = 16 << 20;

/// `GET /api/runs/<id>/diffs/<blob>`: the patch one of the run's `step.finished` events recorded,
/// as text. Only such blobs are served — never another blob of the store (a step's stored output,
/// another run's) — and as `text/plain` the browser never runs it.
pub(crate) async fn diff(
    State(state): State<AppState>,
    Path((id, blob)): Path<(String, String)>,
) -> Result<Response, WebError> {
    let blob: u64 = blob
        .parse()
        .map_err(|_| WebError::NotFound(format!("no diff `{blob}`")))?;
    let blob = cordon_protocol::event::BlobId(blob);
    let row = state.resolve(id).await?;
    let filter = EventFilter {
        types: vec!["step.finished".to_owned()],
        ..EventFilter::default()
    };
    let bytes = state
        .read(move |r| {
            let recorded = r.events(row.id, &filter)?.iter().any(|record| {
                matches!(&record.event, Event::StepFinished { diff: Some(d), .. } if *d == blob)
            });
            Ok(if recorded { r.blob(blob)? } else { None })
        })
        .await?
        .ok_or_else(|| WebError::NotFound(format!("run has no diff {}", blob.0)))?;
    let mut text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_DIFF)]).into_owned();
    if bytes.len() > MAX_DIFF {
        text.push_str("\n# cordon: the rest of this diff is not shown\n");
    }
    Ok((
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        text,
    )
        .into_response())
}
