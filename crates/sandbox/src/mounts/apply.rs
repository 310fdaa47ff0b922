//! Applying a [`MountPlan`] inside the session's mount namespace (run by init, which holds every
//! capability of the session's user namespace and none outside it).

use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{Access, Check, Kind, MountPlan, Root, Source, Step};
use crate::sys::mount::{self as sys, Attributes, Depth};

/// Where the host's root is reachable while the new root is built: inside the scratch space, so
/// that one detach at the end removes both (see `SCRATCH`).
const OLD_ROOT: &str = "/.cordon/oldroot";
/// Scratch space in the new root for files and mounts that are bound elsewhere: a tmpfs of its own
/// holding the old root, the mask source and the shared tmpfs. Detaching it takes all of them
/// away in one `umount2`; each detach waits for an expedited RCU grace period (~80–110 µs on the
/// benchmark VM), and three of them were a tenth of `cordon exec`'s start-up.
const SCRATCH: &str = "/.cordon";
/// An empty read-only tmpfs in the scratch space, the source of every directory mask.
const EMPTY_DIR: &str = "/.cordon/empty";

/// A step of the plan failed; the session must not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} `{path}` while building the sandbox root")]
pub struct MountError {
    pub action: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

fn fail(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> MountError {
    let path = path.to_path_buf();
    move |source| MountError {
        action,
        path,
        source,
    }
}

/// Builds the new root from `plan` and pivots into it. `fds` are the descriptors that
/// [`Source::Descriptor`] steps index.
pub(crate) fn apply(plan: &MountPlan, fds: &[OwnedFd]) -> Result<(), MountError> {
    use libc::{MS_NODEV, MS_NOSUID, MS_PRIVATE, MS_REC};
    let root = Path::new("/");
    // No mount event of ours may reach the host, and none of the host's may reach us.
    sys::mount(None, root, None, MS_REC | MS_PRIVATE, None).map_err(fail("make private", root))?;
    // The new root: a tmpfs that will only hold mount points, or an image's overlay. Made over
    // the host's /tmp in our own namespace (the host never sees it), then pivoted into, which
    // puts the whole host tree at /oldroot for the binds below.
    let staging = Path::new("/tmp");
    let image = match &plan.root {
        Root::Tmpfs => {
            sys::mount(
                Some("tmpfs"),
                staging,
                Some("tmpfs"),
                MS_NOSUID | MS_NODEV,
                Some("mode=0755,size=4m"),
            )
            .map_err(fail("mount the root tmpfs at", staging))?;
            std::env::set_current_dir(staging).map_err(fail("enter", staging))?;
            None
        }
        Root::Image {
            source,
            writable,
            size,
        } => {
            let overlay = image_root(staging, source, *size, fds)?;
            std::env::set_current_dir(&overlay).map_err(fail("enter", &overlay))?;
            Some(*writable)
        }
    };
    let links = if image.is_some() {
        Links::Refuse
    } else {
        Links::Own
    };
    let scratch = Path::new(SCRATCH);
    let scratch_here = Path::new(".cordon");
    match fs::create_dir(scratch_here) {
        Ok(()) => {}
        // An image directory given by path may hold one (an imported image never does): the
        // scratch tmpfs covers it.
        Err(err) if image.is_some() && err.kind() == io::ErrorKind::AlreadyExists => {
            // Looked at relative to the image root (the current directory): the absolute path
            // would still name the host's. A link there would carry the scratch space, and the
            // old root in it, wherever it points.
            let meta = fs::symlink_metadata(scratch_here).map_err(fail("inspect", scratch))?;
            if meta.file_type().is_symlink() || !meta.is_dir() {
                return Err(MountError {
                    action: "mount through the image's symbolic link or file at",
                    path: scratch.to_path_buf(),
                    source: io::Error::from_raw_os_error(libc::ELOOP),
                });
            }
        }
        Err(err) => return Err(fail("create", scratch)(err)),
    }
    sys::mount(
        Some("tmpfs"),
        scratch_here,
        Some("tmpfs"),
        MS_NOSUID | MS_NODEV,
        Some("mode=0700,size=1m"),
    )
    .map_err(fail("mount the scratch tmpfs at", scratch))?;
    let old_here = Path::new(".cordon/oldroot");
    fs::create_dir(old_here).map_err(fail("create", Path::new(OLD_ROOT)))?;
    sys::pivot_root(Path::new("."), old_here).map_err(fail("pivot into", staging))?;
    std::env::set_current_dir(root).map_err(fail("enter", root))?;
    if image.is_some() {
        // The image's staging tmpfs still covers the host's /tmp under the old root (a tmpfs
        // root moves away with the pivot; an overlay root leaves its layers' tmpfs behind).
        // The overlay keeps its own references to its layers.
        let covered = Path::new(OLD_ROOT).join("tmp");
        sys::unmount_detach(&covered).map_err(fail("detach", &covered))?;
    }
    // The source of every directory mask: an empty, read-only tmpfs nobody can enter.
    let empty = Path::new(EMPTY_DIR);
    mkdir(empty, 0o000)?;
    sys::mount(
        Some("tmpfs"),
        empty,
        Some("tmpfs"),
        libc::MS_RDONLY | MS_NOSUID | MS_NODEV | libc::MS_NOEXEC,
        Some("mode=000,size=4k"),
    )
    .map_err(fail("mount a tmpfs at", empty))?;

    for step in &plan.steps {
        apply_step(step, fds, links)?;
    }

    // procfs was mounted above, while a full procfs (the host's, under the old root) was still
    // visible: the kernel refuses a new procfs otherwise. Now the host tree goes away for good,
    // with everything else in the scratch space (the bind mounts made from it stay; an image's
    // overlay keeps its own references to its layers).
    sys::unmount_detach(scratch).map_err(fail("detach", scratch))?;
    match fs::remove_dir(scratch) {
        Ok(()) => {}
        // The image's own `/.cordon` (given by path) stays, empty or not.
        Err(_) if image.is_some() => {}
        Err(err) => return Err(fail("remove", scratch)(err)),
    }
    let mut flags = libc::MS_REMOUNT | libc::MS_BIND | MS_NOSUID | MS_NODEV;
    if image != Some(true) {
        flags |= libc::MS_RDONLY;
    }
    sys::mount(None, root, None, flags, None).map_err(fail("make read-only", root))?;
    Ok(())
}

/// Whether the root may hold links that are not cordon's own on the way to a mount point.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Links {
    /// The tmpfs root: every link in it is one the plan made (`/bin -> usr/bin`).
    Own,
    /// An image root: the image's links are the image author's, so no mount point may be
    /// reached through one (a link could lead into the host tree still at the old root).
    Refuse,
}

/// Makes the image root at `staging/root`: a tmpfs of `size` bytes at `staging` holding the
/// overlay's upper and work directories and the image, bound read-only at `staging/lower`; then
/// the overlay of them (`userxattr`: the overlay lives in the session's user namespace). Returns
/// the overlay's path.
fn image_root(
    staging: &Path,
    source: &Source,
    size: u64,
    fds: &[OwnedFd],
) -> Result<PathBuf, MountError> {
    use libc::{MS_NODEV, MS_NOSUID};
    let lower = staging.join("lower");
    // Before the pivot the host tree is `/` itself; and before the tmpfs covers the host's
    // `/tmp`, which may hold the image.
    let tree = descriptor_tree(source, fds, Path::new("/"), &lower)?;
    sys::mount(
        Some("tmpfs"),
        staging,
        Some("tmpfs"),
        MS_NOSUID | MS_NODEV,
        Some(&format!("mode=0755,size={size}")),
    )
    .map_err(fail("mount the image's upper tmpfs at", staging))?;
    for name in ["lower", "upper", "work", "root"] {
        mkdir(&staging.join(name), 0o755)?;
    }
    attach(tree, &lower, Kind::Dir, Access::ReadOnly, Links::Own)?;
    let overlay = staging.join("root");
    let options = format!(
        "lowerdir={},upperdir={},workdir={},userxattr",
        lower.display(),
        staging.join("upper").display(),
        staging.join("work").display()
    );
    sys::mount(
        Some("overlay"),
        &overlay,
        Some("overlay"),
        MS_NOSUID | MS_NODEV,
        Some(&options),
    )
    .map_err(fail(
        "mount the image (overlayfs in the session's user namespace) at",
        &overlay,
    ))?;
    Ok(overlay)
}

fn apply_step(step: &Step, fds: &[OwnedFd], links: Links) -> Result<(), MountError> {
    use libc::{MS_NODEV, MS_NOEXEC, MS_NOSUID};
    match step {
        Step::Bind {
            source,
            target,
            kind,
            access,
        } => bind(source, target, *kind, *access, fds, links),
        Step::Symlink { path, points_to } => {
            let link = || std::os::unix::fs::symlink(points_to, path);
            with_parents(path, link, links)?.map_err(fail("create the symlink", path))
        }
        Step::Tmpfs { target, mode, size } => {
            mount_point(target, Kind::Dir, links)?;
            let mut data = format!("mode={mode:o}");
            if let Some(size) = size {
                data.push_str(&format!(",size={size}"));
            }
            sys::mount(
                Some("tmpfs"),
                target,
                Some("tmpfs"),
                MS_NOSUID | MS_NODEV,
                Some(&data),
            )
            .map_err(fail("mount a tmpfs at", target))
        }
        Step::SharedTmp {
            tmp,
            shm,
            home,
            var_tmp,
            runtime,
            size,
        } => {
            // One tmpfs, directories bound out of it; the tmpfs itself is detached with the
            // scratch space: /tmp, /dev/shm, /var/tmp, the runtime directory and HOME share one
            // size cap.
            let shared = Path::new(SCRATCH).join("tmp");
            mkdir(&shared, 0o700)?;
            let data = format!("mode=0755,size={size}");
            sys::mount(
                Some("tmpfs"),
                &shared,
                Some("tmpfs"),
                MS_NOSUID | MS_NODEV,
                Some(&data),
            )
            .map_err(fail("mount a tmpfs at", &shared))?;
            let mut dirs = vec![("tmp", tmp, 0o1777), ("shm", shm, 0o1777)];
            if let Some(home) = home {
                dirs.push(("home", home, 0o700));
            }
            if let Some(var_tmp) = var_tmp {
                dirs.push(("var-tmp", var_tmp, 0o1777));
            }
            if let Some(runtime) = runtime {
                dirs.push(("runtime", runtime, 0o700));
            }
            for (name, target, mode) in dirs {
                let dir = shared.join(name);
                mkdir(&dir, mode)?;
                fs::set_permissions(&dir, fs::Permissions::from_mode(mode))
                    .map_err(fail("set the mode of", &dir))?;
                bind_path(&dir, target, Kind::Dir, Access::ReadWrite, links)?;
            }
            Ok(())
        }
        Step::Proc { target } => {
            mount_point(target, Kind::Dir, links)?;
            sys::mount(
                Some("proc"),
                target,
                Some("proc"),
                MS_NOSUID | MS_NODEV | MS_NOEXEC,
                None,
            )
            .map_err(fail("mount procfs at", target))
        }
        Step::Devpts { target } => {
            mount_point(target, Kind::Dir, links)?;
            sys::mount(
                Some("devpts"),
                target,
                Some("devpts"),
                MS_NOSUID | MS_NOEXEC,
                Some("newinstance,ptmxmode=0666,mode=0620"),
            )
            .map_err(fail("mount devpts at", target))
        }
        Step::Generated { target, contents } => {
            let file = Path::new(SCRATCH).join(target.file_name().unwrap_or_default());
            // A new file only (`O_CREAT | O_EXCL`, which never follows a symlink): the scratch
            // tmpfs is fresh, so anything already there is not ours to write through.
            let mut out = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&file)
                .map_err(fail("create", &file))?;
            std::io::Write::write_all(&mut out, contents.as_bytes())
                .map_err(fail("write", &file))?;
            drop(out);
            fs::set_permissions(&file, fs::Permissions::from_mode(0o644))
                .map_err(fail("set the mode of", &file))?;
            bind_path(&file, target, Kind::File, Access::ReadOnly, links)
        }
        Step::Mask { target, kind } => {
            // The target is resolved without following symlinks: masks lie in the workspace,
            // which the sandbox wrote, and a planted link must not move the mask elsewhere. A
            // target that vanished since the host looked fails the session rather than leave
            // something unmasked (and nothing is created on the host to mount on).
            let at = sys::open_no_symlinks(target).map_err(fail("open the mask target", target))?;
            let source = match kind {
                Kind::Dir => Path::new(EMPTY_DIR),
                Kind::File | Kind::Device => Path::new("/dev/null"),
            };
            let tree = sys::clone_tree_at_path(source, Depth::Top)
                .map_err(fail("clone the mount of", source))?;
            sys::attach_at(tree.as_fd(), at.as_fd()).map_err(fail("mask", target))?;
            set_flags(&tree, target, Kind::File, Access::ReadOnly)
        }
    }
}

