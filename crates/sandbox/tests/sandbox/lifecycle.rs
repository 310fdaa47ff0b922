//! A session's life: state survives between execs; a timeout kills the command's whole tree,
//! daemonised children included; closing kills everything; exit statuses and failures to start.

use std::time::Duration;

use cordon_sandbox::{ExecRequest, ExitStatus, SandboxError, Stdin};

use crate::support::*;

#[test]
fn tmp_files_and_background_processes_survive_between_execs_until_close() {
    let ws = workspace();
    let marker = format!("600.{}", unique());
    let mut session = open(ws.path());
    sh(
        &mut session,
        &format!("echo kept > /tmp/state; sleep {marker} >/dev/null 2>&1 &"),
    );
    let out = sh(
        &mut session,
        "cat /tmp/state; for p in /proc/[0-9]*; do cat $p/comm; done | grep -c '^sleep$'",
    );
    assert_eq!(stdout(&out), "kept\n1\n");
    assert_eq!(
        host_processes_with(&marker).len(),
        1,
        "the background process is not running on the host"
    );
    session.close();
    assert_eq!(
        host_processes_with(&marker),
        Vec::<u32>::new(),
        "closing left a process behind"
    );
}

#[test]
fn timeout_kills_the_command_and_its_daemonised_children() {
    let ws = workspace();
    let marker = format!("600.{}", unique());
    let mut session = open(ws.path());
    let script = format!(
        "setsid sh -c 'touch started; exec sleep {marker}' & while [ ! -e started ]; do sleep 0.01; done; echo up; sleep 600"
    );
    let mut request = ExecRequest::new(vec!["/bin/sh".into(), "-c".into(), script]);
    request.timeout = Some(Duration::from_secs(1));
    let outcome = session
        .exec(&request, &mut |_, _| {})
        .expect("the command runs");
    assert!(outcome.timed_out, "{outcome:?}");
    assert_eq!(outcome.exit_code(), 124);
    // Control: the daemon really ran.
    assert_eq!(stdout(&outcome), "up\n");
    assert!(ws.path().join("started").exists());
    assert_eq!(
        host_processes_with(&marker),
        Vec::<u32>::new(),
        "the daemonised child survived the timeout"
    );
    // The session itself lives on.
    assert_eq!(stdout(&sh(&mut session, "echo alive")), "alive\n");
}

#[test]
fn timeout_kills_a_process_tree_deeper_than_any_walk_limit() {
    // A chain of 100 nested shells (the old walk stopped after 64 generations); the deepest one
    // carries the marker and would outlive the timeout if the walk gave up early.
    let ws = workspace();
    let marker = format!("600.{}", unique());
    let mut session = open(ws.path());
    let script = format!(
        "d() {{ if [ \"$1\" -gt 0 ]; then d $(($1 - 1)) & wait; else touch deepest; exec sleep {marker}; fi; }}; \
         d 100 & while [ ! -e deepest ]; do sleep 0.01; done; echo up; sleep 600"
    );
    let mut request = ExecRequest::new(vec!["/bin/sh".into(), "-c".into(), script]);
    // Long enough for 100 shells to start on a loaded machine: the timeout must fire after the
    // tree is complete, or the control below fails (it never passes vacuously).
    request.timeout = Some(Duration::from_secs(8));
    let outcome = session
        .exec(&request, &mut |_, _| {})
        .expect("the command runs");
    assert!(outcome.timed_out, "{outcome:?}");
    // Control: the deepest process really ran.
    assert_eq!(stdout(&outcome), "up\n");
    assert_eq!(
        host_processes_with(&marker),
        Vec::<u32>::new(),
        "a deep descendant survived the timeout"
    );
    assert_eq!(stdout(&sh(&mut session, "echo alive")), "alive\n");
}

#[test]
fn exit_statuses_signals_and_missing_programs_are_reported() {
    let ws = workspace();
    std::fs::write(ws.path().join("script"), "#!/bin/sh\necho hi\n").expect("write");
    let mut session = open(ws.path());
    let status = |session: &mut cordon_sandbox::Session, argv: &[&str]| {
        let request = ExecRequest::new(argv.iter().map(|s| s.to_string()).collect());
        session.exec(&request, &mut |_, _| {}).expect("exec").status
    };
    let rows: [(&[&str], ExitStatus); 5] = [
        (&["/bin/sh", "-c", "exit 7"], ExitStatus::Code(7)),
        (
            &["/bin/sh", "-c", "kill -TERM $$"],
            ExitStatus::Signal(libc_sigterm()),
        ),
        (&["no-such-program-anywhere"], ExitStatus::NotFound),
        (&["./script"], ExitStatus::NotExecutable),
        (&["true"], ExitStatus::Code(0)),
    ];
    for (argv, expected) in rows {
        assert_eq!(status(&mut session, argv), expected, "{argv:?}");
    }
}

fn libc_sigterm() -> i32 {
    15
}

