//! The terminal's view of a run (DESIGN §8): on a terminal, one live line per step (status,
//! attempt, elapsed time, a spinner while it runs, and the resource gauges of its latest sample —
//! `mem 120 MiB/512 MiB · disk 42%`), redrawn in place; otherwise — stderr not a
//! terminal, or `NO_COLOR` set — plain lines as steps start and finish. Notices (setup hooks,
//! commits, resource warnings, errors) print as lines in both modes, and so do, unless `--quiet`,
//! the last 20 lines of a failed step's output and one line per agent tool call; a summary table
//! follows at the end. With `--json` it prints nothing (the events go to stdout instead).
//!
//! The state is `cordon_web::RunView`, the same fold the run page reads.

use std::io::{IsTerminal as _, Write};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cordon_protocol::event::{RunKind, Verdict};
use cordon_protocol::text::escape_line;
use cordon_protocol::{Event, Record, RunId};
use cordon_web::{Graph, ResourceSample, RunView, StepStatus, StepView};

/// How the view prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Redrawn lines with colours and a spinner.
    Live,
    /// One line per change, no escape sequences.
    Plain,
    /// Nothing (`--json`).
    Quiet,
}

impl Mode {
    /// `Quiet` with `--json`; `Live` when stderr is a terminal, `NO_COLOR` is unset or empty and
    /// `TERM` is not `dumb`; `Plain` otherwise.
    pub fn detect(json: bool) -> Mode {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
        match (json, std::io::stderr().is_terminal() && !no_color && !dumb) {
            (true, _) => Mode::Quiet,
            (false, true) => Mode::Live,
            (false, false) => Mode::Plain,
        }
    }
}

/// Spinner frames, one per tick.
const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
const TICK: Duration = Duration::from_millis(100);

struct Inner {
    view: RunView,
    /// Lines of the live block currently on screen.
    drawn: usize,
    frame: usize,
    /// Nothing is drawn before [`Progress::show`] (the `run` and `ui` lines come first).
    visible: bool,
    done: bool,
    /// The sessions' memory cap (`isolation.memory`), shown beside the memory gauge.
    memory_cap: Option<u64>,
    /// Failure tails and tool-call lines shown (not with `--quiet`).
    detail: bool,
    /// Tool calls waiting for their result: id → (tool, its arguments in one line, when).
    calls: std::collections::HashMap<String, (String, String, u64)>,
    /// Per agent step: the first line of its latest model turn's text (its final message once
    /// the step finishes), and whether that turn's text is still to come.
    said: std::collections::HashMap<String, (Option<String>, bool)>,
}

/// Lines of a failed command step's output shown under its line.
const TAIL_LINES: usize = 20;
/// Characters of a tool call's arguments shown on its line.
const ARGUMENT_CHARS: usize = 60;
/// Tool calls remembered while waiting for their results (a model may issue many at once).
const PENDING_CALLS: usize = 256;

/// The progress view of one run. On resume, fold the earlier events in with
/// [`Progress::catch_up`]; call [`Progress::show`] once the `run` (and `ui`) lines are printed;
/// feed it every appended record ([`Progress::record`]); end with [`Progress::finish`].
pub struct Progress {
    mode: Mode,
    inner: Arc<Mutex<Inner>>,
}

impl Progress {
    /// A view of `run` whose steps are `graph`'s (all shown `pending` until they start).
    pub fn new(run: RunId, pipeline: &str, graph: Graph, mode: Mode) -> Progress {
        let mut view = RunView::new(run, pipeline, Some(graph));
        // This process holds the run while it shows it.
        view.set_held(true);
        let inner = Arc::new(Mutex::new(Inner {
            view,
            drawn: 0,
            frame: 0,
            visible: false,
            done: false,
            memory_cap: None,
            detail: true,
            calls: std::collections::HashMap::new(),
            said: std::collections::HashMap::new(),
        }));
        if mode == Mode::Live {
            let ticker = Arc::clone(&inner);
            // Redraws the spinner and elapsed times between events; ends with `finish`.
            let _ = std::thread::Builder::new()
                .name("cordon-progress".to_owned())
                .spawn(move || {
                    loop {
                        std::thread::sleep(TICK);
                        let mut inner = ticker.lock().unwrap_or_else(PoisonError::into_inner);
                        if inner.done {
                            break;
                        }
                        inner.frame = inner.frame.wrapping_add(1);
                        redraw(&mut inner);
                    }
                });
        }
        Progress { mode, inner }
    }

