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
}

/// The exposure of `toolchains`, in order; the first that cannot be exposed is the error.
pub fn resolve(
    toolchains: &[Toolchain],
    facts: &HostFacts<'_>,
) -> Result<Exposure, ToolchainError> {
    let mut exposure = Exposure::default();
    let mut walked = 0usize;
    for &toolchain in toolchains {
        let found = find(toolchain, facts)?;
        for root in &found.read_only {
            if facts.home.starts_with(root) {
                return Err(ToolchainError::NotDedicated {
                    name: toolchain.name(),
                    path: root.clone(),
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

/// One toolchain's parts on this host.
struct Found {
    read_only: Vec<PathBuf>,
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
            let rustup = root("RUSTUP_HOME", ".rustup");
            let bin = root("CARGO_HOME", ".cargo").join("bin");
            if !rustup.join("toolchains").is_dir() || !bin.join("cargo").is_file() {
                return Err(not_found("RUSTUP_HOME and CARGO_HOME", &[&rustup, &bin]));
            }
            Ok(Found {
                env: env(&[
                    ("RUSTUP_HOME", &rustup),
                    ("CARGO_HOME", Path::new(CARGO_HOME)),
                ]),
                read_only: vec![rustup, bin.clone()],
                path: vec![bin],
                var: "RUSTUP_HOME and CARGO_HOME",
            })
        }
        Toolchain::Python => {
            let pyenv = root("PYENV_ROOT", ".pyenv");
            let uv = (facts.var)("UV_PYTHON_INSTALL_DIR")
                .filter(|v| !v.is_empty())
                .map_or_else(|| facts.home.join(".local/share/uv/python"), PathBuf::from);
            let has_pyenv = pyenv.join("versions").is_dir();
            let has_uv = uv.is_dir();
            if !has_pyenv && !has_uv {
                return Err(not_found("PYENV_ROOT", &[&pyenv, &uv]));
            }
            let mut found = Found {
                read_only: Vec::new(),
                path: Vec::new(),
                env: Vec::new(),
                var: "PYENV_ROOT",
            };
            if has_pyenv {
                found.path = vec![pyenv.join("shims"), pyenv.join("bin")];
                found.env = env(&[("PYENV_ROOT", &pyenv)]);
                found.read_only.push(pyenv);
            }
            if has_uv {
                found.read_only.push(uv);
            }
            Ok(found)
        }
        Toolchain::Node => {
            let nvm = root("NVM_DIR", ".nvm");
            let Some(bin) = nvm_default(&nvm) else {
                return Err(not_found(
                    "NVM_DIR",
                    &[&nvm.join("alias/default"), &nvm.join("versions/node")],
                ));
            };
            Ok(Found {
                env: env(&[("NVM_DIR", &nvm)]),
                read_only: vec![nvm],
                path: vec![bin],
                var: "NVM_DIR",
            })
        }
        Toolchain::Go => {
            let goroot = (facts.var)("GOROOT")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| go_on_path(facts));
            let Some(goroot) = goroot.filter(|r| r.join("bin/go").is_file()) else {
                return Err(not_found(
                    "GOROOT",
                    &[
                        Path::new("$GOROOT/bin/go"),
                        Path::new("`go` in the host's PATH"),
                    ],
                ));
            };
            Ok(Found {
                env: env(&[("GOROOT", &goroot)]),
                path: vec![goroot.join("bin")],
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
        if nvm.join("alias").join(text).is_file() && !text.contains("..") {
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

/// A file of at most 256 bytes, as text.
fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    fs::File::open(path)
        .ok()?
        .take(256)
        .read_to_string(&mut text)
        .ok()?;
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
    let found = std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute() && dir.starts_with(facts.home))
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())?;
    let relative = found.strip_prefix(facts.home).ok()?;
    let top = relative.components().next()?.as_os_str().to_str()?;
    let toolchain = match top {
        ".cargo" | ".rustup" => Some(Toolchain::Rust),
        ".pyenv" => Some(Toolchain::Python),
        ".nvm" => Some(Toolchain::Node),
        "go" | "sdk" => Some(Toolchain::Go),
        _ => None,
    };
    Some((found, toolchain))
}

/// Whether `name` is a credential file masked inside toolchain trees (§18).
pub fn is_credential(name: &OsStr) -> bool {
    let name = name.as_bytes();
    name.ends_with(b"npmrc")
        || name == b".netrc"
        || name.starts_with(b"credentials")
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
            if kind.is_dir() {
                if depth + 1 > MAX_DEPTH {
                    return Err(());
                }
                stack.push((entry.path(), depth + 1));
            } else if kind.is_file() && is_credential(&entry.file_name()) {
                masks.push(entry.path());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