#[test]
fn stdin_bytes_reach_the_command() {
    let ws = workspace();
    let mut session = open(ws.path());
    let mut request = ExecRequest::new(vec!["cat".into()]);
    request.stdin = Stdin::Bytes(b"through\n".to_vec());
    let outcome = session.exec(&request, &mut |_, _| {}).expect("exec");
    assert_eq!(stdout(&outcome), "through\n");
}

#[test]
fn a_missing_working_directory_is_an_error_naming_it() {
    let ws = workspace();
    let mut session = open(ws.path());
    let mut request = ExecRequest::new(vec!["true".into()]);
    request.cwd = Some(ws.path().join("missing"));
    let err = session
        .exec(&request, &mut |_, _| {})
        .expect_err("the directory does not exist");
    assert!(
        matches!(err, SandboxError::WorkingDirectory { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn output_is_streamed_in_order_and_the_capture_keeps_the_tail() {
    let ws = workspace();
    let mut session = open(ws.path());
    let mut request = ExecRequest::new(vec!["/bin/sh".into(), "-c".into(), "seq 1 1000".into()]);
    request.capture_limit = 4;
    let mut streamed = Vec::new();
    let outcome = session
        .exec(&request, &mut |_, bytes| streamed.extend_from_slice(bytes))
        .expect("exec");
    let expected: String = (1..=1000).map(|n| format!("{n}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&streamed), expected);
    assert_eq!(outcome.stdout.bytes, b"000\n");
    assert_eq!(outcome.stdout.dropped, expected.len() as u64 - 4);
}

#[test]
fn a_background_writer_does_not_keep_exec_from_returning() {
    let ws = workspace();
    let mut session = open(ws.path());
    // `yes` keeps writing to the pipe after the command itself has exited; exec must return
    // (a hang fails the test) with the command's own output.
    let request = ExecRequest::new(vec![
        "/bin/sh".into(),
        "-c".into(),
        "yes & echo done".into(),
    ]);
    let mut window = Vec::new();
    let mut seen = false;
    let outcome = session
        .exec(&request, &mut |_, bytes| {
            window.extend_from_slice(bytes);
            seen |= window.windows(5).any(|w| w == b"done\n");
            window.drain(..window.len().saturating_sub(4));
        })
        .expect("exec");
    assert_eq!(outcome.exit_code(), 0);
    assert!(seen, "the command's own output was lost");
    session.close();
}

#[test]
fn a_background_process_answers_on_its_pipes_beside_other_commands_until_the_session_closes() {
    use std::io::{BufRead, BufReader, Read, Write};
    let ws = workspace();
    let marker = unique();
    let mut session = open(ws.path());
    let mut request = ExecRequest::new(vec![
        "/bin/sh".into(),
        "-c".into(),
        "echo \"started $MARK\" >&2; while read line; do echo \"$line\" >> seen; echo \"got $line\"; done"
            .into(),
    ]);
    request.env.push(("MARK".into(), marker.clone()));
    let background = session.spawn_background(&request).expect("it starts");
    let mut input = std::fs::File::from(background.stdin);
    let mut output = BufReader::new(std::fs::File::from(background.stdout));
    let mut errors = BufReader::new(std::fs::File::from(background.stderr));
    let mut line = String::new();
    errors.read_line(&mut line).expect("stderr");
    assert_eq!(line, format!("started {marker}\n"), "its own environment");
    writeln!(input, "one").expect("write");
    line.clear();
    output.read_line(&mut line).expect("stdout");
    assert_eq!(line, "got one\n");
    // Another command runs while it lives, and sees what it wrote in the workspace, as the host
    // does.
    let out = sh(&mut session, "cat seen");
    assert_eq!(stdout(&out), "one\n");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("seen")).expect("on the host"),
        "one\n"
    );
    writeln!(input, "two").expect("write");
    line.clear();
    output.read_line(&mut line).expect("stdout");
    assert_eq!(line, "got two\n", "still answering after the other command");
    session.close();
    // Closing killed it: its output ends.
    let mut rest = Vec::new();
    output.read_to_end(&mut rest).expect("read");
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn a_background_program_that_does_not_exist_reports_its_stderr_and_end() {
    use std::io::Read;
    let ws = workspace();
    let mut session = open(ws.path());
    let request = ExecRequest::new(vec!["/no/such/server".into()]);
    let background = session
        .spawn_background(&request)
        .expect("the launcher runs");
    let mut errors = String::new();
    std::fs::File::from(background.stderr)
        .read_to_string(&mut errors)
        .expect("stderr");
    assert!(errors.contains("/no/such/server"), "{errors}");
    // The control: the session still runs commands.
    assert_eq!(stdout(&sh(&mut session, "echo alive")), "alive\n");
    // An empty command is refused before anything runs.
    let err = session
        .spawn_background(&ExecRequest::new(Vec::new()))
        .expect_err("refused");
    assert!(matches!(err, SandboxError::InvalidRequest { .. }), "{err}");
}
