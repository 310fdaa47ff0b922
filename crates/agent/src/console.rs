//! The agent's console: short `step.output` lines (the model's words, one line per tool call,
//! failures) so a terminal or the run page shows what an agent step is doing as it happens. The
//! full texts stay in `tool.call` / `tool.result`.

use crate::message::ToolCall;

/// The longest console line for a tool call or a failure, in characters.
const WIDTH: usize = 160;

/// `$ bash: <command>`, `$ read_file <path>`, …: what a call does, on one line.
pub(crate) fn call_line(call: &ToolCall) -> String {
    let args = call.arguments_json();
    let field = |name: &str| args.get(name).and_then(|v| v.as_str()).unwrap_or("");
    let what = match call.name.as_str() {
        "bash" => field("command").to_owned(),
        "read_file" | "write_file" | "edit_file" => field("path").to_owned(),
        "request_egress" => field("domain").to_owned(),
        // An engine or MCP tool: its arguments as the model sent them.
        _ => args.to_string(),
    };
    format!("$ {} {}\n", call.name, one_line(&what))
}

/// `  ! <first line>` for a failed call.
pub(crate) fn failure_line(output: &str) -> String {
    let first = output
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("failed");
    format!("  ! {}\n", one_line(first))
}

/// The model's text as it said it, ending in a newline.
pub(crate) fn text_lines(text: &str) -> String {
    let mut out = text.trim_end().to_owned();
    out.push('\n');
    out
}

fn one_line(text: &str) -> String {
    let flat: String = text.trim().replace(['\n', '\r'], " ⏎ ");
    match flat.char_indices().nth(WIDTH) {
        Some((end, _)) => format!("{}…", &flat[..end]),
        None => flat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, arguments: &str, expected: &str) {
        let call = ToolCall {
            id: "c".to_owned(),
            name: name.to_owned(),
            arguments: arguments.to_owned(),
        };
        assert_eq!(call_line(&call), expected);
    }

    #[test]
    fn each_call_is_one_readable_line() {
        check("bash", r#"{"command":"make test"}"#, "$ bash make test\n");
        check("bash", r#"{"command":"a\nb"}"#, "$ bash a ⏎ b\n");
        check(
            "edit_file",
            r#"{"path":"src/x.rs","old_string":"a"}"#,
            "$ edit_file src/x.rs\n",
        );
        check(
            "request_egress",
            r#"{"domain":"example.com"}"#,
            "$ request_egress example.com\n",
        );
        check("bash", "{broken", "$ bash \n");
        let long = format!(r#"{{"command":"{}"}}"#, "x".repeat(200));
        assert_eq!(
            call_line(&ToolCall {
                id: String::new(),
                name: "bash".to_owned(),
                arguments: long
            }),
            format!("$ bash {}…\n", "x".repeat(160))
        );
    }

    #[test]
    fn a_failure_shows_its_last_line() {
        assert_eq!(failure_line("boom\n[exit code 2]"), "  ! [exit code 2]\n");
        assert_eq!(failure_line(""), "  ! failed\n");
    }
}
