//! The host user's toolchains, brought into a session read-only at their host paths (DESIGN §11,
//! §18): `rust` (rustup's home and cargo's `bin`), `python` (pyenv, uv's Pythons), `node` (nvm's
//! default version), `go` (its root). The sandbox hides the home directory they live in; this
//! module finds them, refuses a root that is the home directory itself (or holds it), and finds
//! the credential files inside them to mask.
//!
//! Host facts come in through [`HostFacts`]; nothing here runs a program — `go` is located by
//! looking for the file in the host's `PATH` directories, never by executing it.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The most entries walked in all exposed toolchain trees when looking for credential files;
/// past it the toolchain is refused (an unwalked tree could hide one).
pub const MAX_WALK: usize = 1_000_000;
/// The deepest directory walked below a toolchain root.
const MAX_DEPTH: usize = 48;
/// Where `CARGO_HOME` points inside a session: writable, in the session's `/tmp`.
pub const CARGO_HOME: &str = "/tmp/.cordon-cargo-home";

/// A toolchain name (`isolation.toolchains`, `cordon exec --toolchain`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Toolchain {
    Rust,
    Python,
    Node,
    Go,
}

impl Toolchain {
    pub const ALL: [Toolchain; 4] = [
        Toolchain::Rust,
        Toolchain::Python,
        Toolchain::Node,
        Toolchain::Go,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Toolchain::Rust => "rust",
            Toolchain::Python => "python",
            Toolchain::Node => "node",
            Toolchain::Go => "go",
        }
    }

    pub fn parse(text: &str) -> Option<Toolchain> {
        Toolchain::ALL.into_iter().find(|t| t.name() == text)
    }
}

/// What the host looks like to the resolver.
pub struct HostFacts<'a> {
    /// The invoking user's home directory.
    pub home: &'a Path,
    /// The host's environment variable `name`.
    pub var: &'a dyn Fn(&str) -> Option<OsString>,
    /// The workspace (resolved), which the sandbox writes: no toolchain root may lie in it or
    /// be reached through it.
    pub workspace: Option<&'a Path>,
}

/// What exposing toolchains adds to a session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exposure {
    /// Host directories mounted read-only at their own paths.
    pub read_only: Vec<PathBuf>,
    /// Directories put in front of `PATH`.
    pub path: Vec<PathBuf>,
    /// Variables set for every command, winning over the step's.
    pub env: Vec<(OsString, OsString)>,
    /// Credential files inside the exposed trees, masked.
    pub masks: Vec<PathBuf>,
}

/// A toolchain that cannot be exposed, with where cordon looked and the fix.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ToolchainError {
    #[error(
        "the {name} toolchain was not found: cordon looked for {looked}; install it there, or set \
         {var} to where it is"
    )]
    NotFound {
        name: &'static str,
        looked: String,
        var: &'static str,
    },
    #[error(
        "the {name} toolchain's root {} is the home directory or holds it, so exposing it would \
         expose the home; point {var} at a directory of its own",
        path.display()
    )]
    NotDedicated {
        name: &'static str,
        path: PathBuf,
        var: &'static str,
    },
    #[error(
        "the {name} toolchain at {} holds more than {MAX_WALK} entries (or nests deeper than \
         {MAX_DEPTH}), more than cordon checks for credential files; remove unused versions",
        path.display()
    )]
    TooLarge { name: &'static str, path: PathBuf },
    #[error(
        "the {name} toolchain's root {} is in the workspace (or reached through it), which the \
         sandbox writes, so a step could point it anywhere; point {var} at a directory outside",
        path.display()
    )]
    InWorkspace {
        name: &'static str,
        path: PathBuf,
        var: &'static str,
    },
}

/// The exposure of `toolchains` for the invoking user (their home from `/etc/passwd`, as the
/// sandbox finds it), with the host variables `var`, and `workspace` when a session has one.
pub fn expose(
    toolchains: &[Toolchain],
    var: &dyn Fn(&str) -> Option<OsString>,
    workspace: Option<&Path>,
) -> Result<Exposure, ToolchainError> {
    if toolchains.is_empty() {
        return Ok(Exposure::default());
    }
    let home = crate::facts::host_user().home;
    let workspace = workspace.map(|w| fs::canonicalize(w).unwrap_or_else(|_| w.to_path_buf()));
    let facts = HostFacts {
        home: &home,
        var,
        workspace: workspace.as_deref(),
    };
    resolve(toolchains, &facts)
}

