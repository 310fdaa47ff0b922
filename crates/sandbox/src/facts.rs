//! Gathering the host facts a session is planned from: who invoked cordon, which system
//! directories exist, the workspace's git layout, the paths to mount or mask. The impure half of
//! planning; [`crate::mounts::plan`] is the pure half.
//!
//! Descriptors for everything mounted from a user-chosen path are made here, on the host:
//! as root, detached copies of the mounts (`open_tree(OPEN_TREE_CLONE)`, the workspace's
//! idmapped), since init runs as an unowned uid that could not even traverse e.g. `/root`;
//! unprivileged, `O_PATH` descriptors that init checks its own lookup against.

use std::collections::HashSet;
use std::fs;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use crate::config::{ImageRoot, PrivateGitDir, SessionConfig};
use crate::error::SandboxError;
use crate::git;
use crate::identity::{HostUser, Identity, Privilege};
use crate::limits;
use crate::mounts::{
    self, Check, GitLayout, GitMutations, Kind, Layout, Mounted, Source, SystemEntry,
};
use crate::sys;
use crate::sys::mount::{Attributes, Depth};
use crate::sys::spawn::PendingUserNamespace;
use crate::wire::Setup;

/// The name every session's UTS namespace gets.
pub const HOSTNAME: &str = "cordon";

/// What [`gather`] found: the setup message for init and the descriptors it indexes.
pub(crate) struct Facts {
    pub setup: Setup,
    pub fds: Vec<OwnedFd>,
}

/// The invoking user, from the process's ids and `/etc/passwd` / `/etc/group`; `HOME` wins over
/// the passwd entry when it is an absolute path.
pub fn host_user() -> HostUser {
    let (uid, gid) = sys::process::ids();
    let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
    let entry = crate::identity::passwd_entry(&passwd, uid);
    let name = entry
        .as_ref()
        .map(|(name, _)| name.clone())
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| uid.to_string());
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .or(entry.map(|(_, home)| home))
        .unwrap_or_else(|| PathBuf::from("/"));
    let groups = fs::read_to_string("/etc/group").unwrap_or_default();
    let group = crate::identity::group_name(&groups, gid).unwrap_or_else(|| name.clone());
    HostUser {
        uid,
        gid,
        name,
        group,
        home,
    }
}

/// The sandbox identity for the invoking user (see [`Identity::resolve`]).
pub(crate) fn identity() -> Identity {
    let subuid = fs::read_to_string("/etc/subuid").ok();
    let subgid = fs::read_to_string("/etc/subgid").ok();
    Identity::resolve(&host_user(), subuid.as_deref(), subgid.as_deref())
}

