//! The mount plan: what the session's root contains, as data. [`plan`] is a pure function from the
//! host facts ([`Layout`]) to an ordered list of [`Step`]s; only [`apply`] (run by init, inside the
//! session's namespaces) touches the kernel.
//!
//! The root is a fresh tmpfs holding only mount points, made read-only at the end. Everything in it
//! is listed here; nothing of the host appears unless a step puts it there. With an environment
//! image ([`Root::Image`]) the root is the image instead — an overlay whose lower layer is the
//! image and whose upper layer is a tmpfs the mount points are made in — and no host system
//! directory is mounted; everything else is the same plan.

mod apply;

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use apply::MountError;
pub(crate) use apply::apply;

/// The host directories a session sees, read-only, at their host paths (DESIGN §4).
pub const SYSTEM_DIRS: [&str; 9] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

/// The sandbox's own `/var/tmp` (in the shared tmpfs: programs that keep big temporaries there
/// rather than in `/tmp` find it, and it is counted in `tmp_size`).
pub const VAR_TMP: &str = "/var/tmp";

/// The upper layer of a read-only image root holds only the mount points the plan makes.
pub const IMAGE_MOUNT_POINTS_SIZE: u64 = 4 << 20;

/// The device nodes bound from the host's `/dev`.
pub const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// Whether a mount may be written through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Access {
    ReadOnly,
    ReadWrite,
}

/// What a path is, which decides how it is mounted over or masked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    Dir,
    File,
    /// A character device bound from the host's `/dev` (the only mounts without `nodev`).
    Device,
}

/// Where a bind mount comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Source {
    /// A path of the host's tree, reached through the old root while the new one is built. Used
    /// for the system directories and `/dev` nodes only: paths no user of the sandbox controls.
    Host(PathBuf),
    /// A descriptor the host opened when the session was configured, sent with the setup
    /// message (this is its index). Symlink swaps after configuration cannot redirect it.
    Descriptor { index: usize, check: Check },
    /// The target itself, already inside the new root (the git directory inside the workspace):
    /// bound onto itself so it becomes a mount point with its own flags, and inherits the
    /// workspace mount's idmapping.
    Itself,
}

/// How init turns a received descriptor into a mount.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Check {
    /// Root: the host already made a detached (possibly idmapped) copy of the mount; init attaches
    /// it as it is.
    Detached,
    /// Unprivileged: a host descriptor from another mount namespace cannot be bound directly, so
    /// init opens this path in its own copy of the host tree and refuses unless it is the very
    /// object the descriptor names (same device and inode).
    SameObjectAs(PathBuf),
}

/// One step of building the root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Step {
    /// A bind mount, always `nosuid`, and `nodev` unless `kind` is [`Kind::Device`]; recursive
    /// with the read-only flag applied to every mount below.
    Bind {
        source: Source,
        target: PathBuf,
        kind: Kind,
        access: Access,
    },
    /// A symbolic link in the root tmpfs (the host's `/bin -> usr/bin` stays a link).
    Symlink { path: PathBuf, points_to: PathBuf },
    /// A fresh tmpfs (`nosuid`, `nodev`).
    Tmpfs {
        target: PathBuf,
        mode: u32,
        size: Option<u64>,
    },
    /// One size-capped tmpfs shared by `/tmp`, `/dev/shm`, `/var/tmp`, the runtime directory
    /// `/run/user/<uid>` and `HOME` (each when it gets one), so together they stay in
    /// `tmp_size`.
    SharedTmp {
        tmp: PathBuf,
        shm: PathBuf,
        home: Option<PathBuf>,
        var_tmp: Option<PathBuf>,
        runtime: Option<PathBuf>,
        size: u64,
    },
    /// A fresh procfs of the session's PID namespace.
    Proc { target: PathBuf },
    /// A private devpts instance (its own ptys; `ptmx` in it).
    Devpts { target: PathBuf },
    /// A read-only file with generated contents (`/etc/passwd`, `/etc/group`).
    Generated { target: PathBuf, contents: String },
    /// Hides what is at `target`: an empty read-only tmpfs over a directory, `/dev/null`
    /// (read-only, `nodev`, so it cannot even be opened) over a file.
    Mask {
        /// Any bytes: a root `.env*` file a step named `.env\xff` is masked like `.env`.
        #[serde(with = "crate::wire::any_path")]
        target: PathBuf,
        kind: Kind,
    },
}