/// The exposure of `toolchains`, in order; the first that cannot be exposed is the error.
pub fn resolve(
    toolchains: &[Toolchain],
    facts: &HostFacts<'_>,
) -> Result<Exposure, ToolchainError> {
    let mut exposure = Exposure::default();
    let mut walked = 0usize;
    // Compared resolved: a root written with `..`, relatively or through a link names what it
    // resolves to, which is what is mounted.
    let home = fs::canonicalize(facts.home).unwrap_or_else(|_| facts.home.to_path_buf());
    for &toolchain in toolchains {
        let found = find(toolchain, facts)?;
        for (written, root) in &found.read_only {
            if home.starts_with(root) {
                return Err(ToolchainError::NotDedicated {
                    name: toolchain.name(),
                    path: root.clone(),
                    var: found.var,
                });
            }
            if let Some(workspace) = facts.workspace
                && (root.starts_with(workspace) || written.starts_with(workspace))
            {
                return Err(ToolchainError::InWorkspace {
                    name: toolchain.name(),
                    path: written.clone(),
                    var: found.var,
                });
            }
            if !exposure.read_only.contains(root) {
                credentials(root, &mut exposure.masks, &mut walked).map_err(|()| {
                    ToolchainError::TooLarge {
                        name: toolchain.name(),
                        path: root.clone(),
                    }
                })?;
                exposure.read_only.push(root.clone());
            }
        }
        exposure.path.extend(found.path);
        exposure.env.extend(found.env);
    }
    Ok(exposure)
}

/// One toolchain's parts on this host, every path resolved.
struct Found {
    /// Each root as written (absolute) and resolved.
    read_only: Vec<(PathBuf, PathBuf)>,
    path: Vec<PathBuf>,
    env: Vec<(OsString, OsString)>,
    /// The variable that moves its root, for messages.
    var: &'static str,
}

