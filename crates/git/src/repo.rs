//! `Repo`: the workspace's repository as the run found it — its git and common directories opened
//! at start (and re-checked by device and inode before each use), the object store and refs read
//! through gitoxide, and the baseline the commit action compares against.

use std::path::{Path, PathBuf};

use cordon_workspace::{Kind, View, WsPath};
use gix_hash::ObjectId;
use gix_object::FindExt;

use crate::GitError;
use crate::worktree::MAX_BLOB;

/// The most bytes of a commit object cordon's git reads (headers and message).
pub(crate) const MAX_COMMIT: u64 = 1 << 20;

/// The most bytes read of a git directory's `config` or `info/exclude`.
const MAX_CONFIG: usize = 1 << 20;

/// The directories of a work tree's repository, as discovered by the caller (the sandbox's
/// `git::discover`, which refuses `.git` layouts the sandbox could redirect).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dirs {
    pub git_dir: PathBuf,
    /// The same as `git_dir` unless the work tree is a linked worktree.
    pub common_dir: PathBuf,
}

/// The name and e-mail commits are made with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub email: String,
}

impl Default for Identity {
    /// `cordon <cordon@localhost>`, for a user without a git identity.
    fn default() -> Identity {
        Identity {
            name: "cordon".to_owned(),
            email: "cordon@localhost".to_owned(),
        }
    }
}

/// What the run's sandboxes can do to the work tree and the git directory, which decides what
/// the host's git must never read and what it checks before it reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Guard {
    /// Paths masked in every sandbox (`isolation.hide`): never read, never diffed, committed as
    /// HEAD has them. The root's secret `.env*` files ([`cordon_workspace::is_env_secret`]) are
    /// always treated so, whatever this holds.
    pub hidden: Vec<WsPath>,
    /// `isolation.allow_git_mutations`: a step could have written anything in the git
    /// directory, so before each use the object store is checked to hold only real directories
    /// and regular files, and `objects/info/alternates` to be what it was at start.
    pub git_writable: bool,
}

impl Guard {
    /// Whether the work-tree path `path` (bytes, `/`-separated) is masked: a root secret
    /// `.env*` file, a hidden path, or anything below one.
    pub fn masks(&self, path: &[u8]) -> bool {
        let below = |prefix: &[u8]| {
            path.starts_with(prefix) && (path.len() == prefix.len() || path[prefix.len()] == b'/')
        };
        let root = path.split(|&b| b == b'/').next().unwrap_or_default();
        cordon_workspace::is_env_secret(root) || self.hidden.iter().any(|h| below(h.as_bytes()))
    }
}

/// The repository facts the run started with, kept in the run's scratch directory so that a file
/// planted before a crash is still caught after it.
#[derive(serde::Serialize, serde::Deserialize)]
struct Baseline {
    pub(crate) config: Option<Vec<u8>>,
    /// `objects/info/alternates` (only checked when the git directory is writable).
    #[serde(default)]
    alternates: Option<Vec<u8>>,
    /// Entries (relative to the git or common directory, which the path says) absent at start.
    absent: Vec<String>,
    /// When the run started (seconds since the epoch): packs whose inode changed since are
    /// measured for delta chains (`None`, a baseline from before: every pack is).
    #[serde(default)]
    started: Option<i64>,
}

/// The repository of one run.
pub struct Repo {
    pub(crate) dirs: Dirs,
    /// Views of the git and common directories: what cordon reads there (config,
    /// `info/exclude`) is read through them, and every directory it writes into is checked
    /// through them to be a real directory first.
    pub(crate) git_view: View,
    pub(crate) common_view: View,
    pub(crate) objects: gix_odb::Handle,
    pub(crate) refs: gix_ref::file::Store,
    pub(crate) identity: Identity,
    pub(crate) guard: Guard,
    pub(crate) config: Option<Vec<u8>>,
    alternates: Option<Vec<u8>>,
    absent: Vec<PathBuf>,
    pinned: Vec<(PathBuf, (u64, u64))>,
    /// When the run started (see `Baseline::started`).
    started: Option<i64>,
    /// Packs whose delta chains were measured (path, size, mtime), with a writable git dir.
    packs_checked: std::cell::RefCell<std::collections::HashSet<PackKey>>,
}

/// A pack file as [`Repo::refuse_planted_objects`] saw it: path, size, mtime.
type PackKey = (Vec<u8>, u64, (i64, u32));

