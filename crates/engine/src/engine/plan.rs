//! `--plan`: the run's plan marked done when the run succeeds (DESIGN §17). The mark is a host
//! write into the workspace, so it goes through the workspace view (§18): a regular file only,
//! written beside itself and renamed over it. It goes into the run's commit when the commit is
//! the run's last step (a commit action whose `on_pass` is `success`, an outcome run's `commit:
//! end`); otherwise it is made when the run finishes and left for the user to commit.

use cordon_protocol::RunId;
use cordon_protocol::event::Outcome;

use super::{Engine, Failure};
use crate::run::MAX_DOCUMENT;

/// How far from the top a `Status:` line is looked for.
const STATUS_WITHIN: usize = 10;

/// `text` with its status saying `run` completed it: the first `Status:` line within the top ten
/// lines replaced, else the line inserted after the first `# ` title (at the top when there is
/// none). `None` when the text already holds the mark.
pub fn marked(text: &str, run: RunId) -> Option<String> {
    let mark = format!("Status: COMPLETED (cordon run {run})");
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    if lines.iter().any(|line| line.trim_end() == mark) {
        return None;
    }
    let ending = |line: &str| if line.ends_with("\r\n") { "\r\n" } else { "\n" };
    let mut out = String::with_capacity(text.len() + mark.len() + 2);
    let status = lines
        .iter()
        .take(STATUS_WITHIN)
        .position(|line| line.trim_start().starts_with("Status:"));
    if let Some(at) = status {
        for (i, line) in lines.iter().enumerate() {
            if i == at {
                out.push_str(&mark);
                if line.ends_with('\n') {
                    out.push_str(ending(line));
                }
            } else {
                out.push_str(line);
            }
        }
        return Some(out);
    }
    let title = lines.iter().position(|line| line.starts_with("# "));
    let Some(title) = title else {
        let newline = lines.first().map_or("\n", |line| ending(line));
        out.push_str(&mark);
        out.push_str(newline);
        out.push_str(text);
        return Some(out);
    };
    for (i, line) in lines.iter().enumerate() {
        out.push_str(line);
        if i == title {
            let newline = ending(line);
            if !line.ends_with('\n') {
                out.push_str(newline);
            }
            out.push_str(&mark);
            out.push_str(newline);
        }
    }
    Some(out)
}

impl Engine<'_> {
    /// Marks the run's plan done in the workspace. `Ok(Some(old))`: the plan's text before the
    /// mark, to put back when the commit the mark was made for fails; `Ok(None)`: no plan, or
    /// marked already. `Err`: why it could not be marked (the plan was removed, replaced by a
    /// link, grown past the bound or made binary by a step).
    pub(super) fn mark_plan(&self) -> Result<Option<Vec<u8>>, String> {
        let Some(path) = &self.cx.plan else {
            return Ok(None);
        };
        let shown = path.shown();
        let view = self.cx.workspace.view();
        let read = view
            .read(path, MAX_DOCUMENT + 1)
            .map_err(|err| format!("the plan {shown} was not marked done: {err}"))?
            .ok_or_else(|| format!("the plan {shown} was not marked done: it was removed"))?;
        if read.bytes.len() > MAX_DOCUMENT || read.omitted() > 0 {
            return Err(format!(
                "the plan {shown} was not marked done: it grew past {} KiB",
                MAX_DOCUMENT >> 10
            ));
        }
        let Ok(text) = std::str::from_utf8(&read.bytes) else {
            return Err(format!(
                "the plan {shown} was not marked done: it is no longer UTF-8 text"
            ));
        };
        let Some(new) = marked(text, self.cx.run) else {
            return Ok(None);
        };
        view.write(path, new.as_bytes())
            .map_err(|err| format!("the plan {shown} was not marked done: {err}"))?;
        Ok(Some(read.bytes))
    }

    /// Puts back the plan's text from before a mark whose commit failed: a failed run's plan is
    /// not marked done.
    pub(super) fn unmark_plan(&self, old: Option<Vec<u8>>) {
        if let (Some(path), Some(old)) = (&self.cx.plan, old) {
            // Best effort: the run is failing anyway, and a mark left behind names its run.
            let _ = self.cx.workspace.view().write(path, &old);
        }
    }

    /// Appends `run.finished`; a successful run marks its plan done first (a plan that cannot
    /// be marked is said in the reason, the run still succeeds: its work is done).
    pub(super) fn finish(&mut self, outcome: Outcome, reason: String) -> Result<(), Failure> {
        let mut reason = reason;
        if outcome == Outcome::Success
            && let Err(why) = self.mark_plan()
        {
            reason = if reason.is_empty() {
                why
            } else {
                format!("{reason}; {why}")
            };
        }
        // The report's summary comes before the run is finished: a forge that is down leaves
        // the run resumable, never silently finished without it.
        self.report_end(outcome)?;
        self.append(
            None,
            cordon_protocol::Event::RunFinished { outcome, reason },
        )
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> RunId {
        RunId::from_parts(1_769_860_800_000, 42)
    }

    #[test]
    fn the_plan_mark_replaces_a_status_line_or_follows_the_title() {
        let mark = format!("Status: COMPLETED (cordon run {})", run());
        let cases: &[(&str, String)] = &[
            (
                "# Plan\nStatus: draft\n- a\n",
                format!("# Plan\n{mark}\n- a\n"),
            ),
            (
                "# Plan\n\n  Status: in progress\r\nbody\r\n",
                format!("# Plan\n\n{mark}\r\nbody\r\n"),
            ),
            ("# Plan\n- a\n", format!("# Plan\n{mark}\n- a\n")),
            ("intro\n# Plan", format!("intro\n# Plan\n{mark}\n")),
            ("no title\n", format!("{mark}\nno title\n")),
            ("", format!("{mark}\n")),
            (
                "# T\n1\n2\n3\n4\n5\n6\n7\n8\n9\nStatus: late\n",
                format!("# T\n{mark}\n1\n2\n3\n4\n5\n6\n7\n8\n9\nStatus: late\n"),
            ),
            ("Status: x", mark.clone()),
        ];
        for (text, want) in cases {
            assert_eq!(
                marked(text, run()).as_deref(),
                Some(want.as_str()),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_plan_marked_by_its_run_is_left_as_it_is() {
        let once = marked("# Plan\n- a\n", run()).expect("marked");
        assert_eq!(marked(&once, run()), None);
        let deep = format!("{}# Plan\n", "line\n".repeat(20));
        let once = marked(&deep, run()).expect("marked");
        assert_eq!(
            marked(&once, run()),
            None,
            "a mark below the top ten still counts"
        );
        let other = marked("# Plan\n", RunId::from_parts(1, 1)).expect("marked");
        assert_ne!(
            marked(&other, run()),
            None,
            "another run's mark is replaced"
        );
    }
}