    /// With `quiet`, only step lines, notices and the summary: no failure tails, no tool calls.
    pub fn set_quiet(&self, quiet: bool) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.detail = !quiet;
    }

    /// Shows `cap` beside the memory gauge (the pipeline's `isolation.memory`).
    pub fn set_memory_cap(&self, cap: Option<u64>) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.memory_cap = cap;
    }

    /// Folds records appended before this process took the run over (resume), printing nothing.
    pub fn catch_up(&self, records: &[Record]) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        for record in records {
            inner.view.apply(record);
        }
    }

    /// Starts drawing (the live block appears below what was printed so far).
    pub fn show(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.visible = true;
        if self.mode == Mode::Live {
            redraw(&mut inner);
        }
    }

    pub fn record(&self, record: &Record) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.view.apply(record);
        if !inner.visible {
            return;
        }
        let details = if inner.detail && self.mode != Mode::Quiet {
            details(&mut inner, record)
        } else {
            Vec::new()
        };
        match self.mode {
            Mode::Quiet => {}
            Mode::Live => {
                // What goes under a finished step (its output's tail, an agent's final message)
                // stays on screen with the step's own line above it; the live block moves on.
                let header = match record.event {
                    Event::StepFinished { .. } if !details.is_empty() => {
                        plain_line(&inner.view, record)
                    }
                    _ => None,
                };
                let lines: Vec<String> = notice(&inner.view, record)
                    .into_iter()
                    .chain(header)
                    .chain(details)
                    .collect();
                if !lines.is_empty() {
                    // Above the live block: clear it, print the lines, draw it again below.
                    let mut err = std::io::stderr().lock();
                    if inner.drawn > 0 {
                        let _ = write!(err, "\x1b[{}A\r\x1b[J", inner.drawn);
                        inner.drawn = 0;
                    }
                    // They carry text the sandbox made (reasons, output, arguments): escaped.
                    for line in lines {
                        let _ = writeln!(err, "{}", escape_line(&line));
                    }
                }
                redraw(&mut inner);
            }
            Mode::Plain => {
                // A closed stderr (`cordon run … 2>&1 | head`) must not stop the run: write,
                // never panic.
                let line = plain_line(&inner.view, record).or_else(|| notice(&inner.view, record));
                // Plain lines hold no escape sequence of cordon's own: each line is escaped, so
                // nothing a step wrote reaches the terminal as a control character.
                let mut err = std::io::stderr().lock();
                for line in line.into_iter().chain(details) {
                    let _ = writeln!(err, "{}", escape_line(&line));
                }
            }
        }
    }

    /// Stops the live block and prints the summary table.
    pub fn finish(self) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.done = true;
        if self.mode == Mode::Quiet {
            return;
        }
        let mut err = std::io::stderr().lock();
        if self.mode == Mode::Live && inner.drawn > 0 {
            let _ = write!(err, "\x1b[{}A\r\x1b[J", inner.drawn);
            inner.drawn = 0;
        }
        // This process no longer holds the run: a step it left open was interrupted.
        inner.view.set_held(false);
        let _ = write!(err, "{}", summary(&inner.view, now_millis()));
        let _ = err.flush();
    }
}

fn redraw(inner: &mut Inner) {
    if inner.done || !inner.visible {
        return;
    }
    let lines = live_lines(&inner.view, now_millis(), inner.frame, inner.memory_cap);
    let mut err = std::io::stderr().lock();
    let mut text = String::new();
    if inner.drawn > 0 {
        text.push_str(&format!("\x1b[{}A", inner.drawn));
    }
    for line in &lines {
        text.push_str("\r\x1b[2K");
        text.push_str(line);
        text.push('\n');
    }
    text.push_str("\x1b[J");
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
    inner.drawn = lines.len();
}

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `1.2s`, `42.0s`, `3m07s`, `1h02m`.
fn duration(millis: u64) -> String {
    let secs = millis / 1000;
    match secs {
        0..60 => format!("{}.{}s", secs, millis % 1000 / 100),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs / 60 % 60),
    }
}

fn elapsed(step: &StepView, now: u64) -> Option<u64> {
    let started = step.started?.unix_millis();
    let end = step.finished.map_or(now, |t| t.unix_millis());
    Some(end.saturating_sub(started))
}

