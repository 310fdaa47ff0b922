//! Opening sessions for the tests: the init program, a workspace the test owns, running a command;
//! git on the host with a pinned environment.

use std::path::{Path, PathBuf};
use std::process::Command;

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

/// [`config`] with `allow_git_mutations: true`: the git directory writable, its protected entries
/// (hooks, config, ...) still read-only.
pub fn allowing_git_mutations(workspace: &Path) -> SessionConfig {
    let mut config = config(workspace);
    config.git_mutations = cordon_sandbox::mounts::GitMutations::Allow;
    config
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

/// Runs git on the host with a pinned environment: no system or global config (`HOME` an empty
/// directory), so only the repository's own config can name an fsmonitor.
pub fn host_git(dir: &Path, args: &[&str]) -> std::process::Output {
    let home = tempfile::tempdir().expect("a home");
    Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.test"])
        .args([
            "-c",
            "protocol.file.allow=always",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env_remove("GIT_CONFIG_GLOBAL")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env("HOME", home.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs")
}

/// [`host_git`] that must succeed.
pub fn git(dir: &Path, args: &[&str]) {
    let out = host_git(dir, args);
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A repository at `dir` (made when missing) with one commit.
pub fn committed_repo(dir: &Path) {
    std::fs::create_dir_all(dir).expect("mkdir");
    git(dir, &["init", "-q", "."]);
    std::fs::write(dir.join("file"), "x").expect("write");
    git(dir, &["add", "file"]);
    git(dir, &["commit", "-q", "-m", "one"]);
}