fn find(toolchain: Toolchain, facts: &HostFacts<'_>) -> Result<Found, ToolchainError> {
    let root = |var: &str, default: &str| {
        (facts.var)(var)
            .filter(|v| !v.is_empty())
            .map_or_else(|| facts.home.join(default), PathBuf::from)
    };
    // (as written, resolved): what is mounted, checked, walked and named in the environment is
    // the resolved path; a relative root is not found.
    let resolved = |path: &Path| -> Option<(PathBuf, PathBuf)> {
        if !path.is_absolute() {
            return None;
        }
        fs::canonicalize(path).ok().map(|c| (path.to_path_buf(), c))
    };
    let not_found = |var: &'static str, looked: &[&Path]| ToolchainError::NotFound {
        name: toolchain.name(),
        looked: looked
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" and "),
        var,
    };
    let env = |pairs: &[(&str, &Path)]| {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), v.as_os_str().to_owned()))
            .collect::<Vec<_>>()
    };
    match toolchain {
        Toolchain::Rust => {
            let var = "RUSTUP_HOME and CARGO_HOME";
            let rustup_written = root("RUSTUP_HOME", ".rustup");
            let cargo_written = root("CARGO_HOME", ".cargo");
            let bin_written = cargo_written.join("bin");
            let found = resolved(&rustup_written)
                .zip(resolved(&bin_written))
                .filter(|((_, rustup), (_, bin))| {
                    rustup.join("toolchains").is_dir() && bin.join("cargo").is_file()
                });
            let Some((rustup, bin)) = found else {
                return Err(not_found(var, &[&rustup_written, &bin_written]));
            };
            // A `bin` that resolves to cargo's home itself would expose its config and
            // credentials.
            if fs::canonicalize(&cargo_written).is_ok_and(|home| home == bin.1) {
                return Err(ToolchainError::NotDedicated {
                    name: "rust",
                    path: bin.1,
                    var,
                });
            }
            Ok(Found {
                env: env(&[
                    ("RUSTUP_HOME", &rustup.1),
                    ("CARGO_HOME", Path::new(CARGO_HOME)),
                ]),
                path: vec![bin.1.clone()],
                read_only: vec![rustup, bin],
                var,
            })
        }
        Toolchain::Python => {
            let pyenv = root("PYENV_ROOT", ".pyenv");
            let uv = (facts.var)("UV_PYTHON_INSTALL_DIR")
                .filter(|v| !v.is_empty())
                .map_or_else(|| facts.home.join(".local/share/uv/python"), PathBuf::from);
            let pyenv_found = resolved(&pyenv).filter(|(_, r)| r.join("versions").is_dir());
            // uv's directory holds `cpython-…` (or `pypy-…`) installs; anything else is not one.
            let uv_found = resolved(&uv).filter(|(_, r)| {
                fs::read_dir(r).is_ok_and(|entries| {
                    entries.flatten().take(10_000).any(|e| {
                        let name = e.file_name();
                        let name = name.as_bytes();
                        name.starts_with(b"cpython-") || name.starts_with(b"pypy-")
                    })
                })
            });
            if pyenv_found.is_none() && uv_found.is_none() {
                return Err(not_found("PYENV_ROOT", &[&pyenv, &uv]));
            }
            let mut found = Found {
                read_only: Vec::new(),
                path: Vec::new(),
                env: Vec::new(),
                var: "PYENV_ROOT",
            };
            if let Some(pyenv) = pyenv_found {
                found.path = vec![pyenv.1.join("shims"), pyenv.1.join("bin")];
                found.env = env(&[("PYENV_ROOT", &pyenv.1)]);
                found.read_only.push(pyenv);
            }
            if let Some(uv) = uv_found {
                found.read_only.push(uv);
            }
            Ok(found)
        }
        Toolchain::Node => {
            let nvm_written = root("NVM_DIR", ".nvm");
            let found =
                resolved(&nvm_written).and_then(|nvm| nvm_default(&nvm.1).map(|bin| (nvm, bin)));
            let Some((nvm, bin)) = found else {
                return Err(not_found(
                    "NVM_DIR",
                    &[
                        &nvm_written.join("alias/default"),
                        &nvm_written.join("versions/node"),
                    ],
                ));
            };
            Ok(Found {
                env: env(&[("NVM_DIR", &nvm.1)]),
                read_only: vec![nvm],
                path: vec![bin],
                var: "NVM_DIR",
            })
        }
        Toolchain::Go => {
            // A Go root has `bin/go` and its `VERSION` (or `src/runtime`): a `go` in
            // `~/.local/bin` does not make `~/.local` one.
            let goroot = (facts.var)("GOROOT")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| go_on_path(facts))
                .and_then(|r| resolved(&r))
                .filter(|(_, r)| {
                    r.join("bin/go").is_file()
                        && (r.join("VERSION").is_file() || r.join("src/runtime").is_dir())
                });
            let Some(goroot) = goroot else {
                return Err(not_found(
                    "GOROOT",
                    &[
                        Path::new("$GOROOT/bin/go"),
                        Path::new("`go` in the host's PATH"),
                    ],
                ));
            };
            Ok(Found {
                env: env(&[("GOROOT", &goroot.1)]),
                path: vec![goroot.1.join("bin")],
                read_only: vec![goroot],
                var: "GOROOT",
            })
        }
    }
}

/// The `bin` of nvm's default version: `alias/default` names a version (`22`, `v22.11.0`) or
/// another alias, followed at most three times; the newest installed version it prefixes wins.
fn nvm_default(nvm: &Path) -> Option<PathBuf> {
    let mut name = "default".to_owned();
    for _ in 0..3 {
        let alias = nvm.join("alias").join(&name);
        let text = read_small(&alias)?;
        let text = text.trim();
        // An alias names another alias below `alias/` (`lts/jod`) or a version, never a path.
        if text.starts_with('/') || text.split('/').any(|c| c == ".." || c.is_empty()) {
            return None;
        }
        if nvm.join("alias").join(text).is_file() {
            name = text.to_owned();
            continue;
        }
        let wanted = text.strip_prefix('v').unwrap_or(text);
        let versions = nvm.join("versions/node");
        let mut best: Option<(Vec<u64>, PathBuf)> = None;
        for entry in fs::read_dir(&versions).ok()?.flatten().take(10_000) {
            let file_name = entry.file_name();
            let Some(version) = file_name.to_str().and_then(|n| n.strip_prefix('v')) else {
                continue;
            };
            let matches = version == wanted || version.starts_with(&format!("{wanted}."));
            let numbers: Vec<u64> = version.split('.').filter_map(|p| p.parse().ok()).collect();
            if matches && best.as_ref().is_none_or(|(b, _)| numbers > *b) {
                best = Some((numbers, entry.path().join("bin")));
            }
        }
        return best
            .map(|(_, bin)| bin)
            .filter(|bin| bin.join("node").is_file());
    }
    None
}

