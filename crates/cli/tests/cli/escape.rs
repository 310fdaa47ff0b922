//! The escape suite: hostile probes run through the real `cordon exec`, each judged by its effect on
//! the host (a file absent or unchanged, a process alive and untraced, a listener that saw nothing).
//!
//! Two rules keep it honest:
//! * a sandbox that fails to start never counts as "blocked": every probe prints [`STARTED`] first
//!   and [`sandboxed`] fails the test when it is missing;
//! * every refused probe also runs as a plain host child ([`on_host`]): the control proves the probe
//!   really does what it claims when no sandbox is in the way.
//!
//! Tests pass as root and as an unprivileged user (`.ci/unprivileged`); where the two differ (a root
//! control can read `/etc/shadow`), the test says so.

mod filesystem;
mod git;
mod kernel;
mod limits;
mod network;
mod persistence;
mod process;

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::support::cordon;

/// Printed by every probe before it attempts anything.
pub const STARTED: &str = "cordon-probe-started";

/// Every sandboxed probe gets this wall-clock limit, so a hung sandbox fails instead of hanging.
const PROBE_TIMEOUT_SECS: &str = "120";

/// What a probe printed, and how it ended.
#[derive(Debug)]
pub struct Outcome {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    fn from_output(output: Output) -> Outcome {
        Outcome {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Panics unless stdout has a line equal to `line`.
    #[track_caller]
    pub fn assert_line(&self, line: &str) {
        assert!(
            self.stdout.lines().any(|got| got == line),
            "expected the line {line:?} in\n{self}"
        );
    }

    /// Whether stdout or stderr contains `text`.
    pub fn mentions(&self, text: &str) -> bool {
        self.stdout.contains(text) || self.stderr.contains(text)
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// A fresh workspace: a temporary directory owned by the user running the tests.
pub fn workspace() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("cordon-escape-ws-")
        .tempdir()
        .expect("create a workspace")
}

/// A host directory outside the workspace (in the host's `/tmp`, which the sandbox must not see).
pub fn outside() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("cordon-escape-host-")
        .tempdir()
        .expect("create a host directory")
}

/// Runs `script` with `/bin/sh -c` inside `cordon exec -w WORKSPACE [extra...]`, after printing
/// [`STARTED`]. Fails the test when the probe never started.
#[track_caller]
pub fn sandboxed(workspace: &Path, extra: &[&OsStr], script: &str) -> Outcome {
    let mut command = cordon();
    command
        .arg("exec")
        .arg("-w")
        .arg(workspace)
        .args(["--timeout", PROBE_TIMEOUT_SECS])
        .args(extra)
        .arg("--")
        .args(["/bin/sh", "-c", &format!("echo {STARTED}; {script}")])
        .stdin(Stdio::null());
    let outcome = Outcome::from_output(command.output().expect("run cordon exec"));
    assert!(
        outcome.stdout.lines().any(|line| line == STARTED),
        "the sandbox did not start, so nothing was tested:\n{outcome}"
    );
    outcome
}

/// The control: the same `script` as a plain host child with the workspace as working directory.
#[track_caller]
pub fn on_host(workspace: &Path, script: &str) -> Outcome {
    let output = Command::new("/bin/sh")
        .args(["-c", &format!("echo {STARTED}; {script}")])
        .current_dir(workspace)
        .stdin(Stdio::null())
        .output()
        .expect("run the control on the host");
    Outcome::from_output(output)
}

/// Whether the tests run as root (the sandbox then uses an unowned uid and an idmapped workspace).
pub fn running_as_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|meta| meta.uid() == 0)
        .unwrap_or(false)
}

/// `CORDON_TEST_MISSING` lists kernel features CI declares absent (STYLE rule 12); a test that
/// needs one asserts the data-level check instead of failing.
pub fn declared_missing(feature: &str) -> bool {
    std::env::var("CORDON_TEST_MISSING")
        .is_ok_and(|list| list.split(',').any(|item| item.trim() == feature))
}

/// A name no other test run uses, for markers that must not collide.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// A Python 3 prelude for raw system calls: `call(label, nr, *args)` prints `label: ok` or
/// `label: ERRNO_NAME`.
pub const PY_SYSCALL: &str = r#"
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(label, nr, *args):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    code = ctypes.get_errno()
    print(f"{label}: " + ("ok" if result >= 0 else errno.errorcode.get(code, str(code))), flush=True)
    return result
"#;

/// Quotes `text` for `/bin/sh` (single quotes, with embedded ones escaped).
pub fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// A shell command running `python_source` with `/usr/bin/python3`.
pub fn python(python_source: &str) -> String {
    format!("/usr/bin/python3 -c {}", sh_quote(python_source))
}
