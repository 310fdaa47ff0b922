//! Persistent download caches (DESIGN §11, §18): `isolation.caches` / `cordon exec --cache`.
//!
//! A cache lives at `<state-dir>/caches/<key>/<name>`, where the key names one pipeline file (or,
//! for `cordon exec`, one workspace): runs of that pipeline share it, nothing else sees it. Only
//! the download parts of a tool's cache are mounted (cargo's `registry/` and `git/`, pip's
//! `http`, `http-v2` and `wheels`, npm's `_cacache`, the whole of `GOMODCACHE` and of uv's
//! cache) — never a config file, `bin/` or credentials — read-write, `nosuid`, `nodev`, below the
//! session's `/tmp`, and the tool's variable points at it. The directories are owned by the
//! sandbox uid, so a root cordon's sandbox (an unowned uid) can write them and nothing it writes
//! is root's.
//!
//! What a sandbox wrote into a cache is as hostile as the workspace: the host sizes and empties it
//! only through [`cordon_workspace::tree`] (no link followed, bounded), and never reads content.
//! A poisoned entry can affect later runs of the same pipeline, inside their sandboxes; `cordon
//! cache clear` is the remedy (docs/threat-model.md).
//!
//! **Bound.** `isolation.cache_limit` (default 4 GiB) is checked each time a run or an exec
//! opens its caches: one found over it (or past the walk's entry or depth bound) is emptied
//! before use, and the caller says so. **Locks.** Every holder of a key's caches keeps a shared
//! `flock` on `<key>/.lock`; emptying takes it exclusively, so a cache is never emptied under a
//! running session.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cordon_workspace::tree::{self, TreeError, TreeLimits, Usage};
use sha2::{Digest, Sha256};

use crate::identity::Privilege;

/// `isolation.cache_limit` when unset: 4 GiB per cache.
pub const DEFAULT_LIMIT: u64 = 4 << 30;

/// Where the caches are mounted inside a session (cargo's go into `CARGO_HOME`).
pub const MOUNT_ROOT: &str = "/tmp/.cordon-cache";

/// The walk that sizes a cache: past it the cache counts as over its limit.
const LIMITS: TreeLimits = TreeLimits {
    entries: 1_000_000,
    depth: 128,
};

/// How long opening waits for a `cordon cache clear` holding a key to finish: 50 × 100 ms.
const LOCK_TRIES: usize = 50;
const LOCK_WAIT: Duration = Duration::from_millis(100);

/// A tool whose download cache can persist.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cache {
    Cargo,
    Pip,
    Npm,
    Go,
    Uv,
}

/// Every cache, in the order names are listed.
pub const CACHES: [Cache; 5] = [Cache::Cargo, Cache::Pip, Cache::Npm, Cache::Go, Cache::Uv];

/// The names, for messages: `cargo, pip, npm, go or uv`.
pub const NAMES: &str = "cargo, pip, npm, go or uv";

impl Cache {
    pub fn name(self) -> &'static str {
        match self {
            Cache::Cargo => "cargo",
            Cache::Pip => "pip",
            Cache::Npm => "npm",
            Cache::Go => "go",
            Cache::Uv => "uv",
        }
    }

    pub fn parse(text: &str) -> Option<Cache> {
        CACHES.into_iter().find(|c| c.name() == text)
    }

    /// The variable that points the tool at its cache, and its value inside the session.
    pub fn variable(self) -> (&'static str, PathBuf) {
        match self {
            Cache::Cargo => ("CARGO_HOME", PathBuf::from(crate::toolchain::CARGO_HOME)),
            Cache::Pip => ("PIP_CACHE_DIR", Path::new(MOUNT_ROOT).join("pip")),
            Cache::Npm => ("npm_config_cache", Path::new(MOUNT_ROOT).join("npm")),
            Cache::Go => ("GOMODCACHE", Path::new(MOUNT_ROOT).join("go")),
            Cache::Uv => ("UV_CACHE_DIR", Path::new(MOUNT_ROOT).join("uv")),
        }
    }

    /// The subdirectories of the tool's cache directory that hold downloads, each mounted on its
    /// own; empty when the whole directory is downloads.
    pub fn parts(self) -> &'static [&'static str] {
        match self {
            Cache::Cargo => &["registry", "git"],
            Cache::Pip => &["http", "http-v2", "wheels"],
            Cache::Npm => &["_cacache"],
            Cache::Go | Cache::Uv => &[],
        }
    }
}