fn bind(
    source: &Source,
    target: &Path,
    kind: Kind,
    access: Access,
    fds: &[OwnedFd],
    links: Links,
) -> Result<(), MountError> {
    match source {
        Source::Host(path) => {
            let host = Path::new(OLD_ROOT).join(path.strip_prefix("/").unwrap_or(path));
            bind_path(&host, target, kind, access, links)
        }
        Source::Itself => {
            // A path inside the workspace (or a git directory): resolved with no symlink
            // followed, so nothing the sandbox planted can make the bind pick up the host tree
            // still reachable at /oldroot; and bound onto the very object opened, so the target
            // is not looked up a second time. Never created: it existed when the host looked.
            let at = sys::open_no_symlinks(target).map_err(fail("open", target))?;
            let tree = sys::clone_tree(at.as_fd(), Depth::Recursive)
                .map_err(fail("clone the mount of", target))?;
            sys::attach_at(tree.as_fd(), at.as_fd()).map_err(fail("mount at", target))?;
            set_flags(&tree, target, kind, access)
        }
        Source::Descriptor { .. } => {
            let tree = descriptor_tree(source, fds, Path::new(OLD_ROOT), target)?;
            attach(tree, target, kind, access, links)
        }
    }
}

/// The mount a [`Source::Descriptor`] names, ready to attach: the host's detached copy as it is,
/// or (unprivileged) a copy of what init finds at the path in the host tree under `host_root`,
/// once it is verified to be the very object the descriptor names.
fn descriptor_tree(
    source: &Source,
    fds: &[OwnedFd],
    host_root: &Path,
    target: &Path,
) -> Result<OwnedFd, MountError> {
    let Source::Descriptor { index, check } = source else {
        return Err(MountError {
            action: "find the descriptor for",
            path: target.to_path_buf(),
            source: io::Error::from_raw_os_error(libc::EINVAL),
        });
    };
    let fd = fds.get(*index).ok_or_else(|| MountError {
        action: "find the descriptor for",
        path: target.to_path_buf(),
        source: io::Error::from_raw_os_error(libc::EBADF),
    })?;
    match check {
        Check::Detached => fd.try_clone().map_err(fail("use the mount for", target)),
        Check::SameObjectAs(path) => {
            let host = host_root.join(path.strip_prefix("/").unwrap_or(path));
            let opened = open_path(&host)?;
            let want = sys::identity(fd.as_fd()).map_err(fail("inspect", path))?;
            let got = sys::identity(opened.as_fd()).map_err(fail("inspect", path))?;
            if want != got {
                // The path now names something else than when the session was configured (a
                // symlink or rename swap): refuse rather than guess.
                return Err(MountError {
                    action: "verify",
                    path: path.clone(),
                    source: io::Error::from_raw_os_error(libc::ESTALE),
                });
            }
            // The very descriptor just verified, not a second lookup that could race.
            sys::clone_tree(opened.as_fd(), Depth::Recursive)
                .map_err(fail("clone the mount of", path))
        }
    }
}

