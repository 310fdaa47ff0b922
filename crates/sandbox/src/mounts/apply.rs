//! Applying a [`MountPlan`] inside the session's mount namespace (run by init, which holds every
//! capability of the session's user namespace and none outside it).

use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{Access, Check, Kind, MountPlan, Source, Step};
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
    // The new root: a tmpfs that will only hold mount points. Mounted over the host's /tmp in our
    // own namespace (the host never sees it), then pivoted into, which puts the whole host tree
    // at /oldroot for the binds below.
    let staging = Path::new("/tmp");
    sys::mount(
        Some("tmpfs"),
        staging,
        Some("tmpfs"),
        MS_NOSUID | MS_NODEV,
        Some("mode=0755,size=4m"),
    )
    .map_err(fail("mount the root tmpfs at", staging))?;
    std::env::set_current_dir(staging).map_err(fail("enter", staging))?;
    let scratch = Path::new(SCRATCH);
    let scratch_here = Path::new(".cordon");
    fs::create_dir(scratch_here).map_err(fail("create", scratch))?;
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
        apply_step(step, fds)?;
    }

    // procfs was mounted above, while a full procfs (the host's, under the old root) was still
    // visible: the kernel refuses a new procfs otherwise. Now the host tree goes away for good,
    // with everything else in the scratch space (the bind mounts made from it stay).
    sys::unmount_detach(scratch).map_err(fail("detach", scratch))?;
    fs::remove_dir(scratch).map_err(fail("remove", scratch))?;
    let flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | MS_NOSUID | MS_NODEV;
    sys::mount(None, root, None, flags, None).map_err(fail("make read-only", root))?;
    Ok(())
}

fn apply_step(step: &Step, fds: &[OwnedFd]) -> Result<(), MountError> {
    use libc::{MS_NODEV, MS_NOEXEC, MS_NOSUID};
    match step {
        Step::Bind {
            source,
            target,
            kind,
            access,
        } => bind(source, target, *kind, *access, fds),
        Step::Symlink { path, points_to } => {
            let link = || std::os::unix::fs::symlink(points_to, path);
            with_parents(path, link)?.map_err(fail("create the symlink", path))
        }
        Step::Tmpfs { target, mode, size } => {
            mount_point(target, Kind::Dir)?;
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
                bind_path(&dir, target, Kind::Dir, Access::ReadWrite)?;
            }
            Ok(())
        }
        Step::Proc { target } => {
            mount_point(target, Kind::Dir)?;
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
            mount_point(target, Kind::Dir)?;
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
            bind_path(&file, target, Kind::File, Access::ReadOnly)
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
) -> Result<(), MountError> {
    match source {
        Source::Host(path) => {
            let host = Path::new(OLD_ROOT).join(path.strip_prefix("/").unwrap_or(path));
            bind_path(&host, target, kind, access)
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
        Source::Descriptor { index, check } => {
            let fd = fds.get(*index).ok_or_else(|| MountError {
                action: "find the descriptor for",
                path: target.to_path_buf(),
                source: io::Error::from_raw_os_error(libc::EBADF),
            })?;
            let tree = match check {
                Check::Detached => fd.try_clone().map_err(fail("use the mount for", target))?,
                Check::SameObjectAs(path) => {
                    let host = Path::new(OLD_ROOT).join(path.strip_prefix("/").unwrap_or(path));
                    let opened = open_path(&host)?;
                    let want = sys::identity(fd.as_fd()).map_err(fail("inspect", path))?;
                    let got = sys::identity(opened.as_fd()).map_err(fail("inspect", path))?;
                    if want != got {
                        // The path now names something else than when the session was
                        // configured (a symlink or rename swap): refuse rather than guess.
                        return Err(MountError {
                            action: "verify",
                            path: path.clone(),
                            source: io::Error::from_raw_os_error(libc::ESTALE),
                        });
                    }
                    // The very descriptor just verified, not a second lookup that could race.
                    sys::clone_tree(opened.as_fd(), Depth::Recursive)
                        .map_err(fail("clone the mount of", path))?
                }
            };
            attach(tree, target, kind, access)
        }
    }
}

fn bind_path(source: &Path, target: &Path, kind: Kind, access: Access) -> Result<(), MountError> {
    let tree = sys::clone_tree_at_path(source, Depth::Recursive)
        .map_err(fail("clone the mount of", source))?;
    attach(tree, target, kind, access)
}

fn attach(tree: OwnedFd, target: &Path, kind: Kind, access: Access) -> Result<(), MountError> {
    mount_point(target, kind)?;
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
/// parents) in the root tmpfs when missing. Anything already there (a symlink included, which is
/// not followed) is left as it is. Created first and looked at only when that fails: most mount
/// points are new, and every system call saved here is saved for every mount of every start.
fn mount_point(path: &Path, kind: Kind) -> Result<(), MountError> {
    let create = || match kind {
        Kind::Dir => fs::DirBuilder::new().mode(0o755).create(path),
        Kind::File | Kind::Device => sys::create_file(path, 0o644),
    };
    match with_parents(path, create)? {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        // Another error does not prove the path absent (a filesystem may report read-only or
        // permission before existence): look, as before creating first.
        Err(_) if fs::symlink_metadata(path).is_ok() => Ok(()),
        Err(err) => Err(fail("create the mount point", path)(err)),
    }
}

/// Runs `create` for `path`, and once more after creating the missing parent directories when it
/// failed for want of them. A parent that cannot be created is the error (its own, whatever
/// `create` would have said); otherwise `create`'s result.
fn with_parents(
    path: &Path,
    create: impl Fn() -> io::Result<()>,
) -> Result<io::Result<()>, MountError> {
    match create() {
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = path.parent() {
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