/// What a cache belongs to; its key is a digest of this.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// A pipeline file (its canonical path): every run of it.
    Pipeline(PathBuf),
    /// A workspace (its canonical path): every `cordon exec --cache` in it.
    Exec(PathBuf),
}

impl Owner {
    /// The directory name of its caches: 16 bytes of SHA-256, hex.
    pub fn key(&self) -> String {
        let (kind, path) = self.parts();
        let mut hash = Sha256::new();
        hash.update(kind.as_bytes());
        hash.update([0]);
        hash.update(path.as_os_str().as_encoded_bytes());
        hash.finalize()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn parts(&self) -> (&'static str, &Path) {
        match self {
            Owner::Pipeline(path) => ("pipeline", path),
            Owner::Exec(path) => ("exec", path),
        }
    }

    /// `pipeline /path/to/pipeline.yaml`, as recorded in the key's `origin` file.
    fn origin(&self) -> String {
        let (kind, path) = self.parts();
        format!("{kind} {}", path.display())
    }
}

/// A cache directory to mount: the host directory and where it goes in the session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheMount {
    pub host: PathBuf,
    pub target: PathBuf,
}

/// A cache emptied when it was opened, for the caller to report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Emptied {
    pub cache: Cache,
    /// What it held, or why it could not be sized (past the walk's bounds).
    pub held: Result<Usage, TreeError>,
    pub limit: u64,
}

impl Emptied {
    /// `the pip cache held 5.1 GiB, over isolation.cache_limit (4 GiB): emptied it`, with
    /// `setting` naming where the limit comes from.
    pub fn message(&self, setting: &str) -> String {
        let held = match &self.held {
            Ok(usage) => format!("held {}", shown_size(usage.bytes)),
            Err(err) => err.to_string().replacen("it ", "", 1),
        };
        format!(
            "the {} cache {held}, over {setting} ({}): emptied it",
            self.cache.name(),
            crate::cgroup::format_size(self.limit)
        )
    }
}

/// A byte count for people: `812 bytes`, `3.4 KiB`, `5.1 GiB`.
pub fn shown_size(bytes: u64) -> String {
    let mut value = bytes as f64;
    for unit in ["bytes", "KiB", "MiB", "GiB"] {
        if value < 1024.0 {
            return if unit == "bytes" {
                format!("{bytes} bytes")
            } else {
                format!("{value:.1} {unit}")
            };
        }
        value /= 1024.0;
    }
    format!("{value:.1} TiB")
}

/// The caches of one owner, opened for sessions: mounts, variables, and the shared lock that
/// keeps them from being emptied while held (clones share it).
#[derive(Clone, Debug)]
pub struct Opened {
    pub mounts: Vec<CacheMount>,
    pub env: Vec<(OsString, OsString)>,
    pub emptied: Vec<Emptied>,
    _lock: Arc<File>,
}

/// A cache that could not be prepared or cleared.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cannot {action} the cache directory {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error(
        "the {name} cache at {} could not be emptied: {source}; remove it by hand",
        path.display()
    )]
    Empty {
        name: &'static str,
        path: PathBuf,
        source: TreeError,
    },
    #[error(
        "the caches at {} are being cleared by another cordon; try again when it ends",
        path.display()
    )]
    Busy { path: PathBuf },
}