/// `early` is a user namespace child started ahead (as root), used for the workspace idmapping
/// unless one for the same maps is cached already.
pub(crate) fn gather(
    config: &SessionConfig,
    identity: &Identity,
    early: Option<PendingUserNamespace>,
) -> Result<Facts, SandboxError> {
    let mut fds: Vec<OwnedFd> = Vec::new();
    let workspace_path = config.workspace.path().to_path_buf();
    utf8(&workspace_path)?;

    // As root, the idmapping that shows the workspace owner's files as the sandbox user's (and
    // stores the sandbox user's new files as the owner's). Also applied to git directories outside
    // the workspace (worktrees), which belong to the same owner; git refuses a repository whose
    // directories another uid owns.
    let mut idmap = None;
    let workspace_source = match identity.privilege {
        Privilege::Root => {
            let meta = fs::File::from(
                config
                    .workspace
                    .fd()
                    .try_clone()
                    .map_err(SandboxError::start("duplicate the workspace descriptor"))?,
            )
            .metadata()
            .map_err(SandboxError::start("inspect the workspace"))?;
            let tree = sys::mount::clone_tree(config.workspace.fd().as_fd(), Depth::Top)
                .map_err(SandboxError::start("copy the workspace mount"))?;
            if let Some(maps) = identity.workspace_idmap(meta.uid(), meta.gid()) {
                idmap = Some(idmap_namespace(&maps.uid_map, &maps.gid_map, early)?);
            }
            let attrs = Attributes {
                set: sys::mount::NO_SUID | sys::mount::NO_DEV,
                clear: 0,
                userns: idmap,
            };
            sys::mount::set_attributes(tree.as_fd(), Depth::Top, attrs)
                .map_err(SandboxError::start("idmap the workspace mount"))?;
            push(&mut fds, tree, Check::Detached)
        }
        Privilege::Unprivileged => {
            let fd = config
                .workspace
                .fd()
                .try_clone()
                .map_err(SandboxError::start("duplicate the workspace descriptor"))?;
            push(&mut fds, fd, Check::SameObjectAs(workspace_path.clone()))
        }
    };

    // With an image, the image is the root and no host system directory is mounted. As root it
    // is an idmapped detached copy (the importing user's files shown as the sandbox user's, so a
    // writable layer can copy them up); unprivileged, the sandbox user is that user already.
    if let Some(image) = &config.image {
        refuse_image_holding_hidden(image, config, identity)?;
    }
    let image = match &config.image {
        None => None,
        Some(image) => Some(mounts::ImageLayout {
            source: image_source(identity, image, &mut fds)?,
            writable: image.writable,
        }),
    };
    let system = mounts::SYSTEM_DIRS
        .iter()
        .filter(|_| config.image.is_none())
        .filter_map(|dir| {
            let path = PathBuf::from(dir);
            let meta = fs::symlink_metadata(&path).ok()?;
            if meta.is_symlink() {
                Some(SystemEntry::Symlink {
                    points_to: fs::read_link(&path).ok()?,
                    path,
                })
            } else if meta.is_dir() {
                Some(SystemEntry::Dir(path))
            } else {
                None
            }
        })
        .collect();

    let mut read_only = Vec::new();
    for path in config.read_only.iter().chain(&config.toolchains.read_only) {
        let error = |source| SandboxError::ReadOnlyPath {
            path: path.clone(),
            source,
        };
        let canonical = path.canonicalize().map_err(error)?;
        utf8(&canonical)?;
        let source = host_source(identity, &canonical, None, &mut fds).map_err(error)?;
        let kind = if canonical.is_dir() {
            Kind::Dir
        } else {
            Kind::File
        };
        read_only.push(Mounted {
            path: canonical,
            source,
            kind,
        });
    }

    let mut caches = Vec::new();
    for mount in config.caches.iter().flat_map(|c| &c.mounts) {
        let error = |source| SandboxError::CachePath {
            path: mount.host.clone(),
            source,
        };
        let source = host_source(identity, &mount.host, None, &mut fds).map_err(error)?;
        caches.push(Mounted {
            path: mount.target.clone(),
            source,
            kind: Kind::Dir,
        });
    }

    // The top-level git directories, then every submodule's and linked worktree's inside the
    // workspace (see `git::protection`), each mounted the same way. A submodule path without a
    // `.git` is kept read-only as a whole (listed with the protected entries), so none can be
    // created in it.
    let mut git = None;
    let mut submodules = Vec::new();
    let mut gitlink_paths = Vec::new();
    let protection = git::protection_trusting(&workspace_path, config.workspace.common_dir())?;
    let mut mounter = GitMounter {
        config,
        identity,
        workspace: &workspace_path,
        idmap,
        fds: &mut fds,
        mounted: HashSet::new(),
        protected: HashSet::new(),
    };
    let private = config.private_git.as_ref().filter(|p| {
        git_mutations(config) == GitMutations::Allow
            && protection.dot_git_file.is_none()
            && protection.dirs == [p.git_dir.clone()]
    });
    if let (Some(private), None) = (&config.private_git, private) {
        return Err(SandboxError::GitMutations {
            path: private.git_dir.clone(),
            problem: "is no longer the workspace's only git directory (it changed since the \
                      private copy was made)",
        });
    }
    if let Some(private) = private {
        git = Some(mounter.private(private)?);
    } else if protection.dot_git_file.is_some() || !protection.dirs.is_empty() {
        // A `.git` file whose directory is not accepted is still bound read-only (no directory).
        git = Some(mounter.layout(protection.dot_git_file, protection.dirs)?);
    }
    for submodule in protection.submodules {
        match submodule.git {
            git::SubmoduleGit::Dir(dir) => {
                submodules.push(mounter.layout(None, [dir])?);
            }
            git::SubmoduleGit::File { file, git_dir } => {
                submodules.push(mounter.layout(Some(file), git_dir)?);
            }
            git::SubmoduleGit::Missing { is_dir } => {
                utf8(&submodule.path)?;
                let kind = if is_dir { Kind::Dir } else { Kind::File };
                gitlink_paths.push((submodule.path, kind));
            }
        }
    }

    let mut hide = Vec::new();
    for relative in &config.hide {
        if let Some(found) = hidden(&workspace_path.join(relative))? {
            hide.push(found);
        }
    }
    if let Ok(entries) = fs::read_dir(&workspace_path) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let is_env_file = cordon_workspace::is_env_secret(name.as_bytes());
            if is_env_file && let Some(found) = hidden(&entry.path())? {
                hide.push(found);
            }
        }
    }
    let mut protect = gitlink_paths;
    for relative in &config.protect {
        if let Some(found) = protected(&workspace_path, relative)? {
            protect.push(found);
        }
    }
    let masks = config
        .mask
        .iter()
        .chain(&config.toolchains.masks)
        .chain([&config.init.path().to_path_buf()])
        .filter_map(|p| existing(p))
        .collect();

    let layout = Layout {
        system,
        image,
        workspace: Mounted {
            path: workspace_path.clone(),
            source: workspace_source,
            kind: Kind::Dir,
        },
        workspace_read_only: config.workspace_read_only,
        git,
        submodules,
        git_mutations: git_mutations(config),
        read_only,
        caches,
        hide,
        protect,
        masks,
        home: identity.home.clone(),
        runtime_dir: crate::environment::runtime_dir(identity.uid),
        passwd: identity.passwd(),
        group: identity.group_file(),
        tmp_size: config.tmp_size,
    };
    let plan = mounts::plan(&layout);
    let mut read_write = vec![PathBuf::from("/tmp"), PathBuf::from("/dev/shm")];
    // Landlock follows the writable mounts (DESIGN §18): a read-only workspace gets no rule.
    if !config.workspace_read_only {
        read_write.insert(0, workspace_path.clone());
    }
    // Each writable directory of the shared tmpfs that the plan mounts (one inside the workspace
    // is the workspace's).
    for step in &plan.steps {
        if let mounts::Step::SharedTmp {
            home,
            var_tmp,
            runtime,
            ..
        } = step
        {
            read_write.extend([home, var_tmp, runtime].into_iter().flatten().cloned());
        }
    }
    read_write.extend(layout.caches.iter().map(|c| c.path.clone()));
    // A writable image layer is writable through Landlock where the image has directories
    // (DESIGN §18: Landlock follows the writable mounts); the root itself, `/proc`, `/dev` and
    // `/sys` are not, nor anything the plan mounts read-only over it.
    if let Some(image) = config.image.as_ref().filter(|i| i.writable) {
        read_write.extend(image_top_dirs(image.path())?);
    }
    // With mutations allowed, git directories outside the workspace (a worktree's, and any
    // submodule's there) are writable through Landlock too; the mount plan keeps their protected
    // entries read-only.
    for git in layout
        .git
        .iter()
        .chain(&layout.submodules)
        .filter(|_| git_mutations(config) == GitMutations::Allow)
    {
        read_write.extend(
            git.dirs
                .iter()
                .filter(|d| !d.path.starts_with(&workspace_path))
                .map(|d| d.path.clone()),
        );
    }
    let mut devices: Vec<PathBuf> = mounts::DEVICES
        .iter()
        .map(|d| Path::new("/dev").join(d))
        .collect();
    devices.extend([PathBuf::from("/dev/pts"), PathBuf::from("/dev/ptmx")]);
    let setup = Setup {
        plan,
        hostname: HOSTNAME.to_owned(),
        read_exec: vec![PathBuf::from("/")],
        read_write,
        devices,
        limits: limits::plan(&limits::HostLimits::read()?),
    };
    Ok(Facts { setup, fds })
}

