//! A host program cordon starts itself (the host's `git`, for a push or a batch task's clone),
//! run under bounds: its process group stopped when it ends or its time runs out, so nothing it
//! started outlives it; each output pipe read on its own thread and kept up to [`MAX_OUTPUT`].

use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

/// How long the output of a program that has ended (or been stopped) is waited for.
const DRAIN: Duration = Duration::from_secs(5);
/// The most bytes of a program's output kept (the rest is read and dropped).
pub const MAX_OUTPUT: usize = 1 << 20;

/// How a bounded program ended.
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// It ran out of time and was stopped with everything it started.
    pub timed_out: bool,
}

/// Starts `command` (its stdio and limits set by the caller, its stdout and stderr piped) and
/// waits for it, `timeout` at most. The command is dropped once started, so a descriptor it
/// holds for the child (a pipe's read end) is the child's alone.
pub fn run_bounded(mut command: Command, timeout: Duration) -> Result<Finished, String> {
    let started = Instant::now();
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start it: {e}"))?;
    drop(command);
    let pid = child.id();
    let guard = match cordon_sandbox::host::guard(pid) {
        Ok(guard) => guard,
        Err(e) => {
            cordon_sandbox::host::kill_group(pid);
            let _ = child.wait();
            return Err(format!("cannot start the guard over it: {e}"));
        }
    };
    let stdout = reader(child.stdout.take());
    let stderr = reader(child.stderr.take());
    // Polled from 1 ms, doubling to 20 ms: most git commands end within milliseconds, and a
    // fixed 20 ms step cost a batch's clone (six commands) more than the commands themselves.
    let mut pause = Duration::from_millis(1);
    let timed_out = loop {
        match cordon_sandbox::host::exited(pid) {
            Ok(true) => break false,
            Ok(false) if started.elapsed() >= timeout => break true,
            Ok(false) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(e) => {
                cordon_sandbox::host::kill_group(pid);
                drop(guard);
                let _ = child.wait();
                return Err(format!("waiting for it: {e}"));
            }
        }
    };
    // It ended (or is stopped): whatever it started goes too, before it is reaped (its pid names
    // the group until then) — a helper left holding the output pipes would keep the readers
    // waiting, and one left running would outlive the bound.
    cordon_sandbox::host::kill_group(pid);
    drop(guard);
    let status = child.wait().map_err(|e| format!("waiting for it: {e}"))?;
    let drained = Instant::now() + DRAIN;
    Ok(Finished {
        status,
        stdout: collect(&stdout, drained),
        stderr: collect(&stderr, drained),
        timed_out,
    })
}

/// A pipe read to its end on a thread of its own, keeping the first [`MAX_OUTPUT`] bytes; what
/// it kept arrives on the channel when the pipe ends.
fn reader(pipe: Option<impl std::io::Read + Send + 'static>) -> std::sync::mpsc::Receiver<Vec<u8>> {
    let (send, receive) = std::sync::mpsc::sync_channel(1);
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        if let Some(mut pipe) = pipe {
            let mut buffer = [0u8; 16 << 10];
            while let Ok(n) = pipe.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                let room = MAX_OUTPUT.saturating_sub(kept.len());
                kept.extend_from_slice(&buffer[..n.min(room)]);
            }
        }
        let _ = send.send(kept);
    });
    receive
}

/// What a [`reader`] kept, waited for until `deadline` at most (a process outside the group
/// could hold the pipe open): nothing when it has not ended by then.
fn collect(reader: &std::sync::mpsc::Receiver<Vec<u8>>, deadline: Instant) -> Vec<u8> {
    reader
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .unwrap_or_default()
}