fn failed(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> CacheError {
    let path = path.to_path_buf();
    move |source| CacheError::Io {
        action,
        path,
        source,
    }
}

/// The cache store under a state directory.
#[derive(Clone, Debug)]
pub struct Store {
    root: PathBuf,
}

/// One cache found by [`Store::list`].
#[derive(Clone, Debug)]
pub struct Listed {
    pub key: String,
    /// `pipeline PATH` or `exec PATH` (what the key was made from), as recorded.
    pub origin: String,
    pub cache: Cache,
    /// What it holds, or why it could not be sized.
    pub held: Result<Usage, String>,
}

/// One cache emptied by [`Store::clear`], or held by a session and left alone, or one that
/// could not be emptied (the others are cleared all the same).
#[derive(Clone, Debug)]
pub struct Cleared {
    pub key: String,
    pub origin: String,
    pub cache: Cache,
    /// What it held, `None` when a running session holds it (not cleared).
    pub held: Option<Result<Usage, TreeError>>,
    /// Why it could not be emptied.
    pub failed: Option<String>,
}

impl Store {
    /// The store of the state directory `state_dir` (nothing is created yet).
    pub fn new(state_dir: &Path) -> Store {
        Store {
            root: state_dir.join("caches"),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Opens `caches` of `owner` for sessions: creates what is missing (owned by the sandbox
    /// uid), empties a cache over `limit` when no one else holds the key, and keeps the key's
    /// shared lock in the result.
    pub fn open(&self, owner: &Owner, caches: &[Cache], limit: u64) -> Result<Opened, CacheError> {
        let mut caches = caches.to_vec();
        caches.sort();
        caches.dedup();
        let dir = self.root.join(owner.key());
        fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(&self.root)
            .map_err(failed("create", &self.root))?;
        private_dir(&dir)?;
        let origin = dir.join("origin");
        fs::write(&origin, owner.origin()).map_err(failed("record the owner of", &origin))?;
        let lock = lock_file(&dir)?;
        let mut emptied = Vec::new();
        // Sizing and emptying only while no session holds the key: emptying under a running
        // tool would break it. Someone else holding it checked when they opened it.
        if lock.try_lock().is_ok() {
            for cache in &caches {
                let path = dir.join(cache.name());
                let Some(top) = open_top(&path).map_err(failed("open", &path))? else {
                    continue;
                };
                let held = tree::usage(top.as_fd(), &LIMITS);
                if held.as_ref().is_ok_and(|u| u.bytes <= limit) {
                    continue;
                }
                empty(cache.name(), &path)?;
                emptied.push(Emptied {
                    cache: *cache,
                    held,
                    limit,
                });
            }
            lock.unlock().map_err(failed("unlock", &dir))?;
        }
        shared(&lock, &dir)?;
        let identity = crate::facts::identity();
        let owner_ids =
            (identity.privilege == Privilege::Root).then_some((identity.uid, identity.gid));
        let mut mounts = Vec::new();
        let mut env = Vec::new();
        for cache in caches {
            let base = dir.join(cache.name());
            let (variable, inside) = cache.variable();
            env.push((OsString::from(variable), inside.clone().into_os_string()));
            let parts: Vec<(PathBuf, PathBuf)> = if cache.parts().is_empty() {
                vec![(base.clone(), inside)]
            } else {
                private_dir(&base)?;
                cache
                    .parts()
                    .iter()
                    .map(|part| (base.join(part), inside.join(part)))
                    .collect()
            };
            for (host, target) in parts {
                sandbox_dir(&host, owner_ids)?;
                mounts.push(CacheMount { host, target });
            }
        }
        Ok(Opened {
            mounts,
            env,
            emptied,
            _lock: Arc::new(lock),
        })
    }

    /// Every cache in the store, sized.
    pub fn list(&self) -> Result<Vec<Listed>, CacheError> {
        let mut found = Vec::new();
        for (key, dir) in self.keys()? {
            let origin = read_origin(&dir);
            for cache in CACHES {
                let path = dir.join(cache.name());
                let held = match open_top(&path) {
                    Ok(None) => continue,
                    Ok(Some(top)) => tree::usage(top.as_fd(), &LIMITS).map_err(|e| e.to_string()),
                    Err(err) => Err(format!("cannot open it: {err}")),
                };
                found.push(Listed {
                    key: key.clone(),
                    origin: origin.clone(),
                    cache,
                    held,
                });
            }
        }
        Ok(found)
    }

    /// Empties and removes the caches named `only` (all when `None`) of the keys `owner` picks
    /// (all when `None`). A key a running session holds is left alone and reported so.
    pub fn clear(
        &self,
        owner: Option<&Owner>,
        only: Option<Cache>,
    ) -> Result<Vec<Cleared>, CacheError> {
        let wanted = owner.map(Owner::key);
        let mut cleared = Vec::new();
        for (key, dir) in self.keys()? {
            if wanted.as_ref().is_some_and(|w| *w != key) {
                continue;
            }
            let origin = read_origin(&dir);
            let present: Vec<Cache> = CACHES
                .into_iter()
                .filter(|c| only.is_none_or(|o| o == *c))
                .filter(|c| fs::symlink_metadata(dir.join(c.name())).is_ok())
                .collect();
            if present.is_empty() {
                continue;
            }
            let lock = lock_file(&dir)?;
            let free = lock.try_lock().is_ok();
            for cache in present {
                let path = dir.join(cache.name());
                let (held, failed) = if free {
                    match clear_one(cache, &path) {
                        Ok(held) => (Some(held), None),
                        Err(err) => (None, Some(err.to_string())),
                    }
                } else {
                    (None, None)
                };
                cleared.push(Cleared {
                    key: key.clone(),
                    origin: origin.clone(),
                    cache,
                    held,
                    failed,
                });
            }
        }
        Ok(cleared)
    }

    /// The key directories, sorted; none when the store does not exist yet.
    fn keys(&self) -> Result<Vec<(String, PathBuf)>, CacheError> {
        let entries = match fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(failed("list", &self.root)(err)),
        };
        let mut keys: Vec<(String, PathBuf)> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
            .filter(|(name, _)| name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit()))
            .collect();
        keys.sort();
        Ok(keys)
    }
}

/// Creates `path` (mode 0700, the invoking user's) unless it exists; a link there is refused.
fn private_dir(path: &Path) -> Result<(), CacheError> {
    match fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
            let meta = fs::symlink_metadata(path).map_err(failed("inspect", path))?;
            if meta.is_dir() {
                Ok(())
            } else {
                Err(failed("use", path)(io::Error::from(
                    io::ErrorKind::NotADirectory,
                )))
            }
        }
        Err(err) => Err(failed("create", path)(err)),
    }
}