impl Repo {
    /// Opens the repository of the work tree `workspace`. `scratch` is the run's private
    /// directory (in the state directory), where the baseline is written on the first open and
    /// read back on resume; without one (a dry run's checks) the baseline is kept in memory.
    pub fn open(
        workspace: &View,
        dirs: Dirs,
        scratch: Option<&Path>,
        identity: Identity,
        guard: Guard,
    ) -> Result<Repo, GitError> {
        let open = |path: &Path| View::open(path).map_err(GitError::io("open", path));
        let git_view = open(&dirs.git_dir)?;
        let common_view = open(&dirs.common_dir)?;
        let config = common_view
            .read(&WsPath::name(b"config").expect("a plain name"), MAX_CONFIG)?
            .map(|read| read.bytes);
        refuse_unsupported(config.as_deref())?;
        let alternates = read_alternates(&common_view)?;
        let baseline_file = scratch.map(|s| s.join("git-baseline.json"));
        let (config, alternates, absent, started) = match baseline_file
            .as_ref()
            .and_then(|file| std::fs::read(file).ok())
            .and_then(|b| serde_json::from_slice::<Baseline>(&b).ok())
        {
            Some(b) => (
                b.config,
                b.alternates,
                b.absent.into_iter().map(PathBuf::from).collect(),
                b.started,
            ),
            None => {
                let candidates = [
                    dirs.git_dir.join("commondir"),
                    dirs.git_dir.join("config.worktree"),
                    dirs.common_dir.join("config.worktree"),
                ];
                let absent: Vec<PathBuf> = candidates
                    .into_iter()
                    .filter(|p| std::fs::symlink_metadata(p).is_err())
                    .collect();
                // A second early: a pack written in the same second as the start is measured too.
                let started = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .ok()
                    .and_then(|d| i64::try_from(d.as_secs()).ok())
                    .map(|secs| secs - 1);
                let record = Baseline {
                    config: config.clone(),
                    alternates: alternates.clone(),
                    absent: absent.iter().map(|p| p.display().to_string()).collect(),
                    started,
                };
                if let (Some(scratch), Some(file)) = (scratch, &baseline_file) {
                    std::fs::create_dir_all(scratch).map_err(GitError::io("create", scratch))?;
                    std::fs::write(file, serde_json::to_vec(&record).unwrap_or_default())
                        .map_err(GitError::io("write", file))?;
                }
                (config, alternates, absent, started)
            }
        };
        let pinned = vec![
            (workspace.path().to_path_buf(), view_id(workspace)?),
            (dirs.git_dir.clone(), view_id(&git_view)?),
            (dirs.common_dir.clone(), view_id(&common_view)?),
        ];
        // No object is held in memory larger than the largest blob cordon itself reads: a loose
        // object or pack entry that claims more (a step that could write the object store) is
        // refused before anything is allocated for it.
        let options = gix_odb::store::init::Options {
            alloc_limit_bytes: usize::try_from(MAX_BLOB + (1 << 10)).ok(),
            ..Default::default()
        };
        let objects = gix_odb::at_opts(
            dirs.common_dir.join("objects"),
            gix_hash::Kind::Sha1,
            None,
            options,
        )
        .map_err(GitError::io("open the object store in", &dirs.common_dir))?;
        let refs = if dirs.git_dir == dirs.common_dir {
            gix_ref::file::Store::at(dirs.git_dir.clone(), gix_hash::Kind::Sha1)
        } else {
            gix_ref::file::Store::for_linked_worktree(
                dirs.git_dir.clone(),
                dirs.common_dir.clone(),
                gix_hash::Kind::Sha1,
            )
        };
        Ok(Repo {
            dirs,
            git_view,
            common_view,
            objects,
            refs,
            identity,
            guard,
            config,
            alternates,
            absent,
            pinned,
            started,
            packs_checked: Default::default(),
        })
    }

