//! Landlock rules for the sandboxed processes: read and execute on the system directories, write
//! only to the workspace, the private tmpfs mounts and the listed devices, plus abstract-socket and
//! signal scoping where the kernel has them (ABI 6).
//!
//! Mount namespaces already decide what exists inside the sandbox; Landlock is the second,
//! independent layer, so a mistake in the mount plan (a writable bind, a path that should have been
//! masked) still cannot be written through. Landlock has no network rules here on purpose: the
//! session's own network namespace is the network boundary, and port rules would also break the
//! servers a step legitimately starts on its own loopback (a test database, a dev server).

use std::io;
use std::path::{Path, PathBuf};

use ::landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

/// The newest ABI whose rights cordon asks for and has been tested against. Newer kernels are
/// used at this level; older ones get what they support (see [`restrict`]).
const TARGET_ABI: ABI = ABI::V6;

/// What the sandboxed processes may touch. Paths are as seen after the mounts are final (inside
/// the new root); everything not listed is denied by Landlock, procfs and `/dev` included, so
/// `read_exec` must cover `/proc` (the session passes `/`: the mount plan decides what exists).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    /// Read files, list directories and execute beneath these (the system directories, `--ro`).
    /// Paths that do not exist (`/lib32` on many hosts) are skipped.
    pub read_exec: Vec<PathBuf>,
    /// Full access beneath these (workspace, `/tmp`, `/dev/shm`, `HOME`), except creating
    /// character or block devices. Each must exist.
    pub read_write: Vec<PathBuf>,
    /// Device files (or directories of them, like `/dev/pts`) that may be opened for reading and
    /// writing and receive ioctls. Paths that do not exist are skipped.
    pub devices: Vec<PathBuf>,
}

/// How much of the requested filesystem policy the kernel enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enforcement {
    /// Every right cordon asks for (up to [`TARGET_ABI`]) is enforced.
    Full,
    /// An older kernel: the ABI 1 rights are enforced, some newer ones (renames across
    /// directories, truncation, device ioctls) are not.
    Partial,
}

/// What [`restrict`] enforced, for `doctor` and the session's report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LandlockStatus {
    /// The Landlock ABI used (the kernel's, capped at the one cordon targets).
    pub abi: u32,
    /// How much of the filesystem policy is enforced.
    pub filesystem: Enforcement,
    /// Whether abstract unix sockets and signals are scoped to the sandbox (ABI 6 and later).
    pub scopes: bool,
}

/// Why Landlock could not be enforced. The workload must not start.
#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    #[error(
        "landlock is not available; boot a kernel (5.13 or later) with CONFIG_SECURITY_LANDLOCK and \
         `landlock` in the `lsm=` list (run `cordon doctor`)"
    )]
    Unsupported(#[source] ::landlock::RulesetError),
    #[error(
        "landlock accepted the rules but enforces none of them; check that the kernel enables \
         landlock in its `lsm=` list (run `cordon doctor`)"
    )]
    NotEnforced,
    #[error("cannot open `{path}` for a landlock rule; the sandbox layout must contain it")]
    Path {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot build the landlock ruleset")]
    Ruleset(#[source] ::landlock::RulesetError),
}

/// Restricts the calling thread (and every process it executes afterwards) to `rules`. Also sets
/// `no_new_privs`. Fails closed: an error when not even the ABI 1 filesystem rights can be
/// enforced; newer rights and the scopes are used when the kernel has them.
pub fn restrict(rules: &Rules) -> Result<LandlockStatus, LandlockError> {
    let handled = AccessFs::from_all(TARGET_ABI);
    let read_exec = AccessFs::from_read(TARGET_ABI);
    // Creating device nodes is never needed in a workspace or tmpfs (they are nodev anyway).
    let read_write = handled & !(AccessFs::MakeChar | AccessFs::MakeBlock);
    let device = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;

    let ruleset = Ruleset::default()
        // Fail closed: the ABI 1 rights (which cover every write) must all be handled...
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V1))
        .map_err(LandlockError::Unsupported)?
        // ...and the rest is best effort: `Refer` (ABI 2), `Truncate` (3), `IoctlDev` (5).
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(handled)
        .map_err(LandlockError::Ruleset)?
        // Connecting to abstract unix sockets and signalling processes outside the sandbox
        // (ABI 6). The network namespace already separates abstract sockets and the PID
        // namespace hides host processes; this is the independent second layer.
        .scope(Scope::from_all(TARGET_ABI))
        .map_err(LandlockError::Ruleset)?;
    let mut created = ruleset.create().map_err(LandlockError::Ruleset)?;
    for (paths, access, missing) in [
        (&rules.read_exec, read_exec, Missing::Skip),
        (&rules.read_write, read_write, Missing::Fail),
        (&rules.devices, device, Missing::Skip),
    ] {
        for path in paths {
            let Some(rule) = rule_for(path, access, missing)? else {
                continue;
            };
            created = created.add_rule(rule).map_err(LandlockError::Ruleset)?;
        }
    }
    let status = created.restrict_self().map_err(LandlockError::Ruleset)?;
    let abi = ABI::from(status.landlock);
    let filesystem = match status.ruleset {
        RulesetStatus::NotEnforced => return Err(LandlockError::NotEnforced),
        RulesetStatus::FullyEnforced => Enforcement::Full,
        RulesetStatus::PartiallyEnforced => Enforcement::Partial,
    };
    Ok(LandlockStatus {
        abi: abi as u32,
        filesystem,
        scopes: abi >= ABI::V6,
    })
}

/// What to do with a listed path that does not exist.
#[derive(Clone, Copy)]
enum Missing {
    Skip,
    Fail,
}

/// A rule for `path`, with the directory-only rights dropped for non-directories (the kernel
/// refuses them there). `None` for a missing path that may be skipped.
fn rule_for(
    path: &Path,
    access: BitFlags<AccessFs>,
    missing: Missing,
) -> Result<Option<PathBeneath<PathFd>>, LandlockError> {
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(error)
            if error.kind() == io::ErrorKind::NotFound && matches!(missing, Missing::Skip) =>
        {
            return Ok(None);
        }
        Err(source) => {
            return Err(LandlockError::Path {
                path: path.to_owned(),
                source,
            });
        }
    };
    let access = if metadata.is_dir() {
        access | AccessFs::ReadDir
    } else {
        access & AccessFs::from_file(TARGET_ABI)
    };
    let fd = PathFd::new(path).map_err(|error| LandlockError::Path {
        path: path.to_owned(),
        source: io::Error::other(error),
    })?;
    Ok(Some(PathBeneath::new(fd, access)))
}

#[cfg(test)]
mod tests;