/// Creates the mounted directory `path` for the sandbox: as root, owned by the sandbox's uid and
/// gid (`ids`), so its writes are never root's; unprivileged, the user's own.
fn sandbox_dir(path: &Path, ids: Option<(u32, u32)>) -> Result<(), CacheError> {
    private_dir(path)?;
    if let Some((uid, gid)) = ids {
        std::os::unix::fs::lchown(path, Some(uid), Some(gid))
            .map_err(failed("hand to the sandbox user", path))?;
    }
    Ok(())
}

fn lock_file(dir: &Path) -> Result<File, CacheError> {
    let path = dir.join(".lock");
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(failed("open the lock of", &path))
}

/// Takes the shared lock, waiting a bounded time for a `cordon cache clear` to finish.
fn shared(lock: &File, dir: &Path) -> Result<(), CacheError> {
    for _ in 0..LOCK_TRIES {
        if lock.try_lock_shared().is_ok() {
            return Ok(());
        }
        std::thread::sleep(LOCK_WAIT);
    }
    Err(CacheError::Busy {
        path: dir.to_path_buf(),
    })
}

/// Sizes, empties and removes the cache directory `path`.
fn clear_one(cache: Cache, path: &Path) -> Result<Result<Usage, TreeError>, CacheError> {
    let held = match open_top(path).map_err(failed("open", path))? {
        Some(top) => tree::usage(top.as_fd(), &LIMITS),
        None => return Ok(Ok(Usage::default())),
    };
    empty(cache.name(), path)?;
    fs::remove_dir(path).map_err(failed("remove", path))?;
    Ok(held)
}