/// `git_mutations` as the session gets it: never on a read-only workspace.
fn git_mutations(config: &SessionConfig) -> GitMutations {
    if config.workspace_read_only {
        GitMutations::Deny
    } else {
        config.git_mutations
    }
}

/// Turns git directories into [`GitLayout`]s, making the host descriptors they need and
/// remembering what is mounted already.
struct GitMounter<'a> {
    config: &'a SessionConfig,
    identity: &'a Identity,
    workspace: &'a Path,
    idmap: Option<libc::c_int>,
    fds: &'a mut Vec<OwnedFd>,
    /// The git directories mounted so far. Hash sets, not lists: there may be thousands of
    /// submodules, and a scan per submodule made the work quadratic (review 3).
    mounted: HashSet<PathBuf>,
    /// The entries kept read-only under `allow_git_mutations` so far.
    protected: HashSet<PathBuf>,
}

impl GitMounter<'_> {
    /// The layout of one repository: its `.git` file (if any) and git directories. A directory
    /// already mounted (a submodule `.git` file naming the top-level git directory) is not
    /// mounted twice. One inside the workspace or inside a git directory mounted before it (a
    /// submodule's in `<gitdir>/modules/`, a worktree's included) is already in the new root at
    /// its host path, so it is bound onto itself there; any other is mounted from a host
    /// descriptor like a `--ro` path.
    fn layout(
        &mut self,
        dot_git_file: Option<PathBuf>,
        dirs: impl IntoIterator<Item = PathBuf>,
    ) -> Result<GitLayout, SandboxError> {
        let mut mounted = Vec::new();
        let mut protected = Vec::new();
        if let Some(file) = &dot_git_file {
            utf8(file)?;
        }
        for dir in dirs {
            if self.mounted.contains(&dir) {
                continue;
            }
            utf8(&dir)?;
            // Inside a mounted git directory: one of its ancestors is one (a hash lookup per
            // ancestor rather than a scan of every mounted directory).
            let visible = dir.starts_with(self.workspace)
                || dir.ancestors().skip(1).any(|m| self.mounted.contains(m));
            let source = if visible {
                Source::Itself
            } else {
                host_source(self.identity, &dir, self.idmap, self.fds).map_err(|source| {
                    SandboxError::ReadOnlyPath {
                        path: dir.clone(),
                        source,
                    }
                })?
            };
            if git_mutations(self.config) == GitMutations::Allow {
                // The configuration of the git directories nested in this one (deinitialised
                // submodules', worktrees'), which no gitlink or `.git` file leads to. An entry
                // already kept read-only (a nested git directory mounted itself) is not bound
                // twice.
                let own = git::PROTECTED.iter().map(|name| dir.join(name));
                for path in own.chain(git::protected_below(&dir)?) {
                    if !self.protected.contains(&path) {
                        protected.push(protected_entry(&path)?);
                        self.protected.insert(path);
                    }
                }
            }
            self.mounted.insert(dir.clone());
            mounted.push(Mounted {
                path: dir,
                source,
                kind: Kind::Dir,
            });
        }
        Ok(GitLayout {
            dot_git_file,
            dirs: mounted,
            protected,
            covers: Vec::new(),
        })
    }

    /// The layout of a private git directory standing in for the workspace's `.git`: it is
    /// mounted there read-write (idmapped like the workspace, whose owner owns it), and the
    /// host's `config`, `hooks/`, `info/` (those that exist) and object store are bound
    /// read-only over its placeholders — so the sandbox's git reads the user's configuration and
    /// objects, and writes only the private directory.
    fn private(&mut self, private: &PrivateGitDir) -> Result<GitLayout, SandboxError> {
        let mount = |path: &Path, idmap, fds: &mut Vec<OwnedFd>| {
            utf8(path)?;
            host_source(self.identity, path, idmap, fds).map_err(|source| {
                SandboxError::ReadOnlyPath {
                    path: path.to_path_buf(),
                    source,
                }
            })
        };
        let source = mount(&private.dir, self.idmap, self.fds)?;
        let mut covers = Vec::new();
        let host = &private.git_dir;
        for (name, target) in [
            ("config", host.join("config")),
            ("hooks", host.join("hooks")),
            ("info", host.join("info")),
            ("objects", private.objects_at.clone()),
        ] {
            let path = host.join(name);
            let kind = match fs::symlink_metadata(&path) {
                Ok(meta) if meta.is_dir() => Kind::Dir,
                Ok(meta) if meta.is_file() => Kind::File,
                // A link the mount would follow: refused like a linked protected entry.
                Ok(_) => {
                    return Err(SandboxError::GitMutations {
                        path,
                        problem: "is a symbolic link or special file",
                    });
                }
                Err(_) => continue,
            };
            covers.push(Mounted {
                path: target,
                source: mount(&path, self.idmap, self.fds)?,
                kind,
            });
        }
        self.mounted.insert(host.clone());
        Ok(GitLayout {
            dot_git_file: None,
            dirs: vec![Mounted {
                path: host.clone(),
                source,
                kind: Kind::Dir,
            }],
            protected: Vec::new(),
            covers,
        })
    }
}