    /// The author and committer of this run's commits.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    pub fn dirs(&self) -> &Dirs {
        &self.dirs
    }

    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    /// Refuses when the workspace, the git directory or the common directory found at their
    /// paths is no longer what the run opened (gitoxide reads the git directories by path).
    pub(crate) fn check_pinned(&self) -> Result<(), GitError> {
        for (path, id) in &self.pinned {
            let now = std::fs::metadata(path).ok().map(|m| {
                use std::os::unix::fs::MetadataExt;
                (m.dev(), m.ino())
            });
            if now != Some(*id) {
                return Err(GitError::Replaced(path.clone()));
            }
        }
        Ok(())
    }

    /// Refuses when `config` changed since the run started, or `commondir` / `config.worktree`
    /// appeared (a step that could write the git directory may have planted configuration).
    pub(crate) fn refuse_tampering(&self) -> Result<(), GitError> {
        let config_path = self.dirs.common_dir.join("config");
        let now = self
            .common_view
            .read(&WsPath::name(b"config").expect("a plain name"), MAX_CONFIG)
            .ok()
            .flatten()
            .map(|read| read.bytes);
        if now != self.config {
            return Err(GitError::Tampered(config_path));
        }
        for path in &self.absent {
            if std::fs::symlink_metadata(path).is_ok() {
                return Err(GitError::Tampered(path.clone()));
            }
        }
        Ok(())
    }

    /// The tree and message of `commit`, refused past [`MAX_COMMIT`] bytes before anything is
    /// inflated (a step with `allow_git_mutations` can commit a message of a gigabyte).
    pub(crate) fn commit_parts(
        &self,
        commit: &gix_hash::oid,
    ) -> Result<(ObjectId, String), GitError> {
        use gix_object::FindHeader as _;
        match self.objects.try_header(commit) {
            Ok(Some(header)) if header.size > MAX_COMMIT => {
                return Err(GitError::Objects(format!(
                    "the commit {commit} is {} bytes, more than the {MAX_COMMIT} cordon's git \
                     reads; amend it to a shorter message",
                    header.size
                )));
            }
            _ => {}
        }
        let mut buffer = Vec::new();
        let parsed = self
            .objects
            .find_commit(commit, &mut buffer)
            .map_err(GitError::library("read the HEAD commit"))?;
        Ok((parsed.tree(), parsed.message.to_string()))
    }

    /// `info/exclude` of the repository (empty when there is none or it is not a regular file).
    pub(crate) fn info_exclude(&self) -> Vec<u8> {
        WsPath::new("info/exclude")
            .ok()
            .and_then(|path| self.common_view.read(&path, MAX_CONFIG).ok().flatten())
            .map(|read| read.bytes)
            .unwrap_or_default()
    }

    /// Refuses unless every component of `relative` (below the common directory when `common`,
    /// else the git directory) is a real directory — the last one a regular file when `expect`
    /// says so — or absent; never a symbolic link. gitoxide writes objects, refs, reflogs and the
    /// index by path, so a link a step planted in a writable git directory
    /// (`allow_git_mutations`) must be found before anything is written. No sandbox process runs
    /// while the host writes, so what is checked is what is written.
    pub(crate) fn refuse_links(
        &self,
        common: bool,
        relative: &str,
        expect: Expect,
    ) -> Result<(), GitError> {
        let (view, base) = if common {
            (&self.common_view, &self.dirs.common_dir)
        } else {
            (&self.git_view, &self.dirs.git_dir)
        };
        let refused = || GitError::LinkedGitDir(base.join(relative));
        let names: Vec<&str> = relative.split('/').filter(|n| !n.is_empty()).collect();
        let mut prefix: Option<WsPath> = None;
        for (index, name) in names.iter().enumerate() {
            let path = WsPath::child(prefix.as_ref(), name.as_bytes()).map_err(|_| refused())?;
            let wanted = if index + 1 == names.len() && expect == Expect::File {
                Kind::File
            } else {
                Kind::Directory
            };
            match view.meta(&path).map_err(|_| refused())? {
                None => return Ok(()),
                Some(meta) if meta.kind == wanted => {}
                Some(_) => return Err(refused()),
            }
            prefix = Some(path);
        }
        Ok(())
    }
}

impl Repo {
    /// Refuses when the file `relative` (checked by [`Repo::refuse_links`] first) is larger
    /// than `max` bytes.
    pub(crate) fn refuse_oversized(
        &self,
        common: bool,
        relative: &str,
        max: usize,
    ) -> Result<(), GitError> {
        let (view, base) = if common {
            (&self.common_view, &self.dirs.common_dir)
        } else {
            (&self.git_view, &self.dirs.git_dir)
        };
        let path =
            WsPath::new(relative).map_err(|_| GitError::LinkedGitDir(base.join(relative)))?;
        match view.meta(&path) {
            Ok(Some(meta)) if meta.size > max as u64 => Err(GitError::Objects(format!(
                "`{relative}` is larger than {max} bytes, more than git writes there"
            ))),
            Ok(_) => Ok(()),
            Err(_) => Err(GitError::LinkedGitDir(base.join(relative))),
        }
    }
}

/// What the last component [`Repo::refuse_links`] checks must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expect {
    Directory,
    File,
}

/// `objects/info/alternates` of the common directory, `None` without one.
fn read_alternates(common: &View) -> Result<Option<Vec<u8>>, GitError> {
    let path = WsPath::new("objects/info/alternates").expect("a plain path");
    match common.read(&path, MAX_CONFIG) {
        Ok(read) => Ok(read.map(|read| read.bytes)),
        Err(_) => Err(GitError::LinkedGitDir(
            common.path().join("objects/info/alternates"),
        )),
    }
}