impl Step {
    /// The path the step changes; for ordering (a mount goes after every mount it lies under).
    pub fn target(&self) -> &Path {
        match self {
            Step::Bind { target, .. }
            | Step::Tmpfs { target, .. }
            | Step::Proc { target }
            | Step::Devpts { target }
            | Step::Generated { target, .. }
            | Step::Mask { target, .. } => target,
            Step::Symlink { path, .. } => path,
            Step::SharedTmp { shm, .. } => shm,
        }
    }
}

/// What the session's `/` is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Root {
    /// A fresh tmpfs holding only mount points (the host's system directories bound in).
    #[default]
    Tmpfs,
    /// An environment image (DESIGN §14): an overlay of the image directory (`source`, bound
    /// read-only, `nosuid`, `nodev`) under a tmpfs upper layer of `size` bytes, in which the
    /// mount points are made. Made read-only once the plan is applied, unless `writable`: then
    /// the upper layer is the session's throwaway writable layer.
    Image {
        source: Source,
        writable: bool,
        size: u64,
    },
}

/// The steps in the order init applies them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountPlan {
    pub root: Root,
    pub steps: Vec<Step>,
}

/// The image a session's root is, as found on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageLayout {
    pub source: Source,
    pub writable: bool,
}

/// One of the system directories as it exists on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SystemEntry {
    Dir(PathBuf),
    Symlink { path: PathBuf, points_to: PathBuf },
}

/// A path mounted from a host descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mounted {
    pub path: PathBuf,
    pub source: Source,
    pub kind: Kind,
}

/// The git layout of the workspace, as found on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitLayout {
    /// `.git` inside the workspace when it is a file naming the git directory (worktrees,
    /// submodules); it is bound read-only onto itself so it cannot be repointed.
    pub dot_git_file: Option<PathBuf>,
    /// The git directory and, when different, its common directory; each becomes a mount point.
    pub dirs: Vec<Mounted>,
    /// The existing entries that stay read-only even with `allow_git_mutations`
    /// (`config`, `config.worktree`, `commondir`, `hooks/`, `info/`, `objects/info/alternates`).
    pub protected: Vec<(PathBuf, Kind)>,
    /// Host entries bound read-only over the git directory's own (a private git directory's
    /// `config`, `hooks/`, `info/` and the host's object store).
    pub covers: Vec<Mounted>,
}

/// Whether the sandbox may change the git directory (`allow_git_mutations`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GitMutations {
    Deny,
    Allow,
}

/// The host facts the plan is built from; gathered by `facts::gather`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The host's system directories; empty with an image.
    pub system: Vec<SystemEntry>,
    /// The environment image that is the root, if any.
    pub image: Option<ImageLayout>,
    pub workspace: Mounted,
    /// The workspace is bound read-only (and `git_mutations` is `Deny`).
    pub workspace_read_only: bool,
    pub git: Option<GitLayout>,
    /// The submodules' git layouts (`.git` files and git directories), each mounted like `git`.
    /// A submodule path without a `.git` is in `protect` instead (read-only as a whole).
    pub submodules: Vec<GitLayout>,
    pub git_mutations: GitMutations,
    pub read_only: Vec<Mounted>,
    /// Persistent cache directories, mounted read-write below the shared `/tmp`.
    pub caches: Vec<Mounted>,
    /// Existing paths to mask (`hide`, root `.env*` files), already resolved on the host.
    pub hide: Vec<(PathBuf, Kind)>,
    /// Existing paths in the workspace kept read-only (a run's tooling files), already resolved
    /// on the host.
    pub protect: Vec<(PathBuf, Kind)>,
    /// Paths masked wherever they are (state dir, policy file, the cordon binary); only those
    /// visible in the sandbox need a mount.
    pub masks: Vec<(PathBuf, Kind)>,
    pub home: PathBuf,
    /// `/run/user/<uid>` of the sandbox's uid (`XDG_RUNTIME_DIR`).
    pub runtime_dir: PathBuf,
    pub passwd: String,
    pub group: String,
    pub tmp_size: u64,
}