/// A protected git entry under `allow_git_mutations`: it must exist and be a real file or
/// directory. An absent one cannot be kept from being created (a mount needs something to cover,
/// and cordon does not write into the host's git directory), and a symlink would be followed by
/// the mount.
fn protected_entry(path: &Path) -> Result<(PathBuf, Kind), SandboxError> {
    let refuse = |problem| SandboxError::GitMutations {
        path: path.to_path_buf(),
        problem,
    };
    match fs::symlink_metadata(path) {
        Err(_) => Err(refuse("does not exist")),
        Ok(meta) if meta.is_dir() => Ok((path.to_path_buf(), Kind::Dir)),
        Ok(meta) if meta.is_file() => Ok((path.to_path_buf(), Kind::File)),
        Ok(_) => Err(refuse("is a symbolic link or special file")),
    }
}

fn push(fds: &mut Vec<OwnedFd>, fd: OwnedFd, check: Check) -> Source {
    fds.push(fd);
    Source::Descriptor {
        index: fds.len() - 1,
        check,
    }
}

/// A descriptor source for a host path: a detached recursive copy of its mount as root (only
/// the top mount, idmapped, when `idmap` is given), an `O_PATH` descriptor to verify against
/// unprivileged.
fn host_source(
    identity: &Identity,
    path: &Path,
    idmap: Option<libc::c_int>,
    fds: &mut Vec<OwnedFd>,
) -> std::io::Result<Source> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)?;
    let fd = OwnedFd::from(file);
    Ok(match identity.privilege {
        Privilege::Root => {
            // Idmapping every submount could fail on a filesystem without idmap support; an
            // idmapped copy takes only the top mount.
            let depth = if idmap.is_some() {
                Depth::Top
            } else {
                Depth::Recursive
            };
            let tree = sys::mount::clone_tree(fd.as_fd(), depth)?;
            let set = sys::mount::NO_SUID | sys::mount::NO_DEV;
            let attrs = Attributes {
                set,
                clear: 0,
                userns: idmap,
            };
            sys::mount::set_attributes(tree.as_fd(), depth, attrs)?;
            push(fds, tree, Check::Detached)
        }
        Privilege::Unprivileged => push(fds, fd, Check::SameObjectAs(path.to_path_buf())),
    })
}