fn bind_path(
    source: &Path,
    target: &Path,
    kind: Kind,
    access: Access,
    links: Links,
) -> Result<(), MountError> {
    let tree = sys::clone_tree_at_path(source, Depth::Recursive)
        .map_err(fail("clone the mount of", source))?;
    attach(tree, target, kind, access, links)
}

fn attach(
    tree: OwnedFd,
    target: &Path,
    kind: Kind,
    access: Access,
    links: Links,
) -> Result<(), MountError> {
    mount_point(target, kind, links)?;
    sys::attach(tree.as_fd(), target).map_err(fail("mount at", target))?;
    set_flags(&tree, target, kind, access)
}

/// Sets `nosuid`, `nodev` unless `kind` is a device, and read-only for [`Access::ReadOnly`] on
/// the attached `tree` and every mount below it. Flags are only ever added: a copy of a
/// read-only mount stays read-only.
fn set_flags(tree: &OwnedFd, target: &Path, kind: Kind, access: Access) -> Result<(), MountError> {
    let mut set = sys::NO_SUID;
    if kind != Kind::Device {
        set |= sys::NO_DEV;
    }
    if access == Access::ReadOnly {
        set |= sys::READ_ONLY;
    }
    sys::set_attributes(
        tree.as_fd(),
        Depth::Recursive,
        Attributes {
            set,
            ..Attributes::default()
        },
    )
    .map_err(fail("set the mount flags of", target))
}