/// Builds the mount plan for `layout`. Pure.
pub fn plan(layout: &Layout) -> MountPlan {
    let mut steps = Vec::new();
    for entry in &layout.system {
        steps.push(match entry {
            SystemEntry::Dir(path) => bind(
                Source::Host(path.clone()),
                path,
                Kind::Dir,
                Access::ReadOnly,
            ),
            SystemEntry::Symlink { path, points_to } => Step::Symlink {
                path: path.clone(),
                points_to: points_to.clone(),
            },
        });
    }
    // Generated identity files replace the host's (which list host users, irrelevant inside).
    steps.push(Step::Generated {
        target: "/etc/passwd".into(),
        contents: layout.passwd.clone(),
    });
    steps.push(Step::Generated {
        target: "/etc/group".into(),
        contents: layout.group.clone(),
    });

    steps.push(Step::Tmpfs {
        target: "/dev".into(),
        mode: 0o755,
        size: Some(1 << 20),
    });
    for name in DEVICES {
        let path = Path::new("/dev").join(name);
        steps.push(bind(
            Source::Host(path.clone()),
            &path,
            Kind::Device,
            Access::ReadWrite,
        ));
    }
    steps.push(Step::Devpts {
        target: "/dev/pts".into(),
    });
    for (link, points_to) in [
        ("/dev/ptmx", "pts/ptmx"),
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
    ] {
        steps.push(Step::Symlink {
            path: link.into(),
            points_to: points_to.into(),
        });
    }
    // HOME, /var/tmp and the runtime directory come out of the same tmpfs as /tmp (one cap for
    // all), unless one is `/` or lies in the workspace: the workspace is mounted after them and
    // would cover them (and the sandbox's writes there are the workspace's anyway).
    let own = |path: &Path| {
        (path.parent().is_some() && !path.starts_with(&layout.workspace.path))
            .then(|| path.to_path_buf())
    };
    steps.push(Step::SharedTmp {
        tmp: "/tmp".into(),
        shm: "/dev/shm".into(),
        home: own(&layout.home),
        var_tmp: own(Path::new(VAR_TMP)),
        runtime: own(&layout.runtime_dir),
        size: layout.tmp_size,
    });
    steps.push(Step::Proc {
        target: "/proc".into(),
    });

    for ro in &layout.read_only {
        steps.push(bind(ro.source.clone(), &ro.path, ro.kind, Access::ReadOnly));
    }
    steps.push(bind(
        layout.workspace.source.clone(),
        &layout.workspace.path,
        Kind::Dir,
        if layout.workspace_read_only {
            Access::ReadOnly
        } else {
            Access::ReadWrite
        },
    ));
    // Below the shared `/tmp` (deeper, so mounted after it); their parents are made in it.
    for cache in &layout.caches {
        steps.push(bind(
            cache.source.clone(),
            &cache.path,
            Kind::Dir,
            Access::ReadWrite,
        ));
    }

    // The top-level git layout and every submodule's get the same treatment: a submodule's git
    // directory reconfigures the host's git (its `core.fsmonitor` runs on `git status`) exactly
    // like the top-level one.
    for git in layout.git.iter().chain(&layout.submodules) {
        // The git directory is a mount point either way, so it can be neither renamed nor
        // replaced; read-only as a whole unless mutations are allowed, and then the entries that
        // would let a sandbox reconfigure the host's git (hooks, config, alternates) stay
        // read-only.
        let access = match layout.git_mutations {
            GitMutations::Deny => Access::ReadOnly,
            GitMutations::Allow => Access::ReadWrite,
        };
        if let Some(file) = &git.dot_git_file {
            steps.push(bind(Source::Itself, file, Kind::File, Access::ReadOnly));
        }
        for dir in &git.dirs {
            steps.push(bind(dir.source.clone(), &dir.path, Kind::Dir, access));
        }
        if layout.git_mutations == GitMutations::Allow {
            for (path, kind) in &git.protected {
                steps.push(bind(Source::Itself, path, *kind, Access::ReadOnly));
            }
        }
        for cover in &git.covers {
            steps.push(bind(
                cover.source.clone(),
                &cover.path,
                cover.kind,
                Access::ReadOnly,
            ));
        }
    }
    // Protected workspace entries: each bound read-only onto itself after the workspace mount
    // (a read-only path mounted before it would be covered by it). A mount point cannot be
    // written through, unlinked, or renamed or replaced (`EBUSY`); its directories are pinned
    // below like those above a mask.
    for (path, kind) in &layout.protect {
        steps.push(bind(Source::Itself, path, *kind, Access::ReadOnly));
    }

    let mut visible: Vec<&Path> = layout
        .system
        .iter()
        .filter_map(|e| match e {
            SystemEntry::Dir(path) => Some(path.as_path()),
            SystemEntry::Symlink { .. } => None,
        })
        .collect();
    visible.push(&layout.workspace.path);
    visible.extend(layout.read_only.iter().map(|m| m.path.as_path()));
    // Only what the sandbox can see needs masking (and only that has a mount point to mask).
    for (path, kind) in layout.hide.iter().chain(&layout.masks) {
        if visible.iter().any(|root| path.starts_with(root)) {
            steps.push(Step::Mask {
                target: path.clone(),
                kind: *kind,
            });
        }
    }

    // Masks, protected entries and git mounts are attached to paths, and a mount moves with its parent directory:
    // renaming `config/` (holding a hidden `config/secrets.yml`) or `objects/` (holding a read-only
    // `objects/info/alternates`) would carry the mount away and leave the old path free for the
    // next session to find. So every directory between the workspace (or a git directory) and
    // such a target becomes a mount point itself — bound onto itself, its flags kept — and the
    // kernel refuses to rename a mount point (`EBUSY`).
    //
    // Near-linear in the size of the targets (review 3, finding 4: a scan of every target and
    // every pinned directory for each ancestor of each target made deep gitlinks cubic): each
    // target's ancestors are walked from its parent upwards only until one already settled, and
    // every lookup is a hash. An ancestor needs pinning when it is strictly below a root — that
    // is, when its parent is a root or is itself strictly below one — and is not a target.
    let mut roots: HashSet<&Path> = HashSet::from([layout.workspace.path.as_path()]);
    for git in layout.git.iter().chain(&layout.submodules) {
        roots.extend(git.dirs.iter().map(|d| d.path.as_path()));
    }
    let targets: Vec<PathBuf> = steps.iter().map(|s| s.target().to_path_buf()).collect();
    let target_set: HashSet<&Path> = targets.iter().map(PathBuf::as_path).collect();
    // Each ancestor seen so far: whether it is a root or strictly below one.
    let mut settled: HashMap<&Path, bool> = HashMap::new();
    let mut pinned: Vec<PathBuf> = Vec::new();
    for target in &targets {
        let mut chain: Vec<&Path> = Vec::new();
        let mut above = false;
        for ancestor in target.ancestors().skip(1) {
            if let Some(known) = settled.get(ancestor) {
                above = *known;
                break;
            }
            chain.push(ancestor);
        }
        // Back down from the topmost new ancestor: each is strictly below a root when the one
        // above it is a root or below one.
        for ancestor in chain.into_iter().rev() {
            if above && !target_set.contains(ancestor) {
                pinned.push(ancestor.to_path_buf());
            }
            above = above || roots.contains(ancestor);
            settled.insert(ancestor, above);
        }
    }
    for dir in pinned {
        steps.push(bind(Source::Itself, &dir, Kind::Dir, Access::ReadWrite));
    }

    // A mount must come after every mount whose target contains it; a stable sort by depth keeps
    // the order above among equals.
    steps.sort_by_key(|step| depth(step.target()));
    let root = match &layout.image {
        None => Root::Tmpfs,
        Some(image) => Root::Image {
            source: image.source.clone(),
            writable: image.writable,
            size: if image.writable {
                layout.tmp_size
            } else {
                IMAGE_MOUNT_POINTS_SIZE
            },
        },
    };
    MountPlan { root, steps }
}

fn bind(source: Source, target: &Path, kind: Kind, access: Access) -> Step {
    Step::Bind {
        source,
        target: target.to_path_buf(),
        kind,
        access,
    }
}

fn depth(path: &Path) -> usize {
    path.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count()
}

#[cfg(test)]
mod tests;
