//! Watching a running command (`Session::exec_watched`): the watch is called while the command
//! runs, can read the session's tmpfs and memory, and a watch that asks to stop gets the
//! command's tree killed — reported as stopped, not as a timeout.

use std::time::Duration;

use cordon_sandbox::cgroup::Caps;
use cordon_sandbox::{ExecRequest, ExitStatus, MemoryUsage, SandboxError, Session, Tick, Watch};

use crate::support::{config, open, stdout, workspace};

const EVERY: Duration = Duration::from_millis(20);

fn request(script: &str) -> ExecRequest {
    let mut request = ExecRequest::new(vec!["/bin/sh".into(), "-c".into(), script.into()]);
    // A bound for a broken watch; the tests never get near it.
    request.timeout = Some(Duration::from_secs(90));
    request
}

#[test]
fn a_watch_that_asks_to_stop_gets_the_running_command_killed() {
    let ws = workspace();
    let mut session = open(ws.path());
    let mut ticks = 0;
    let mut tick = |session: &Session| {
        ticks += 1;
        // Stop once the command is certainly running: it has written its marker into /tmp,
        // which the host sees through the session's tmpfs path.
        if session.tmp_path().join("started").exists() {
            Tick::Stop {
                reason: "disk exhausted".into(),
            }
        } else {
            Tick::Continue
        }
    };
    let outcome = session
        .exec_watched(
            &request("touch /tmp/started; sleep 60; echo survived"),
            Some(Watch {
                every: EVERY,
                tick: &mut tick,
            }),
            &mut |_, _| {},
        )
        .expect("the command runs");
    assert_eq!(outcome.stopped.as_deref(), Some("disk exhausted"));
    assert!(!outcome.timed_out, "a stop is not a timeout");
    assert_eq!(outcome.status, ExitStatus::Signal(libc::SIGKILL));
    assert_eq!(stdout(&outcome), "", "the command did not run on");
    assert!(ticks >= 1);
}

#[test]
fn a_watch_that_lets_the_command_run_sees_it_running_and_changes_nothing() {
    // The control for the test above: the same kind of command, released by the watch instead
    // of stopped, runs to its end.
    // The host cannot create files in the session's tmpfs (it belongs to the session's user
    // namespace), so the release goes through the workspace.
    let ws = workspace();
    let go = ws.path().join("go");
    let mut session = open(ws.path());
    let mut released = false;
    let mut tick = |session: &Session| {
        if !released && session.tmp_path().join("started").exists() {
            released = std::fs::write(&go, "").is_ok();
        }
        Tick::Continue
    };
    let outcome = session
        .exec_watched(
            &request("touch /tmp/started; while [ ! -e go ]; do sleep 0.02; done; echo done"),
            Some(Watch {
                every: EVERY,
                tick: &mut tick,
            }),
            &mut |_, _| {},
        )
        .expect("the command runs");
    assert!(released, "the watch saw the command's file in the tmpfs");
    assert_eq!(outcome.status, ExitStatus::Code(0));
    assert_eq!(outcome.stopped, None);
    assert_eq!(stdout(&outcome), "done\n");
}

#[test]
fn the_session_tmpfs_path_shows_the_sandbox_tmp_from_the_host() {
    let ws = workspace();
    let mut session = open(ws.path());
    let outcome = crate::support::sh(&mut session, "echo inside > /tmp/seen");
    assert_eq!(outcome.status, ExitStatus::Code(0));
    let seen = std::fs::read_to_string(session.tmp_path().join("seen"));
    assert_eq!(seen.expect("readable from the host"), "inside\n");
}

#[test]
fn memory_usage_is_measured_against_the_cap_and_absent_without_one() {
    let ws = workspace();
    let session = open(ws.path());
    assert_eq!(session.memory_usage(), None, "no cap, no group to measure");
    drop(session);

    let cap = 64 << 20;
    let mut capped = config(ws.path());
    capped.caps = Caps {
        memory: Some(cap),
        ..Caps::default()
    };
    let session = match Session::open(capped) {
        Ok(session) => session,
        Err(err) => {
            // Unprivileged, v1 cgroups cannot be delegated: the cap refuses (the cgroup tests
            // check its remedy); root must be able to enforce it.
            assert!(!is_root(), "root must get a memory-capped session: {err}");
            assert!(matches!(err, SandboxError::Cap(_)), "{err:?}");
            return;
        }
    };
    let Some(MemoryUsage { used, cap: seen }) = session.memory_usage() else {
        panic!("a memory-capped session reports its usage");
    };
    assert_eq!(seen, cap);
    assert!(used > 0 && used < cap, "{used}");
}

fn is_root() -> bool {
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("stat /proc/self"))
        == 0
}