/// A regular file (not a link, FIFO or device) of at most 256 bytes, as text; opened without
/// blocking and without following a link, so a file swapped for a FIFO cannot hang the host.
fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    if !fs::symlink_metadata(path).ok()?.file_type().is_file() {
        return None;
    }
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    file.take(256).read_to_string(&mut text).ok()?;
    Some(text)
}

/// Go's root from the first `go` in the host's `PATH` (`…/go/bin/go`, links resolved), found
/// by looking, not by running it.
fn go_on_path(facts: &HostFacts<'_>) -> Option<PathBuf> {
    let path = (facts.var)("PATH")?;
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join("go"))
        .find(|go| go.is_file())
        .and_then(|go| fs::canonicalize(go).ok())
        .and_then(|go| go.parent()?.parent().map(Path::to_path_buf))
}

/// Where the host has `program`, when the sandbox cannot find it because the host's copy lies in
/// the hidden home directory: its host path and the toolchain that exposes it (`None`: only
/// `--ro` of its directory would).
pub fn hidden_program(
    program: &str,
    facts: &HostFacts<'_>,
) -> Option<(PathBuf, Option<Toolchain>)> {
    if program.is_empty() || program.contains('/') {
        return None;
    }
    let path = (facts.var)("PATH")?;
    let home = fs::canonicalize(facts.home).ok()?;
    // Each `PATH` directory resolved (`..`, links), as the host would find the program.
    let found = std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .filter_map(|dir| fs::canonicalize(dir).ok())
        .filter(|dir| dir.starts_with(&home))
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())?;
    let relative = found.strip_prefix(&home).ok()?;
    let top = relative.components().next()?.as_os_str().to_str()?;
    let toolchain = match top {
        ".cargo" | ".rustup" => Some(Toolchain::Rust),
        ".pyenv" => Some(Toolchain::Python),
        ".nvm" => Some(Toolchain::Node),
        "sdk" => Some(Toolchain::Go),
        // `~/go/bin` holds Go's module binaries, not a Go root: its directory is the fix.
        _ => None,
    };
    Some((found, toolchain))
}

/// Whether `name` is a credential file masked inside toolchain trees (§18).
pub fn is_credential(name: &OsStr) -> bool {
    let name = name.as_bytes().to_ascii_lowercase();
    name.ends_with(b"npmrc")
        || name == b".netrc"
        || name.starts_with(b"credentials")
        || name == b".git-credentials"
        || name == b"pip.conf"
        || name == b".pypirc"
}

/// Adds every credential file below `root` (links not followed) to `masks`; `Err` past
/// [`MAX_WALK`] entries in all or [`MAX_DEPTH`] levels.
fn credentials(root: &Path, masks: &mut Vec<PathBuf>, walked: &mut usize) -> Result<(), ()> {
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            *walked += 1;
            if *walked > MAX_WALK {
                return Err(());
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let credential = is_credential(&entry.file_name());
            if kind.is_dir() && credential {
                // A directory of credentials (`credentials/token`) is masked whole.
                masks.push(entry.path());
            } else if kind.is_dir() {
                if depth + 1 > MAX_DEPTH {
                    return Err(());
                }
                stack.push((entry.path(), depth + 1));
            } else if kind.is_file() && credential {
                masks.push(entry.path());
            } else if kind.is_symlink() && credential {
                // A link named like a credential: what it points to is masked (a bind over the
                // link itself would follow it anyway).
                if let Ok(target) = fs::canonicalize(entry.path())
                    && target.starts_with(root)
                {
                    masks.push(target);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