fn name_width(view: &RunView) -> usize {
    view.steps()
        .iter()
        .map(|s| s.name.as_str().len())
        .max()
        .unwrap_or(4)
        .max(4)
}

/// The live block: one coloured line per step; for an outcome run, the task table and the
/// steps running now.
fn live_lines(view: &RunView, now: u64, frame: usize, memory_cap: Option<u64>) -> Vec<String> {
    let width = name_width(view);
    let outcome = view.kind == RunKind::Outcome && !view.tasks.is_empty();
    let mut lines = if outcome {
        task_lines(view)
    } else {
        Vec::new()
    };
    lines.extend(step_lines(view, now, frame, memory_cap, width, outcome));
    lines
}

/// An outcome run's task table (id, title, state, phase, revision, replans), a line per task.
fn task_lines(view: &RunView) -> Vec<String> {
    let id_width = view
        .tasks
        .iter()
        .map(|t| t.id.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let mut lines = vec![format!(
        "{:<id_width$}  {:<TITLE$}  {:<12}  {:<10}  {:>8}  {:>7}",
        "task", "title", "state", "phase", "revision", "replans"
    )];
    for task in &view.tasks {
        lines.push(format!(
            "{:<id_width$}  {:<TITLE$}  {:<12}  {:<10}  {:>8}  {:>7}",
            task.id,
            cut(&escape_line(&task.title), TITLE),
            task.state.as_str(),
            task.phase().unwrap_or("-"),
            task.revision,
            task.replan
        ));
    }
    lines
}

/// Characters of a task title in the task table.
const TITLE: usize = 32;

fn step_lines(
    view: &RunView,
    now: u64,
    frame: usize,
    memory_cap: Option<u64>,
    width: usize,
    only_open: bool,
) -> Vec<String> {
    view.steps()
        .iter()
        .filter(|step| !only_open || step.is_open())
        .map(|step| {
            let status = step.status(view.held);
            let (icon, colour) = match status {
                StepStatus::Pending => ("·", "2"),
                StepStatus::Running => (SPINNER[frame % SPINNER.len()], "34"),
                StepStatus::Passed => ("✓", "32"),
                StepStatus::Failed => ("✗", "31"),
                StepStatus::Unverifiable => ("?", "33"),
            };
            let mut line = format!(
                "\x1b[{colour}m{icon}\x1b[0m {:<width$}  \x1b[{colour}m{:<7}\x1b[0m",
                step.name.as_str(),
                status.as_str()
            );
            if let Some(attempt) = step.attempt {
                line.push_str(&format!("  attempt {attempt}"));
            }
            if let Some(ms) = elapsed(step, now).filter(|_| status != StepStatus::Pending) {
                line.push_str(&format!("  {}", duration(ms)));
            }
            if let (StepStatus::Failed, Some(detail)) = (status, failure(step)) {
                line.push_str(&format!("  \x1b[2m{detail}\x1b[0m"));
            }
            if let (StepStatus::Running, Some(gauges)) =
                (status, step.resources.and_then(|s| gauges(&s, memory_cap)))
            {
                line.push_str(&format!("  \x1b[2m{gauges}\x1b[0m"));
            }
            line
        })
        .collect()
}

/// A sample as gauges: `mem 120 MiB/512 MiB · disk 42%` (the cap when known); `None` when
/// it holds nothing.
fn gauges(sample: &ResourceSample, memory_cap: Option<u64>) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(used) = sample.memory_bytes {
        parts.push(match memory_cap {
            Some(cap) => format!("mem {}/{}", mib(used), mib(cap)),
            None => format!("mem {}", mib(used)),
        });
    }
    if let Some(percent) = sample.disk_percent {
        parts.push(format!("disk {percent}%"));
    }
    (!parts.is_empty()).then(|| parts.join(" · "))
}

/// Bytes in whole MiB (GiB with one decimal from 10 GiB on).
fn mib(bytes: u64) -> String {
    let mib = bytes >> 20;
    if mib >= 10 << 10 {
        format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
    } else {
        format!("{mib} MiB")
    }
}

