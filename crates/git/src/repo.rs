//! `Repo`: the workspace's repository as the run found it — its git and common directories opened
//! at start (and re-checked by device and inode before each use), the object store and refs read
//! through gitoxide, and the baseline the commit action compares against.

use std::path::{Path, PathBuf};

use cordon_workspace::{Kind, View, WsPath};
use gix_hash::ObjectId;
use gix_object::FindExt;

use crate::GitError;

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

/// The repository facts the run started with, kept in the run's scratch directory so that a file
/// planted before a crash is still caught after it.
#[derive(serde::Serialize, serde::Deserialize)]
struct Baseline {
    config: Option<Vec<u8>>,
    /// Entries (relative to the git or common directory, which the path says) absent at start.
    absent: Vec<String>,
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
    config: Option<Vec<u8>>,
    absent: Vec<PathBuf>,
    pinned: Vec<(PathBuf, (u64, u64))>,
}

impl Repo {
    /// Opens the repository of the work tree `workspace`. `scratch` is the run's private
    /// directory (in the state directory), where the baseline is written on the first open and
    /// read back on resume; without one (a dry run's checks) the baseline is kept in memory.
    pub fn open(
        workspace: &View,
        dirs: Dirs,
        scratch: Option<&Path>,
        identity: Identity,
    ) -> Result<Repo, GitError> {
        let open = |path: &Path| View::open(path).map_err(GitError::io("open", path));
        let git_view = open(&dirs.git_dir)?;
        let common_view = open(&dirs.common_dir)?;
        let config = common_view
            .read(&WsPath::name(b"config").expect("a plain name"), MAX_CONFIG)?
            .map(|read| read.bytes);
        refuse_unsupported(config.as_deref())?;
        let baseline_file = scratch.map(|s| s.join("git-baseline.json"));
        let (config, absent) = match baseline_file
            .as_ref()
            .and_then(|file| std::fs::read(file).ok())
            .and_then(|b| serde_json::from_slice::<Baseline>(&b).ok())
        {
            Some(b) => (b.config, b.absent.into_iter().map(PathBuf::from).collect()),
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
                let record = Baseline {
                    config: config.clone(),
                    absent: absent.iter().map(|p| p.display().to_string()).collect(),
                };
                if let (Some(scratch), Some(file)) = (scratch, &baseline_file) {
                    std::fs::create_dir_all(scratch).map_err(GitError::io("create", scratch))?;
                    std::fs::write(file, serde_json::to_vec(&record).unwrap_or_default())
                        .map_err(GitError::io("write", file))?;
                }
                (config, absent)
            }
        };
        let pinned = vec![
            (workspace.path().to_path_buf(), view_id(workspace)?),
            (dirs.git_dir.clone(), view_id(&git_view)?),
            (dirs.common_dir.clone(), view_id(&common_view)?),
        ];
        let objects = gix_odb::at(dirs.common_dir.join("objects"), gix_hash::Kind::Sha1)
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
            config,
            absent,
            pinned,
        })
    }

    pub fn dirs(&self) -> &Dirs {
        &self.dirs
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

    /// The commit `HEAD` names.
    pub fn head(&self) -> Result<ObjectId, GitError> {
        self.check_pinned()?;
        let mut name = String::from("HEAD");
        // HEAD → a branch → (rarely) another symbolic ref: a short chain, bounded.
        for _ in 0..5 {
            let reference = self
                .refs
                .try_find(name.as_str())
                .map_err(GitError::library("read HEAD"))?
                .ok_or(GitError::NoHead)?;
            match reference.target {
                gix_ref::Target::Object(id) => return Ok(id),
                gix_ref::Target::Symbolic(next) => name = next.as_bstr().to_string(),
            }
        }
        Err(GitError::NoHead)
    }

    /// The tree and message of `commit`.
    pub(crate) fn commit_parts(
        &self,
        commit: &gix_hash::oid,
    ) -> Result<(ObjectId, String), GitError> {
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

/// What the last component [`Repo::refuse_links`] checks must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expect {
    Directory,
    File,
}

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