/// The image root's descriptor source: as root, a detached copy of its mount, read-only and
/// idmapped (the importing user's files shown as the sandbox user's, so a writable layer can copy
/// them up); unprivileged, the `O_PATH` descriptor init checks its own lookup against (the sandbox
/// user is the importing user already).
fn image_source(
    identity: &Identity,
    image: &ImageRoot,
    fds: &mut Vec<OwnedFd>,
) -> Result<Source, SandboxError> {
    let error = |source| SandboxError::Image {
        path: image.path().to_path_buf(),
        source,
    };
    let fd = image.fd().try_clone().map_err(error)?;
    match identity.privilege {
        Privilege::Root => {
            let meta = fs::File::from(fd).metadata().map_err(error)?;
            let idmap = match identity.workspace_idmap(meta.uid(), meta.gid()) {
                Some(maps) => Some(idmap_namespace(&maps.uid_map, &maps.gid_map, None)?),
                None => None,
            };
            let tree = sys::mount::clone_tree(image.fd().as_fd(), Depth::Top).map_err(error)?;
            let attrs = Attributes {
                set: sys::mount::NO_SUID | sys::mount::NO_DEV | sys::mount::READ_ONLY,
                clear: 0,
                userns: idmap,
            };
            sys::mount::set_attributes(tree.as_fd(), Depth::Top, attrs).map_err(error)?;
            Ok(push(fds, tree, Check::Detached))
        }
        Privilege::Unprivileged => Ok(push(
            fds,
            fd,
            Check::SameObjectAs(image.path().to_path_buf()),
        )),
    }
}