/// The plain line for a record that changes what a person should know, if any.
fn plain_line(view: &RunView, record: &Record) -> Option<String> {
    let step = record
        .step
        .as_ref()
        .and_then(|name| view.steps().iter().find(|s| &s.name == name));
    let width = name_width(view);
    match (&record.event, step) {
        (Event::StepStarted { attempt }, Some(step)) => Some(format!(
            "{:<width$}  running  attempt {attempt}",
            step.name.as_str()
        )),
        (Event::StepFinished { attempt, .. }, Some(step)) => {
            let status = step.status(view.held);
            let mut line = format!(
                "{:<width$}  {:<7}  attempt {attempt}",
                step.name.as_str(),
                status.as_str()
            );
            if let Some(ms) = elapsed(step, record.ts.unix_millis()) {
                line.push_str(&format!("  {}", duration(ms)));
            }
            // A passed outcome phase's reason is its report (a critic's findings), shown as
            // its final message below, not as a failure.
            let report = status == StepStatus::Passed && step.name.task().is_some();
            if let Some(detail) = failure(step).filter(|_| !report) {
                line.push_str(&format!("  {detail}"));
            }
            Some(line)
        }
        (Event::AttemptRetry { attempt, .. }, _) => Some(format!("retry: attempt {attempt}")),
        _ => None,
    }
}

/// Why the step's latest attempt failed, in one line: its reason (escaped: it may hold what a
/// step or a model wrote), else its exit status.
fn failure(step: &StepView) -> Option<String> {
    match (&step.reason, step.exit_code) {
        (Some(reason), _) => Some(escape_line(first_line(reason)).into_owned()),
        (None, Some(code)) if code != 0 => Some(format!("exit {code}")),
        _ => None,
    }
}

/// The lines under a step's own (DESIGN §12): the last [`TAIL_LINES`] of a failed step's
/// output, and one line per finished tool call of an agent step
/// (`  bash  pytest -q  → exit 1  0.8s`). Unescaped: the caller escapes each line.
fn details(inner: &mut Inner, record: &Record) -> Vec<String> {
    let step_name = record.step.as_ref().map(|s| s.as_str().to_owned());
    match (&record.event, step_name) {
        // A model turn's text is the first output after its answer.
        (
            Event::LlmResponse {
                source: cordon_protocol::event::LlmSource::Agent,
                ..
            },
            Some(step),
        ) => {
            if inner.said.len() >= PENDING_CALLS {
                inner.said.clear();
            }
            inner.said.insert(step, (None, true));
            return Vec::new();
        }
        (Event::StepOutput { text, .. }, Some(step)) => {
            if let Some((said, awaiting @ true)) = inner.said.get_mut(&step) {
                *awaiting = false;
                *said = text
                    .lines()
                    .map(str::trim)
                    .find(|l| !l.is_empty() && !l.starts_with("$ "))
                    .map(str::to_owned);
            }
            return Vec::new();
        }
        (Event::ToolCall { .. }, Some(step)) => {
            // A turn that called a tool was not the final one.
            if let Some((said, _)) = inner.said.get_mut(&step) {
                *said = None;
            }
        }
        (Event::StepFinished { .. }, Some(step)) => {
            if let Some((Some(said), _)) = inner.said.remove(&step) {
                let mut lines = tail(inner, record);
                lines.insert(0, format!("  {}", cut(&said, ARGUMENT_CHARS * 2)));
                return lines;
            }
        }
        _ => {}
    }
    match &record.event {
        Event::ToolCall {
            id,
            name,
            arguments,
            ..
        } => {
            if inner.calls.len() >= PENDING_CALLS {
                inner.calls.clear();
            }
            let shown = argument_line(arguments);
            inner
                .calls
                .insert(id.clone(), (name.clone(), shown, record.ts.unix_millis()));
            Vec::new()
        }
        Event::ToolResult { id, ok, output, .. } => {
            let Some((name, arguments, started)) = inner.calls.remove(id) else {
                return Vec::new();
            };
            let result = match exit_code(output) {
                Some(code) => format!("exit {code}"),
                None if *ok => "ok".to_owned(),
                None => "failed".to_owned(),
            };
            let took = duration(record.ts.unix_millis().saturating_sub(started));
            vec![format!("  {name}  {arguments}  → {result}  {took}")]
        }
        Event::StepFinished { .. } => tail(inner, record),
        _ => Vec::new(),
    }
}

