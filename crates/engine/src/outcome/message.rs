//! The task messages of an outcome run's phases (DESIGN §13): what each phase's agent is told,
//! on top of the task message every agent step gets. Every phase's message holds the task's id,
//! title, description and acceptance criteria; each adds what its phase works on.

use std::fmt::Write as _;

use cordon_pipeline::{CommandSpec, OutcomeSpec};
use cordon_protocol::event::PlannedTask;

use super::state::TaskProgress;
use super::submit::Plan;

/// The most bytes of a diff put into a scrutinize or validate message.
pub const MAX_DIFF: usize = 64 << 10;

/// What a phase is told besides the task.
pub struct Extra<'a> {
    /// The diff since the task began (scrutinize, validate).
    pub diff: Option<&'a str>,
    /// `commit: per_task`: the diff is exactly the task's; otherwise it holds earlier tasks too.
    pub per_task: bool,
}

/// The decompose step's message; `previous`: why the last attempt ended without a graph.
pub fn decompose(outcome: &str, spec: &OutcomeSpec, previous: Option<&str>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## Outcome\n\n{}\n", outcome.trim_end());
    if let Some(why) = previous {
        let _ = writeln!(
            out,
            "## The last attempt\n\nIt ended without an accepted graph: {}\n",
            why.trim_end()
        );
    }
    let _ = writeln!(
        out,
        "Break this outcome into a graph of tasks and submit it with the `submit_tasks` tool \
         (at most {} tasks). cordon carries out each task on its own, in dependency order: it is \
         planned, executed, reviewed, verified and validated, and a task runs only after every \
         task it depends on is done. Give each task a short id, a one-line title, a description \
         of what to change and acceptance criteria a reviewer can check.",
        spec.max_tasks
    );
    let common = commands(spec.verify.iter().map(|c| &c.command));
    if !common.is_empty() {
        let _ = writeln!(
            out,
            "\nEvery task must pass these commands; list further ones a task needs in its \
             `verify`:\n{common}"
        );
    }
    out.push_str("\nDo not change files in this phase; explore only as much as you need.\n");
    out
}

/// The message of `phase` for `task`.
pub fn phase(
    phase: &str,
    outcome: &str,
    task: &PlannedTask,
    progress: &TaskProgress,
    spec: &OutcomeSpec,
    extra: &Extra<'_>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## Outcome of the run\n\n{}\n", outcome.trim_end());
    describe(&mut out, task);
    let verify = verify_list(task, progress.plan.as_ref(), spec);
    match phase {
        "plan" => {
            if let Some(why) = progress.reason.as_deref().filter(|_| progress.replan > 0) {
                let _ = writeln!(
                    out,
                    "## Why this task is planned again (replan {})\n\n{}\n",
                    progress.replan,
                    why.trim_end()
                );
            }
            out.push_str(
                "## Your job: plan this task\n\nRead what you need, then submit the plan with \
                 the `submit_plan` tool: the steps, commands that verify the task (they run in a \
                 sandbox after execution and must exit 0) and any network destination the \
                 execution needs, each with a reason (each is granted or refused at once). Do \
                 not change files in this phase.\n",
            );
        }
        "execute" => {
            plan(&mut out, progress.plan.as_ref());
            if !progress.grants.is_empty() {
                let _ = writeln!(
                    out,
                    "## Network granted to this task\n\n{}\n",
                    progress
                        .grants
                        .iter()
                        .map(|g| format!("- `{g}`"))
                        .collect::<Vec<_>>()
                        .join("\n")
                );
            }
            if progress.revision > 0
                && let Some(why) = &progress.reason
            {
                let _ = writeln!(
                    out,
                    "## Revision {}: what to fix\n\n{}\n",
                    progress.revision,
                    why.trim_end()
                );
            }
            let _ = writeln!(
                out,
                "## Your job: carry out the plan\n\nChange the workspace so the task meets every \
                 acceptance criterion. Afterwards these commands must pass:\n{verify}"
            );
        }
        "scrutinize" => {
            plan(&mut out, progress.plan.as_ref());
            diff(&mut out, extra);
            out.push_str(
                "## Your job: review the change\n\nThe workspace is read-only for you. Check the \
                 change against the task's acceptance criteria and the plan: what is wrong, \
                 missing or risky, with the file and line. Your last message is your report; \
                 it goes to the validator.\n",
            );
        }
        "validate" => {
            plan(&mut out, progress.plan.as_ref());
            diff(&mut out, extra);
            let _ = writeln!(
                out,
                "## The critic's findings\n\n{}\n",
                progress.findings.as_deref().unwrap_or("(none)").trim_end()
            );
            let _ = writeln!(out, "## Verify\n\nThese commands passed:\n{verify}");
            out.push_str(
                "## Your job: decide\n\nEnd your last message with exactly one of these lines:\n\
                 - `VERDICT: ACCEPT` — the task meets its acceptance criteria;\n\
                 - `VERDICT: REVISE` — execute again; say above it what to fix;\n\
                 - `VERDICT: REPLAN` — the plan is wrong; say above it why.\n",
            );
        }
        _ => {}
    }
    out
}

fn describe(out: &mut String, task: &PlannedTask) {
    let _ = writeln!(out, "## Task `{}`: {}\n", task.id, task.title);
    if !task.description.trim().is_empty() {
        let _ = writeln!(out, "{}\n", task.description.trim_end());
    }
    if !task.acceptance.is_empty() {
        out.push_str("Acceptance criteria:\n");
        for item in &task.acceptance {
            let _ = writeln!(out, "- {item}");
        }
        out.push('\n');
    }
}

fn plan(out: &mut String, plan: Option<&Plan>) {
    let Some(plan) = plan else { return };
    out.push_str("## The plan\n\n");
    for (index, step) in plan.steps.iter().enumerate() {
        let _ = writeln!(out, "{}. {step}", index + 1);
    }
    out.push('\n');
}

fn diff(out: &mut String, extra: &Extra<'_>) {
    let heading = if extra.per_task {
        "## The change (the diff since the task began)"
    } else {
        "## The change (the diff since the run began; earlier accepted tasks included)"
    };
    match extra.diff {
        None => {
            let _ = writeln!(out, "{heading}\n\n(no change)\n");
        }
        Some(text) => {
            let mut cut = text.len().min(MAX_DIFF);
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            let _ = writeln!(out, "{heading}\n\n```diff\n{}", &text[..cut]);
            if cut < text.len() {
                let _ = writeln!(
                    out,
                    "[cordon: {} more bytes of the diff not shown; read the files]",
                    text.len() - cut
                );
            }
            out.push_str("```\n\n");
        }
    }
}

/// Every verify command of `task`, as a Markdown list.
fn verify_list(task: &PlannedTask, plan: Option<&Plan>, spec: &OutcomeSpec) -> String {
    let mut list = commands(spec.verify.iter().map(|c| &c.command));
    for command in task
        .verify
        .iter()
        .chain(plan.map(|p| p.verify.as_slice()).unwrap_or_default())
    {
        let _ = writeln!(list, "- `{command}`");
    }
    if list.is_empty() {
        list.push_str("(none)\n");
    }
    list
}

fn commands<'a>(specs: impl Iterator<Item = &'a CommandSpec>) -> String {
    let mut list = String::new();
    for spec in specs {
        let _ = writeln!(list, "- `{}`", shown(spec));
    }
    list
}

/// A command as shown to a model or a person.
pub fn shown(spec: &CommandSpec) -> String {
    match spec {
        CommandSpec::Shell(text) => text.clone(),
        CommandSpec::Argv(argv) => argv.join(" "),
    }
}
