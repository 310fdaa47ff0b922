//! The `bash` tool: a new `/bin/bash -c` process per call that starts where the previous call
//! ended. The wrapper script `cd`s into the remembered directory, `eval`s the command, and on
//! exit prints the directory it ended in after a per-attempt marker on stderr — the side channel
//! the next call's directory is taken from. The marker line is cut out of the output.

use std::time::Duration;

use serde::Deserialize;

use super::{Context, DEFAULT_BASH_TIMEOUT, Outcome, text};
use crate::agent_loop::AgentError;
use crate::tool_host::BashRun;

pub(super) const EXPECTED: &str = r#"{"command": "ls -la", "timeout": 60}"#;

/// The longest timeout a call may ask for (a step timeout caps it further).
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// `$1` the directory to start in, `$2` the workspace (the fallback), `$3` the marker, `$4` the
/// command. The positional parameters are cleared before the command runs, and the trap keeps
/// the command's exit status.
const WRAPPER: &str = r#"__cordon_dir=$1 __cordon_ws=$2 __cordon_mark=$3 __cordon_cmd=$4
set --
if ! cd -- "$__cordon_dir" 2>/dev/null; then
  printf 'cordon: %s is gone; starting in the workspace\n' "$__cordon_dir" >&2
  cd -- "$__cordon_ws" || exit 1
fi
trap '__cordon_status=$?; printf "\n%s%s\n" "$__cordon_mark" "$PWD" >&2; exit $__cordon_status' EXIT
unset __cordon_dir __cordon_ws
eval "$__cordon_cmd"
"#;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Args {
    command: String,
    #[serde(default)]
    timeout: Option<f64>,
}

/// The bash tool's state across calls.
pub(super) struct Bash {
    workspace: String,
    cwd: String,
    marker: String,
}

impl Bash {
    pub(super) fn new(workspace: &str) -> Bash {
        Bash {
            workspace: workspace.to_owned(),
            cwd: workspace.to_owned(),
            marker: format!("__cordon_cwd_{}__", nonce()),
        }
    }

    pub(super) fn run(&mut self, args: Args, cx: &mut Context<'_>) -> Result<Outcome, AgentError> {
        let wanted = match args.timeout {
            None => DEFAULT_BASH_TIMEOUT,
            Some(seconds) if seconds.is_finite() && seconds > 0.0 => {
                Duration::from_secs_f64(seconds.min(MAX_TIMEOUT.as_secs_f64()))
            }
            Some(seconds) => {
                return Ok(Outcome::error(format!(
                    "error: `timeout` must be a positive number of seconds, not {seconds}"
                )));
            }
        };
        if args.command.trim().is_empty() {
            return Ok(Outcome::error(
                "error: `command` is empty; pass a bash command line",
            ));
        }
        let timeout = cx.cap(wanted);
        let run = BashRun {
            script: WRAPPER.to_owned(),
            name: "bash".to_owned(),
            args: vec![
                self.cwd.clone(),
                self.workspace.clone(),
                self.marker.clone(),
                args.command,
            ],
            stdin: Vec::new(),
            timeout,
        };
        let output = cx.host.bash(&run).map_err(AgentError::Host)?;
        let (shown, ended_in) = strip_marker(&text(&output.combined), &self.marker);
        if let Some(dir) = ended_in {
            self.cwd = dir;
        }
        let mut result = shown;
        let ok = !output.timed_out && output.exit_code == 0;
        if output.timed_out {
            push_note(
                &mut result,
                &format!(
                    "[timed out after {} s; the command and its children were killed]",
                    timeout.as_secs()
                ),
            );
        } else if output.exit_code != 0 {
            push_note(&mut result, &format!("[exit code {}]", output.exit_code));
        } else if result.is_empty() {
            result.push_str("(no output)");
        }
        Ok(Outcome {
            output: result,
            ok,
            fatal: false,
        })
    }
}

fn push_note(result: &mut String, note: &str) {
    if !result.is_empty() && !result.ends_with('\n') {
        result.push('\n');
    }
    result.push_str(note);
}

/// Cuts the last `\n<marker><dir>\n` out of `output`, returning the rest and the directory.
fn strip_marker(output: &str, marker: &str) -> (String, Option<String>) {
    let needle = format!("\n{marker}");
    let Some(start) = output.rfind(&needle) else {
        return (output.to_owned(), None);
    };
    let after = &output[start + needle.len()..];
    let (dir, rest) = match after.find('\n') {
        Some(end) => (&after[..end], &after[end + 1..]),
        None => (after, ""),
    };
    let mut shown = output[..start].to_owned();
    shown.push_str(rest);
    (shown, (!dir.is_empty()).then(|| dir.to_owned()))
}

/// Differs between attempts and processes, so a command cannot guess the marker by accident.
fn nonce() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{:x}{:x}{count:x}", std::process::id(), nanos & 0xffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(output: &str, expected: &str, dir: Option<&str>) {
        let (shown, got) = strip_marker(output, "@M@");
        assert_eq!(
            (shown.as_str(), got.as_deref()),
            (expected, dir),
            "{output:?}"
        );
    }

    #[test]
    fn the_directory_marker_is_cut_out_and_read() {
        check("hello\n\n@M@/ws/src\n", "hello\n", Some("/ws/src"));
        check("\n@M@/ws\n", "", Some("/ws"));
        check(
            "no newline at end\n@M@/ws\n",
            "no newline at end",
            Some("/ws"),
        );
        check("no marker\n", "no marker\n", None);
        check(
            "a\n\n@M@/x\nlate child output\n",
            "a\nlate child output\n",
            Some("/x"),
        );
        check(
            "spoof \n@M@/fake\nreal\n\n@M@/ws\n",
            "spoof \n@M@/fake\nreal\n",
            Some("/ws"),
        );
    }
}
