//! Loading the pipeline a command names (`run`, `run --dry-run`, `policy`): every diagnostic goes
//! to stderr, and the error is the one line that says what to do (a usage error).

use std::path::Path;

use cordon_pipeline::{Disk, Loaded};

/// Loads `path` and the agent files it names. On failure the diagnostics are already printed;
/// the error is the closing message, for the caller to print after `cordon: `.
pub fn load(path: &Path) -> Result<Loaded, String> {
    cordon_pipeline::load(path, &Disk).map_err(|diagnostics| {
        for d in &diagnostics {
            eprintln!("{d}");
        }
        format!("{} is invalid; fix the problems above", path.display())
    })
}
