//! The basics: a session starts, runs commands, keeps state between them.

use crate::support::*;

#[test]
fn session_runs_a_command_and_reports_its_output() {
    let ws = workspace();
    let mut session = open(ws.path());
    let outcome = sh(&mut session, "echo hello; echo oops >&2; exit 3");
    assert_eq!(
        (stdout(&outcome).as_str(), stderr(&outcome).as_str()),
        ("hello\n", "oops\n")
    );
    assert_eq!(outcome.exit_code(), 3);
}
