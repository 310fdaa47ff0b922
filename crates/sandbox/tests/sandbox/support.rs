//! Opening sessions for the tests: the init program, a workspace the test owns, running a command.

use std::path::{Path, PathBuf};

use cordon_sandbox::{ExecOutcome, ExecRequest, InitProgram, Session, SessionConfig, Workspace};

/// The init program: `CORDON_SANDBOX_INIT` (set by `.ci/unprivileged`, which runs a copy of the
/// tests) or the one this build made.
pub fn init_program() -> InitProgram {
    InitProgram::open(&init_path()).expect("the init program opens")
}

/// Where the init program is (see [`init_program`]).
pub fn init_path() -> PathBuf {
    std::env::var_os("CORDON_SANDBOX_INIT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cordon-sandbox-init")))
}

/// A fresh workspace directory owned by whoever runs the tests.
pub fn workspace() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("cordon-ws-")
        .tempdir()
        .expect("a temporary workspace")
}

pub fn config(workspace: &Path) -> SessionConfig {
    SessionConfig::new(
        Workspace::open(workspace).expect("the workspace opens"),
        init_program(),
    )
}

pub fn open(workspace: &Path) -> Session {
    Session::open(config(workspace)).expect("the session opens")
}

/// Runs `sh -c script` and returns the outcome; stdout and stderr are in the captures.
pub fn sh(session: &mut Session, script: &str) -> ExecOutcome {
    let request = ExecRequest::new(vec!["/bin/sh".into(), "-c".into(), script.into()]);
    session
        .exec(&request, &mut |_, _| {})
        .expect("the command runs")
}

pub fn stdout(outcome: &ExecOutcome) -> String {
    String::from_utf8_lossy(&outcome.stdout.bytes).into_owned()
}

pub fn stderr(outcome: &ExecOutcome) -> String {
    String::from_utf8_lossy(&outcome.stderr.bytes).into_owned()
}

/// A number no other test run uses, for markers in command lines and file names.
pub fn unique() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{}{:09}{}",
        std::process::id(),
        nanos,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Host pids whose command line contains `marker`, read from the host's /proc.
pub fn host_processes_with(marker: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.windows(marker.len()).any(|w| w == marker.as_bytes()))
        })
        .collect()
}

pub fn running_as_root() -> bool {
    cordon_sandbox::host_user().uid == 0
}
