//! `read_file`, `write_file` and `edit_file`, each a small bash script run through the
//! [`ToolHost`] inside the sandbox (`grep`, `tail`, `head`, `cat`, `mkdir`): the kernel's view of
//! the path decides, never the host's. Relative paths are relative to the workspace root, where
//! tool processes start. `edit_file` reads, replaces in memory and writes back.

use serde::Deserialize;

use super::{Context, FILE_TIMEOUT, Outcome, text};
use crate::agent_loop::AgentError;
use crate::tool_host::{BashOutput, BashRun, ToolHost, ToolHostError};

pub(super) const READ_EXPECTED: &str = r#"{"path": "src/main.py", "offset": 1, "limit": 200}"#;
pub(super) const WRITE_EXPECTED: &str = r#"{"path": "notes.md", "content": "…"}"#;
pub(super) const EDIT_EXPECTED: &str =
    r#"{"path": "src/main.py", "old_string": "…", "new_string": "…"}"#;

/// Lines `read_file` returns when the model gives no `limit`.
const DEFAULT_LIMIT: u64 = 2000;
/// Bytes `read_file` returns at most per call.
const READ_BYTES: u64 = 256 * 1024;
/// The largest file `edit_file` (and [`read_text`]) handles.
const WHOLE_BYTES: u64 = 8 * 1024 * 1024;

/// Exit codes of the scripts for the cases the model gets our own words for.
const IS_DIRECTORY: i32 = 3;
const MISSING: i32 = 4;
const UNREADABLE: i32 = 5;

/// `$1` path, `$2` first line, `$3` line count, `$4` byte cap. Prints the file's line count,
/// then the lines.
const READ: &str = r#"set -o pipefail
f=$1
if [ -d "$f" ]; then exit 3; fi
if [ ! -e "$f" ]; then exit 4; fi
if [ ! -r "$f" ]; then exit 5; fi
n=$(grep -c '' -- "$f") || [ "$n" = 0 ] || exit 6
printf '%s\n' "$n"
# The window's readers stop early by design: `tail` then dies of SIGPIPE when more than a pipe's
# worth is left, which is no failure (the checks above caught every real one).
set +o pipefail
tail -n "+$2" -- "$f" | head -n "$3" | head -c "$4"
"#;

/// `$1` path, `$2` byte cap. Prints the whole file (up to the cap).
const CAT: &str = r#"f=$1
if [ -d "$f" ]; then exit 3; fi
if [ ! -e "$f" ]; then exit 4; fi
if [ ! -r "$f" ]; then exit 5; fi
head -c "$2" -- "$f"
"#;

/// `$1` path; the content on stdin. Creates parent directories.
const WRITE: &str = r#"f=$1
if [ -d "$f" ]; then exit 3; fi
mkdir -p -- "$(dirname -- "$f")" && cat > "$f"
"#;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadArgs {
    path: String,
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    limit: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EditArgs {
    path: String,
    old_string: String,
    new_string: String,
}

fn script(script: &str, name: &str, args: Vec<String>, stdin: Vec<u8>) -> BashRun {
    BashRun {
        script: script.to_owned(),
        name: name.to_owned(),
        args,
        stdin,
        timeout: FILE_TIMEOUT,
    }
}

/// The model-facing message for a script that failed.
fn failure(path: &str, output: &BashOutput) -> String {
    match output.exit_code {
        IS_DIRECTORY => format!("error: `{path}` is a directory; use bash (`ls`) to list it"),
        MISSING => {
            format!("error: `{path}` does not exist (relative paths start at the workspace root)")
        }
        UNREADABLE => format!("error: `{path}` is not readable inside the sandbox"),
        _ if output.timed_out => format!("error: reading `{path}` timed out"),
        code => {
            let stderr = text(&output.stderr);
            format!(
                "error: `{path}` could not be accessed (exit code {code}): {}",
                stderr.trim()
            )
        }
    }
}

fn empty_path() -> Outcome {
    Outcome::error("error: `path` is empty; pass a file path")
}

pub(super) fn read(args: ReadArgs, cx: &mut Context<'_>) -> Result<Outcome, AgentError> {
    if args.path.is_empty() {
        return Ok(empty_path());
    }
    let offset = args.offset.unwrap_or(1);
    let limit = args.limit.unwrap_or(DEFAULT_LIMIT);
    if offset == 0 || limit == 0 {
        return Ok(Outcome::error(
            "error: `offset` and `limit` count lines from 1; pass positive numbers",
        ));
    }
    let run = script(
        READ,
        "read_file",
        vec![
            args.path.clone(),
            offset.to_string(),
            limit.to_string(),
            READ_BYTES.to_string(),
        ],
        Vec::new(),
    );
    let output = cx.host.bash(&run).map_err(AgentError::Host)?;
    if output.exit_code != 0 || output.timed_out {
        return Ok(Outcome::error(failure(&args.path, &output)));
    }
    let (total, content) = match output.stdout.iter().position(|&b| b == b'\n') {
        Some(end) => (
            std::str::from_utf8(&output.stdout[..end])
                .ok()
                .and_then(|n| n.trim().parse::<u64>().ok()),
            &output.stdout[end + 1..],
        ),
        None => (None, &[][..]),
    };
    let Some(total) = total else {
        return Ok(Outcome::error(format!(
            "error: `{}` could not be read: {}",
            args.path,
            text(&output.stderr).trim()
        )));
    };
    if content.contains(&0) {
        return Ok(Outcome::error(format!(
            "error: `{}` looks binary; read_file shows text, use bash (`xxd`, `file`) to inspect it",
            args.path
        )));
    }
    if total == 0 {
        return Ok(Outcome::ok(format!("(`{}` is empty)", args.path)));
    }
    if offset > total {
        return Ok(Outcome::error(format!(
            "error: offset {offset} is past the end of `{}`, which has {total} lines",
            args.path
        )));
    }
    let mut shown = text(content);
    let hit_byte_cap = content.len() as u64 >= READ_BYTES;
    let lines_shown = if hit_byte_cap {
        shown.matches('\n').count() as u64
    } else {
        limit.min(total - offset + 1)
    };
    let last = offset + lines_shown.max(1) - 1;
    if hit_byte_cap || offset > 1 || last < total {
        if !shown.ends_with('\n') {
            shown.push('\n');
        }
        shown.push_str(&format!("[lines {offset}-{last} of {total}"));
        if last < total {
            shown.push_str(&format!("; pass offset={} to read on", last + 1));
        }
        shown.push(']');
    }
    Ok(Outcome::ok(shown))
}