impl Repo {
    /// Refuses when a step that could write the git directory (`allow_git_mutations`) left
    /// anything in the object store but real directories and regular files — gitoxide opens
    /// objects by path, and one planted link or FIFO would make the host read a file of its own
    /// or hang — or changed `objects/info/alternates` (which names other object stores to
    /// read). Nothing to check when the sandbox cannot write the git directory.
    pub(crate) fn refuse_planted_objects(&self) -> Result<(), GitError> {
        if !self.guard.git_writable {
            return Ok(());
        }
        if read_alternates(&self.common_view)? != self.alternates {
            return Err(GitError::Tampered(
                self.dirs.common_dir.join("objects/info/alternates"),
            ));
        }
        let packs = store_packs(&self.common_view, &self.dirs.common_dir, self.started)?;
        for (pack, size, mtime) in packs {
            let key = (pack.as_bytes().to_vec(), size, mtime);
            if self.packs_checked.borrow().contains(&key) {
                continue;
            }
            let path = self.dirs.common_dir.join(pack.shown());
            crate::pack::refuse_deep_chains(&path)?;
            self.packs_checked.borrow_mut().insert(key);
        }
        Ok(())
    }
}

/// A pack file found by [`store_packs`]: its path, size and mtime.
pub(crate) type StorePack = (WsPath, u64, (i64, u32));

/// The packs in the object store of the git directory `base` seen through `view`, each with its
/// size and mtime, after checking the store holds only real directories and regular files
/// (gitoxide opens objects by path, and one planted link or FIFO would make the host read a file
/// of its own or hang). With `started`, packs whose inode has not changed since (the user's own
/// from before the run) are left out.
pub(crate) fn store_packs(
    view: &View,
    base: &Path,
    started: Option<i64>,
) -> Result<Vec<StorePack>, GitError> {
    let top = WsPath::name(b"objects").expect("a plain name");
    let refused = |path: &WsPath| GitError::LinkedGitDir(base.join(path.shown()));
    match view.meta(&top).map_err(|_| refused(&top))? {
        None => return Ok(Vec::new()),
        Some(meta) if meta.kind == Kind::Directory => {}
        Some(_) => return Err(refused(&top)),
    }
    let mut pending = vec![top];
    let mut packs = Vec::new();
    let mut seen = 0usize;
    while let Some(dir) = pending.pop() {
        let listing = view
            .list(Some(&dir), MAX_OBJECT_ENTRIES)
            .map_err(|_| refused(&dir))?;
        seen += listing.entries.len();
        if seen > MAX_OBJECT_ENTRIES {
            return Err(GitError::Objects(format!(
                "the object store holds more than {MAX_OBJECT_ENTRIES} entries; pack it (`git gc`)"
            )));
        }
        for entry in listing.entries {
            let path = dir.join(&entry.name).map_err(|_| refused(&dir))?;
            match entry.meta.kind {
                // Loose objects and packs sit in `objects/<dir>/`: a directory deeper than
                // that is nothing git reads.
                Kind::Directory if path.components().count() < 3 => pending.push(path),
                Kind::File
                    if path.as_bytes().starts_with(b"objects/pack/")
                        && path.as_bytes().ends_with(b".pack") =>
                {
                    // The user's packs from before the run are the user's; one whose inode
                    // changed since (ctime, which no process can set back) may be a step's.
                    if started.is_none_or(|t| entry.meta.ctime.0 >= t) {
                        packs.push((path, entry.meta.size, entry.meta.mtime));
                    }
                }
                Kind::File | Kind::Directory => {}
                _ => return Err(refused(&path)),
            }
        }
    }
    Ok(packs)
}

/// The most entries of the object store [`Repo::refuse_planted_objects`] lists.
const MAX_OBJECT_ENTRIES: usize = 1_000_000;

fn view_id(view: &View) -> Result<(u64, u64), GitError> {
    view.id().map_err(GitError::io("inspect", view.path()))
}

/// Refuses a repository whose objects are not SHA-1 (`extensions.objectFormat = sha256`).
fn refuse_unsupported(config: Option<&[u8]>) -> Result<(), GitError> {
    let Some(config) = config else {
        return Ok(());
    };
    let Ok(file) = gix_config::File::from_bytes_no_includes(
        config,
        gix_config::file::Metadata::from(gix_config::Source::Local),
        gix_config::file::init::Options::default(),
    ) else {
        return Ok(());
    };
    match file.string("extensions.objectFormat") {
        Some(format) if !format.eq_ignore_ascii_case(b"sha1") => Err(GitError::Unsupported(
            format!("the object format `{format}`"),
        )),
        _ => Ok(()),
    }
}