fn open_path(path: &Path) -> Result<OwnedFd, MountError> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)
        .map_err(fail("open", path))?;
    Ok(OwnedFd::from(file))
}

/// Makes sure `path` exists as something a `kind` can be mounted on, creating it (and its
/// parents) in the root when missing. Anything already there (a symlink included, which is not
/// followed) is left as it is — except on an image root ([`Links::Refuse`]), where a link or a
/// file on the way refuses the mount. Created first and looked at only when that fails: most
/// mount points are new, and every system call saved here is saved for every mount of every
/// start.
fn mount_point(path: &Path, kind: Kind, links: Links) -> Result<(), MountError> {
    check_no_links(path, links)?;
    let create = || match kind {
        Kind::Dir => fs::DirBuilder::new().mode(0o755).create(path),
        Kind::File | Kind::Device => sys::create_file(path, 0o644),
    };
    match with_parents(path, create, links)? {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        // Another error does not prove the path absent (a filesystem may report read-only or
        // permission before existence): look, as before creating first.
        Err(_) if fs::symlink_metadata(path).is_ok() => Ok(()),
        Err(err) => Err(fail("create the mount point", path)(err)),
    }
}

/// On an image root, refuses a `path` whose existing part runs through a symbolic link or a
/// file of the image, looked at from the top down, so each look resolves only directories
/// already seen not to be links. Nothing but init runs while the root is built, so what is seen
/// here is what the mount then resolves.
fn check_no_links(path: &Path, links: Links) -> Result<(), MountError> {
    if links == Links::Own {
        return Ok(());
    }
    let mut here = PathBuf::from("/");
    let mut components = path.components().peekable();
    while let Some(component) = components.next() {
        let std::path::Component::Normal(name) = component else {
            continue;
        };
        here.push(name);
        let last = components.peek().is_none();
        match fs::symlink_metadata(&here) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(err) => return Err(fail("inspect", &here)(err)),
            Ok(meta) if meta.file_type().is_symlink() || (!last && !meta.is_dir()) => {
                return Err(MountError {
                    action: "mount through the image's symbolic link or file at",
                    path: here,
                    source: io::Error::from_raw_os_error(libc::ELOOP),
                });
            }
            Ok(_) => {}
        }
    }
    Ok(())
}

/// Runs `create` for `path`, and once more after creating the missing parent directories when it
/// failed for want of them. A parent that cannot be created is the error (its own, whatever
/// `create` would have said); otherwise `create`'s result.
fn with_parents(
    path: &Path,
    create: impl Fn() -> io::Result<()>,
    links: Links,
) -> Result<io::Result<()>, MountError> {
    match create() {
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = path.parent() {
                check_no_links(parent, links)?;
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(parent)
                    .map_err(fail("create", parent))?;
            }
            Ok(create())
        }
        other => Ok(other),
    }
}

fn mkdir(path: &Path, mode: u32) -> Result<(), MountError> {
    fs::DirBuilder::new()
        .mode(mode)
        .create(path)
        .map_err(fail("create", path))
}

#[cfg(test)]
mod tests;
