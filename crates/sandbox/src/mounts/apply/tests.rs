//! Mount points and symlinks are created first and looked at only when that fails: what that
//! must still accept (anything already there, never followed) and refuse (a parent that cannot be
//! made), on a plain temporary directory.

use std::fs;
use std::os::unix::fs::symlink;

use super::*;

#[test]
fn a_mount_point_is_created_with_its_missing_parents() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let target = dir.path().join("a/b/mnt");
    mount_point(&target, Kind::Dir, Links::Own).expect("a directory mount point");
    assert!(target.is_dir());
    let file = dir.path().join("c/d/file");
    mount_point(&file, Kind::File, Links::Own).expect("a file mount point");
    let meta = fs::symlink_metadata(&file).expect("the file exists");
    assert!(meta.file_type().is_file(), "{meta:?}");
}

#[test]
fn anything_already_at_a_mount_point_is_left_as_it_is_and_a_symlink_is_not_followed() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let existing = dir.path().join("existing");
    fs::create_dir(&existing).expect("a directory");
    mount_point(&existing, Kind::File, Links::Own).expect("an existing directory is accepted");
    assert!(existing.is_dir());
    let link = dir.path().join("link");
    let pointed = dir.path().join("pointed/inside");
    symlink(&pointed, &link).expect("a dangling symlink");
    mount_point(&link, Kind::Dir, Links::Own).expect("an existing symlink is accepted");
    assert!(
        !pointed.exists(),
        "the symlink's target was created: it was followed"
    );
    assert!(fs::symlink_metadata(&link).expect("the link").is_symlink());
}

#[test]
fn a_parent_that_cannot_be_created_fails_with_its_own_path() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // A dangling symlink where a parent directory should be: creating the parent fails.
    let parent = dir.path().join("dangling");
    symlink(dir.path().join("nowhere"), &parent).expect("a dangling symlink");
    let target = parent.join("sub/mnt");
    let err = mount_point(&target, Kind::Dir, Links::Own)
        .expect_err("no mount point behind a dangling link");
    assert_eq!(err.action, "create");
    assert!(err.path.starts_with(&parent), "{err}");
    assert!(!dir.path().join("nowhere").exists());
    // The control: the same path under a real directory is created.
    let real = dir.path().join("real/sub/mnt");
    mount_point(&real, Kind::Dir, Links::Own).expect("a mount point under a real directory");
}

#[test]
fn a_symlink_step_creates_its_missing_parents_and_never_replaces_an_entry() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let link = dir.path().join("x/y/link");
    let step = Step::Symlink {
        path: link.clone(),
        points_to: PathBuf::from("/proc/self/fd"),
    };
    apply_step(&step, &[], Links::Own).expect("the symlink and its parents");
    assert_eq!(
        fs::read_link(&link).expect("a link"),
        Path::new("/proc/self/fd")
    );
    let err = apply_step(&step, &[], Links::Own).expect_err("an existing entry is never replaced");
    assert_eq!(err.action, "create the symlink");
}

#[test]
fn on_an_image_a_mount_point_through_a_link_or_a_file_is_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let outside = dir.path().join("outside");
    fs::create_dir(&outside).expect("a directory");
    let link = dir.path().join("link");
    symlink(&outside, &link).expect("a symlink");
    let err = mount_point(&link.join("mnt"), Kind::Dir, Links::Refuse)
        .expect_err("no mount point through a link");
    assert_eq!(err.path, link);
    assert!(
        !outside.join("mnt").exists(),
        "nothing was made through the link"
    );
    let file = dir.path().join("file");
    fs::write(&file, b"").expect("a file");
    let err = mount_point(&file.join("mnt"), Kind::Dir, Links::Refuse)
        .expect_err("no mount point below a file");
    assert_eq!(err.path, file);
    let err = mount_point(&link, Kind::Dir, Links::Refuse).expect_err("not on a link itself");
    assert_eq!(err.path, link);
    // The control: below a real directory the mount point is made.
    let real = dir.path().join("real/sub/mnt");
    mount_point(&real, Kind::Dir, Links::Refuse).expect("a mount point under real directories");
    assert!(real.is_dir());
}