pub(super) fn write(args: WriteArgs, cx: &mut Context<'_>) -> Result<Outcome, AgentError> {
    if args.path.is_empty() {
        return Ok(empty_path());
    }
    let bytes = args.content.len();
    write_bytes(cx.host, &args.path, args.content.into_bytes()).map(|failed| match failed {
        None => Outcome::ok(format!("wrote {bytes} bytes to `{}`", args.path)),
        Some(message) => Outcome::error(message),
    })
}

/// Writes `content` to `path`; `Some(message)` when the sandbox refused.
fn write_bytes(
    host: &mut dyn ToolHost,
    path: &str,
    content: Vec<u8>,
) -> Result<Option<String>, AgentError> {
    let run = script(WRITE, "write_file", vec![path.to_owned()], content);
    let output = host.bash(&run).map_err(AgentError::Host)?;
    if output.exit_code == 0 && !output.timed_out {
        return Ok(None);
    }
    Ok(Some(match output.exit_code {
        IS_DIRECTORY => format!("error: `{path}` is a directory"),
        code => format!(
            "error: could not write `{path}` (exit code {code}): {}",
            text(&output.stderr).trim()
        ),
    }))
}

pub(super) fn edit(args: EditArgs, cx: &mut Context<'_>) -> Result<Outcome, AgentError> {
    if args.path.is_empty() {
        return Ok(empty_path());
    }
    if args.old_string.is_empty() {
        return Ok(Outcome::error(
            "error: `old_string` is empty; copy the exact text to replace (use write_file for a new file)",
        ));
    }
    let current = match read_text(cx.host, &args.path).map_err(AgentError::Host)? {
        FileText::Text(text) => text,
        FileText::Missing => {
            return Ok(Outcome::error(format!(
                "error: `{}` does not exist (relative paths start at the workspace root); use write_file to create it",
                args.path
            )));
        }
        FileText::Unusable(message) => return Ok(Outcome::error(format!("error: {message}"))),
    };
    let count = current.matches(&args.old_string).count();
    if count != 1 {
        let how_often = match count {
            0 => "does not occur".to_owned(),
            n => format!("occurs {n} times"),
        };
        let fix = if count == 0 {
            "read the file and copy the text exactly, whitespace included"
        } else {
            "include more surrounding lines so it occurs exactly once"
        };
        return Ok(Outcome::error(format!(
            "error: `old_string` {how_often} in `{}`; it must occur exactly once: {fix}",
            args.path
        )));
    }
    let at = current.find(&args.old_string).unwrap_or(0);
    let first_line = current[..at].matches('\n').count() + 1;
    let updated = current.replacen(&args.old_string, &args.new_string, 1);
    match write_bytes(cx.host, &args.path, updated.into_bytes())? {
        None => Ok(Outcome::ok(format!(
            "edited `{}`: replaced 1 occurrence at line {first_line}",
            args.path
        ))),
        Some(message) => Ok(Outcome::error(message)),
    }
}

/// A whole file as read inside the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileText {
    Text(String),
    Missing,
    /// A directory, unreadable, too large or not UTF-8 — the message says which.
    Unusable(String),
}

/// Reads a whole text file through the sandbox (also how the engine reads an agent's artifact,
/// so a symlink planted in the workspace resolves inside the sandbox, not on the host).
pub fn read_text(host: &mut dyn ToolHost, path: &str) -> Result<FileText, ToolHostError> {
    let run = script(
        CAT,
        "read_file",
        vec![path.to_owned(), (WHOLE_BYTES + 1).to_string()],
        Vec::new(),
    );
    let output = host.bash(&run)?;
    if output.exit_code == MISSING {
        return Ok(FileText::Missing);
    }
    if output.exit_code != 0 || output.timed_out {
        let message = failure(path, &output);
        return Ok(FileText::Unusable(
            message
                .strip_prefix("error: ")
                .unwrap_or(&message)
                .to_owned(),
        ));
    }
    if output.stdout.len() as u64 > WHOLE_BYTES {
        return Ok(FileText::Unusable(format!(
            "`{path}` is larger than {WHOLE_BYTES} bytes; edit it with bash instead"
        )));
    }
    match String::from_utf8(output.stdout) {
        Ok(text) => Ok(FileText::Text(text)),
        Err(_) => Ok(FileText::Unusable(format!(
            "`{path}` is not UTF-8 text; edit it with bash instead"
        ))),
    }
}
