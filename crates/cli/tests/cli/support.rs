//! Helpers shared by the end-to-end tests: locating the binary under test.

use std::path::PathBuf;
use std::process::Command;

/// The `cordon` binary under test. `CORDON_BIN` overrides the build's own binary so the suite can
/// run from a copy that an unprivileged user can reach (see `.ci/test`).
pub fn cordon_bin() -> PathBuf {
    std::env::var_os("CORDON_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cordon")))
}

/// A `Command` for the binary under test with a clean, predictable environment.
pub fn cordon() -> Command {
    let mut cmd = Command::new(cordon_bin());
    cmd.env("NO_COLOR", "1");
    cmd
}