/// The top of a cache directory, opened for listing; `None` when it does not exist. The sandbox
/// owns the top of a whole-directory cache (go, uv) and may have taken its own permissions away
/// (`chmod 000`, which hid the cache from the limit): owner permission is given back through the
/// very inode (opened `O_PATH | O_NOFOLLOW`, then its `/proc/self/fd` entry), so no link or
/// rename can redirect it.
fn open_top(path: &Path) -> io::Result<Option<File>> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::PermissionsExt;
    let pinned = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(pinned) => pinned,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    let magic = format!("/proc/self/fd/{}", pinned.as_raw_fd());
    let mode = fs::metadata(&magic)?.permissions().mode() & 0o7777;
    if mode & 0o700 != 0o700 {
        fs::set_permissions(&magic, fs::Permissions::from_mode(mode | 0o700))?;
    }
    File::open(&magic).map(Some)
}

/// Empties the cache directory `path` through [`tree::empty`].
fn empty(name: &'static str, path: &Path) -> Result<(), CacheError> {
    let error = |source| CacheError::Empty {
        name,
        path: path.to_path_buf(),
        source,
    };
    let top = open_top(path)
        .map_err(failed("open", path))?
        .ok_or_else(|| failed("open", path)(io::Error::from(io::ErrorKind::NotFound)))?;
    tree::empty(top.as_fd()).map_err(error)?;
    Ok(())
}

/// The key's recorded owner, at most 4 KiB of it (the host wrote it; read bounded anyway).
fn read_origin(dir: &Path) -> String {
    let mut text = String::new();
    if let Ok(file) = File::open(dir.join("origin")) {
        let _ = file.take(4096).read_to_string(&mut text);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cache_mounts_only_download_directories_below_the_session_tmp() {
        for cache in CACHES {
            let (_, inside) = cache.variable();
            assert!(inside.starts_with("/tmp"), "{cache:?}");
            for part in cache.parts() {
                assert!(!part.contains('/') && !part.is_empty(), "{cache:?} {part}");
                assert!(!["bin", "config", "credentials.toml"].contains(part));
            }
            assert_eq!(Cache::parse(cache.name()), Some(cache));
        }
        assert_eq!(Cache::parse("maven"), None);
    }

    #[test]
    fn sizes_are_shown_with_one_decimal_in_the_largest_unit_below_1024() {
        for (bytes, shown) in [
            (0, "0 bytes"),
            (1023, "1023 bytes"),
            (1024, "1.0 KiB"),
            (5 << 20, "5.0 MiB"),
            ((51 << 30) / 10, "5.1 GiB"),
            (3 << 40, "3.0 TiB"),
        ] {
            assert_eq!(shown_size(bytes), shown);
        }
    }

    #[test]
    fn keys_differ_by_owner_kind_and_path_and_are_stable() {
        let a = Owner::Pipeline("/p/pipeline.yaml".into());
        let b = Owner::Pipeline("/q/pipeline.yaml".into());
        let c = Owner::Exec("/p/pipeline.yaml".into());
        assert_ne!(a.key(), b.key());
        assert_ne!(a.key(), c.key());
        assert_eq!(a.key(), Owner::Pipeline("/p/pipeline.yaml".into()).key());
        assert_eq!(a.key().len(), 32);
    }
}
