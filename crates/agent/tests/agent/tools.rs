//! The file tools as a table: each row sets up the workspace, makes one call through the loop
//! and checks the result the model gets and the file afterwards.

use cordon_agent::provider::Replay;
use serde_json::json;

use crate::support::{LocalHost, Memory, run, spec};

/// Runs `name(arguments)` once against a workspace holding `files`; returns the result and
/// the content of `inspect` afterwards.
fn call(
    files: &[(&str, &str)],
    name: &str,
    arguments: serde_json::Value,
    inspect: &str,
) -> (bool, String, String) {
    let transcript = format!(
        "{}\n{}\n",
        json!({"tool_calls": [{"name": name, "arguments": arguments}]}),
        json!({"text": "done"})
    );
    let mut provider = Replay::parse("t.jsonl", &transcript).expect("transcript");
    let mut host = LocalHost::new();
    for (path, text) in files {
        host.write(path, text);
    }
    let mut journal = Memory::default();
    run(&spec(&host, 3), &mut provider, &mut host, &mut journal);
    let (ok, output) = journal.results().remove(0);
    let ws = host.workspace();
    (ok, output.replace(&ws, "$WS"), host.read(inspect))
}

fn check(
    files: &[(&str, &str)],
    name: &str,
    arguments: serde_json::Value,
    expected: (bool, &str),
    after: Option<(&str, &str)>,
) {
    let inspect = after.map_or("", |(p, _)| p);
    let (ok, output, content) = call(files, name, arguments.clone(), inspect);
    assert_eq!((ok, output.as_str()), expected, "{name} {arguments}");
    if let Some((path, want)) = after {
        assert_eq!(content, want, "{path} after {name} {arguments}");
    }
}

const TEN: &str = "l1\nl2\nl3\nl4\nl5\nl6\nl7\nl8\nl9\nl10\n";

#[test]
fn read_file_reads_any_window_of_a_long_file() {
    // 6,000 lines of 60 bytes: far more than a pipe holds after any window.
    let long: String = (1..=6000)
        .map(|i| format!("{i:>6} {}\n", "x".repeat(52)))
        .collect();
    for (offset, first) in [(1, 1), (2500, 2500), (5999, 5999)] {
        let (ok, output, _) = call(
            &[("big.txt", &long)],
            "read_file",
            json!({"path": "big.txt", "offset": offset, "limit": 2}),
            "",
        );
        assert!(ok, "offset {offset}: {output}");
        assert!(
            output.starts_with(&format!("{first:>6} ")),
            "offset {offset}: {}",
            &output[..output.len().min(200)]
        );
        assert!(
            output.contains("of 6000"),
            "{}",
            &output[..output.len().min(300)]
        );
    }
}

#[test]
fn read_file_returns_lines_by_offset_and_limit() {
    check(
        &[("a.txt", "one\ntwo\n")],
        "read_file",
        json!({"path": "a.txt"}),
        (true, "one\ntwo\n"),
        None,
    );
    check(
        &[("a.txt", "no newline")],
        "read_file",
        json!({"path": "a.txt"}),
        (true, "no newline"),
        None,
    );
    check(
        &[("a.txt", TEN)],
        "read_file",
        json!({"path": "a.txt", "offset": 3, "limit": 2}),
        (true, "l3\nl4\n[lines 3-4 of 10; pass offset=5 to read on]"),
        None,
    );
    check(
        &[("a.txt", TEN)],
        "read_file",
        json!({"path": "a.txt", "offset": 9}),
        (true, "l9\nl10\n[lines 9-10 of 10]"),
        None,
    );
    check(
        &[("a.txt", TEN)],
        "read_file",
        json!({"path": "a.txt", "offset": 11}),
        (
            false,
            "error: offset 11 is past the end of `a.txt`, which has 10 lines",
        ),
        None,
    );
    check(
        &[("a.txt", "")],
        "read_file",
        json!({"path": "a.txt"}),
        (true, "(`a.txt` is empty)"),
        None,
    );
    check(
        &[],
        "read_file",
        json!({"path": "nope.txt"}),
        (
            false,
            "error: `nope.txt` does not exist (relative paths start at the workspace root)",
        ),
        None,
    );
    check(
        &[("a.txt", "x")],
        "read_file",
        json!({"path": "."}),
        (
            false,
            "error: `.` is a directory; use bash (`ls`) to list it",
        ),
        None,
    );
    check(
        &[("bin", "a\u{0}b\n")],
        "read_file",
        json!({"path": "bin"}),
        (
            false,
            "error: `bin` looks binary; read_file shows text, use bash (`xxd`, `file`) to inspect it",
        ),
        None,
    );
    check(
        &[],
        "read_file",
        json!({"path": ""}),
        (false, "error: `path` is empty; pass a file path"),
        None,
    );
}

#[test]
fn write_file_creates_parents_and_replaces_content() {
    check(
        &[],
        "write_file",
        json!({"path": "deep/er/new.txt", "content": "hello\n"}),
        (true, "wrote 6 bytes to `deep/er/new.txt`"),
        Some(("deep/er/new.txt", "hello\n")),
    );
    check(
        &[("a.txt", "old")],
        "write_file",
        json!({"path": "a.txt", "content": ""}),
        (true, "wrote 0 bytes to `a.txt`"),
        Some(("a.txt", "")),
    );
    check(
        &[],
        "write_file",
        json!({"path": ".", "content": "x"}),
        (false, "error: `.` is a directory"),
        None,
    );
    check(
        &[],
        "write_file",
        json!({"path": "a.txt", "content": "line with 'quotes' and $(date)\n"}),
        (true, "wrote 31 bytes to `a.txt`"),
        Some(("a.txt", "line with 'quotes' and $(date)\n")),
    );
}

#[test]
fn edit_file_replaces_exactly_one_occurrence_or_says_how_often_it_occurred() {
    check(
        &[("c.py", "def add(a, b):\n    return a - b\n")],
        "edit_file",
        json!({"path": "c.py", "old_string": "a - b", "new_string": "a + b"}),
        (true, "edited `c.py`: replaced 1 occurrence at line 2"),
        Some(("c.py", "def add(a, b):\n    return a + b\n")),
    );
    check(
        &[("c.py", "x = 1\nx = 1\n")],
        "edit_file",
        json!({"path": "c.py", "old_string": "x = 1", "new_string": "x = 2"}),
        (
            false,
            "error: `old_string` occurs 2 times in `c.py`; it must occur exactly once: include more surrounding lines so it occurs exactly once",
        ),
        Some(("c.py", "x = 1\nx = 1\n")),
    );
    check(
        &[("c.py", "x = 1\n")],
        "edit_file",
        json!({"path": "c.py", "old_string": "y = 1", "new_string": "x = 2"}),
        (
            false,
            "error: `old_string` does not occur in `c.py`; it must occur exactly once: read the file and copy the text exactly, whitespace included",
        ),
        None,
    );
    check(
        &[],
        "edit_file",
        json!({"path": "gone.py", "old_string": "a", "new_string": "b"}),
        (
            false,
            "error: `gone.py` does not exist (relative paths start at the workspace root); use write_file to create it",
        ),
        None,
    );
    check(
        &[("c.py", "x")],
        "edit_file",
        json!({"path": "c.py", "old_string": "", "new_string": "b"}),
        (
            false,
            "error: `old_string` is empty; copy the exact text to replace (use write_file for a new file)",
        ),
        None,
    );
}