/// Refuses an image directory that is `/` or one of the host's system directories, or holds what
/// every sandbox hides — the home directory, the state directory, the operator policy, the cordon
/// binary: an image is shown whole, as the root, and (as root) as the sandbox user's, so such a
/// directory would hand the sandbox the host's own files.
fn refuse_image_holding_hidden(
    image: &ImageRoot,
    config: &SessionConfig,
    identity: &Identity,
) -> Result<(), SandboxError> {
    let root = image.path();
    if root == Path::new("/") || mounts::SYSTEM_DIRS.iter().any(|dir| root == Path::new(dir)) {
        return Err(SandboxError::ImageIsSystem {
            path: root.to_path_buf(),
        });
    }
    let hidden = config
        .mask
        .iter()
        .map(PathBuf::as_path)
        .chain([identity.home.as_path(), config.init.path()])
        .find(|hidden| hidden.starts_with(root));
    match hidden {
        Some(hidden) => Err(SandboxError::ImageHoldsHidden {
            path: root.to_path_buf(),
            hidden: hidden.to_path_buf(),
        }),
        None => Ok(()),
    }
}

/// The most top-level entries of an image read for a writable layer's Landlock rules.
const MAX_IMAGE_TOP: usize = 4096;

/// The image's top-level directories (not links) as sandbox paths, but for those the sandbox
/// mounts its own over (`/proc`, `/dev`, `/tmp`) or never shows (`/sys`, the scratch name).
fn image_top_dirs(root: &Path) -> Result<Vec<PathBuf>, SandboxError> {
    let error = |source| SandboxError::Image {
        path: root.to_path_buf(),
        source,
    };
    let mut dirs = Vec::new();
    for (count, entry) in fs::read_dir(root).map_err(error)?.enumerate() {
        if count == MAX_IMAGE_TOP {
            return Err(error(std::io::Error::other(format!(
                "the image's root has more than {MAX_IMAGE_TOP} entries"
            ))));
        }
        let entry = entry.map_err(error)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let is_dir = entry.file_type().map_err(error)?.is_dir();
        if is_dir && !["proc", "dev", "sys", "tmp", ".cordon"].contains(&name) {
            dirs.push(Path::new("/").join(name));
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// A path in the workspace to mask (`hide`, root `.env*`): its kind if it exists, `None` if not
/// (nothing to hide). A symlink on the way is refused: the mask would cover what the link names
/// now, and the sandbox can repoint the link (it is not a mount point) so that the next session
/// masks something else and shows what this one hid.
fn hidden(path: &Path) -> Result<Option<(PathBuf, Kind)>, SandboxError> {
    if fs::symlink_metadata(path).is_err() {
        return Ok(None);
    }
    let lexical: PathBuf = path.components().collect();
    match existing(path) {
        Some((canonical, kind)) if canonical == lexical => Ok(Some((canonical, kind))),
        // A dangling link hides nothing now, but it is still a link the sandbox could repoint.
        _ => Err(SandboxError::HiddenSymlink {
            path: path.to_path_buf(),
        }),
    }
}

/// A workspace-relative path to keep read-only: its host path and kind if it exists, `None` if not
/// (a tooling file absent at run start has nothing to protect). The same policy as [`hidden`]: a
/// symlink on the way is refused, since the mount would protect what the link names now and the
/// sandbox could repoint it. A path that is absolute or climbs with `..` is refused: the mount must
/// land inside the workspace.
fn protected(workspace: &Path, relative: &Path) -> Result<Option<(PathBuf, Kind)>, SandboxError> {
    let refuse = |problem| SandboxError::ProtectedPath {
        path: relative.to_path_buf(),
        problem,
    };
    let plain = relative
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !plain || relative.as_os_str().is_empty() {
        return Err(refuse("is not a relative path inside the workspace"));
    }
    let path = workspace.join(relative);
    if fs::symlink_metadata(&path).is_err() {
        return Ok(None);
    }
    let lexical: PathBuf = path.components().collect();
    match existing(&path) {
        Some((canonical, kind)) if canonical == lexical && canonical != workspace => {
            Ok(Some((canonical, kind)))
        }
        Some((canonical, _)) if canonical == workspace => Err(refuse("is the workspace itself")),
        _ => Err(refuse(
            "is (or passes through) a symbolic link, which the sandbox could repoint",
        )),
    }
}

/// The canonical path and kind of `path` if it exists (a symlink is followed, so the object it
/// names is what gets masked).
fn existing(path: &Path) -> Option<(PathBuf, Kind)> {
    let canonical = path.canonicalize().ok()?;
    let kind = if canonical.is_dir() {
        Kind::Dir
    } else {
        Kind::File
    };
    Some((canonical, kind))
}

fn utf8(path: &Path) -> Result<(), SandboxError> {
    match path.to_str() {
        Some(_) => Ok(()),
        None => Err(SandboxError::NotUtf8 {
            path: path.to_path_buf(),
        }),
    }
}

/// The idmapping user namespaces made so far, by maps.
static CACHE: Mutex<Vec<(String, OwnedFd)>> = Mutex::new(Vec::new());

/// Whether no idmapping namespace was made yet in this process: the first session (every one of
/// a one-shot `cordon exec`) will need a new one, so it is worth starting early.
pub(crate) fn no_idmap_cached() -> bool {
    CACHE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .is_empty()
}

/// A user namespace mapping the workspace owner to the sandbox ids, for the idmapped workspace
/// mount. Made once per (maps) and kept for the life of the process.
fn idmap_namespace(
    uid_map: &str,
    gid_map: &str,
    early: Option<PendingUserNamespace>,
) -> Result<libc::c_int, SandboxError> {
    let key = format!("{uid_map}|{gid_map}");
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, fd)) = cache.iter().find(|(k, _)| *k == key) {
        return Ok(fd.as_raw_fd());
    }
    let pending = match early {
        Some(pending) => pending,
        None => sys::spawn::start_user_namespace()
            .map_err(SandboxError::start("create the idmapping user namespace"))?,
    };
    let fd = pending
        .map(uid_map, gid_map)
        .map_err(SandboxError::start("create the idmapping user namespace"))?;
    let raw = fd.as_raw_fd();
    cache.push((key, fd));
    Ok(raw)
}