/// The last [`TAIL_LINES`] of a failed step's output (nothing for a step that passed).
fn tail(inner: &Inner, record: &Record) -> Vec<String> {
    let Event::StepFinished {
        verdict: Verdict::Fail,
        ..
    } = &record.event
    else {
        return Vec::new();
    };
    let Some(step) = record
        .step
        .as_ref()
        .and_then(|name| inner.view.steps().iter().find(|s| &s.name == name))
    else {
        return Vec::new();
    };
    let text = step.console.text();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(TAIL_LINES);
    let mut out = Vec::new();
    if start > 0 || step.console.omitted() > 0 {
        out.push(format!(
            "    … ({} earlier lines: `cordon logs --step {}`)",
            start as u64 + step.console.omitted(),
            step.name.as_str()
        ));
    }
    out.extend(lines[start..].iter().map(|line| format!("    {line}")));
    out
}

/// `text` cut to `chars` characters, an ellipsis marking the cut.
fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// A tool call's arguments on one line, cut to [`ARGUMENT_CHARS`]: the command of `bash`, the
/// path of a file tool, else the arguments as compact JSON.
fn argument_line(arguments: &serde_json::Value) -> String {
    let text = ["command", "path"]
        .iter()
        .find_map(|key| arguments.get(key).and_then(serde_json::Value::as_str))
        .map_or_else(|| arguments.to_string(), str::to_owned);
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(ARGUMENT_CHARS) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

/// The exit status a `bash` tool result reports (`[exit code N]`).
fn exit_code(output: &str) -> Option<i32> {
    let start = output.rfind("[exit code ")? + "[exit code ".len();
    let end = output[start..].find(']')? + start;
    output[start..end].trim().parse().ok()
}

/// A line for what happens besides steps starting and finishing: setup hooks, commits, resource
/// warnings, errors.
fn notice(view: &RunView, record: &Record) -> Option<String> {
    let width = name_width(view);
    let step = record.step.as_ref().map_or("", |s| s.as_str());
    match &record.event {
        Event::SetupRan { exit_code, .. } => {
            Some(format!("{step:<width$}  setup ran (exit {exit_code})"))
        }
        Event::SetupCached { .. } => Some(format!("{step:<width$}  setup up to date")),
        Event::CommitCreated {
            sha,
            files,
            files_omitted,
        } => {
            let count = files.len() as u64 + files_omitted.unwrap_or(0);
            // The files themselves, the first few: what a commit took in (untracked files that
            // are not ignored included) is seen without opening the log.
            const SHOWN: usize = 5;
            let mut list = files
                .iter()
                .take(SHOWN)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            if count > SHOWN as u64 {
                list.push_str(&format!(", and {} more", count - SHOWN as u64));
            }
            Some(format!(
                "{step:<width$}  committed {sha} ({count} file{}{}{list})",
                if count == 1 { "" } else { "s" },
                if list.is_empty() { "" } else { ": " }
            ))
        }
        Event::DeliveryPushed { branch, sha, .. } => Some(format!(
            "{step:<width$}  pushed {} to {branch}",
            &sha[..sha.len().min(12)]
        )),
        Event::DeliveryPullRequest { url, number } => {
            Some(format!("{step:<width$}  pull request #{number}: {url}"))
        }
        Event::ReportComment { url } => Some(format!("report: commented {url}")),
        Event::EgressDropped { count } => Some(format!(
            "{step:<width$}  egress: {count} more records not stored (the session's cap)"
        )),
        Event::ResourcesWarning { message } => {
            Some(format!("{step:<width$}  warning: {}", first_line(message)))
        }
        Event::Error { message } => Some(format!("cordon: {}", first_line(message))),
        Event::TasksPlanned { tasks } => Some(format!(
            "planned {} task{}: {}",
            tasks.len(),
            if tasks.len() == 1 { "" } else { "s" },
            tasks
                .iter()
                .map(|t| t.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Event::TaskState {
            task,
            state,
            revision,
            replan,
            reason,
        } => {
            let mut line = format!("task {task}  {}", state.as_str());
            if *revision > 0 || *replan > 0 {
                line.push_str(&format!("  revision {revision}, replans {replan}"));
            }
            if let Some(reason) = reason {
                line.push_str(&format!(": {}", first_line(reason)));
            }
            Some(line)
        }
        _ => None,
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

/// The table printed when the run ends (or stops): per step, or for an outcome run per task.
fn summary(view: &RunView, now: u64) -> String {
    if view.kind == RunKind::Outcome && !view.tasks.is_empty() {
        let mut out = task_lines(view).join("\n");
        out.push('\n');
        out.push_str(&run_line(view));
        return out;
    }
    let width = name_width(view);
    // Tokens only when a model was called: a pipeline of commands keeps its narrow table; cost
    // only when the pipeline has `llm.pricing`.
    let tokens = view.tokens_in + view.tokens_out > 0;
    let priced = tokens && view.graph.pricing.is_some();
    // A step left open by a process that no longer holds the run was interrupted there.
    let interrupted = |step: &cordon_web::StepView| step.is_open() && !view.held;
    let status_width = if view.steps().iter().any(interrupted) {
        11
    } else {
        7
    };
    let mut out = format!(
        "{:<width$}  {:<status_width$}  {:>6}  {:>7}  {:>7}",
        "step", "status", "starts", "attempt", "time"
    );
    if tokens {
        out.push_str(&format!("  {:>8}", "tokens"));
    }
    if priced {
        out.push_str(&format!("  {:>9}", "cost"));
    }
    out.push('\n');
    for step in view.steps() {
        let status = step.status(view.held);
        let shown_status = if interrupted(step) {
            "interrupted"
        } else {
            status.as_str()
        };
        let attempt = step
            .attempt
            .map_or_else(|| "-".to_owned(), |a| a.to_string());
        let time = elapsed(step, now)
            .filter(|_| status != StepStatus::Pending)
            .map_or_else(|| "-".to_owned(), duration);
        out.push_str(&format!(
            "{:<width$}  {shown_status:<status_width$}  {:>6}  {attempt:>7}  {time:>7}",
            step.name.as_str(),
            step.attempts
        ));
        let used = step.tokens_in + step.tokens_out;
        if tokens {
            let shown = if used == 0 {
                "-".to_owned()
            } else {
                count(used)
            };
            out.push_str(&format!("  {shown:>8}"));
        }
        if let (true, Some(pricing)) = (priced, &view.graph.pricing) {
            let shown = if used == 0 {
                "-".to_owned()
            } else {
                dollars(pricing.cost(step.tokens_in, step.tokens_out))
            };
            out.push_str(&format!("  {shown:>9}"));
        }
        out.push('\n');
    }
    out.push_str(&run_line(view));
    out
}

/// The last line of the summary: how the run ended, its time and what it used.
fn run_line(view: &RunView) -> String {
    let tokens = view.tokens_in + view.tokens_out > 0;
    let priced = tokens && view.graph.pricing.is_some();
    // Only while a process held the run: a resumed run's time does not count the pause.
    let total = match (view.held_since.or(view.started), view.finished) {
        (Some(since), Some(end)) => format!(
            " in {}",
            duration(
                view.held_before_ms
                    .saturating_add(end.unix_millis().saturating_sub(since.unix_millis()))
            )
        ),
        _ => String::new(),
    };
    let ending = match (view.outcome, &view.reason) {
        (Some(outcome), Some(reason)) => {
            format!("{}: {}", outcome.as_str(), escape_line(first_line(reason)))
        }
        (Some(outcome), None) => outcome.as_str().to_owned(),
        // Stopped with a reason (a spent budget): the reason, and how to go on.
        (None, Some(reason)) => format!(
            "stopped: {}; continue with `cordon run --resume {}` and a higher limit",
            escape_line(first_line(reason)),
            view.id
        ),
        (None, None) => format!("stopped; continue with `cordon run --resume {}`", view.id),
    };
    let mut used = if tokens {
        format!(
            ", {} tokens: {} in, {} out",
            count(view.tokens_in + view.tokens_out),
            count(view.tokens_in),
            count(view.tokens_out)
        )
    } else {
        String::new()
    };
    if let (true, Some(pricing)) = (priced, &view.graph.pricing) {
        used.push_str(&format!(
            ", {}",
            dollars(pricing.cost(view.tokens_in, view.tokens_out))
        ));
    }
    format!(
        "run {} {ending} (attempt {}{total}{used})\n",
        view.id, view.attempt
    )
}

/// `$0.0123`: US dollars to four decimals (a cent would hide a cheap model's calls).
fn dollars(amount: f64) -> String {
    format!("${amount:.4}")
}

/// `812`, `12,345`, `1,234,567`.
fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests;
