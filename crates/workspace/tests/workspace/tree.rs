//! Sizing and emptying a tree a sandbox wrote (a cache): judged on the host, a canary outside it
//! is never followed into, sized or deleted, and the bounds stop the walk with their error.

use std::fs::{self, File};
use std::os::fd::AsFd;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use cordon_workspace::tree::{self, TreeError, TreeLimits};

use super::{CANARY, Setup, bounded};

fn open(path: &Path) -> File {
    File::open(path).unwrap()
}

fn files_in(dir: &Path) -> usize {
    fs::read_dir(dir).unwrap().count()
}

#[test]
fn usage_counts_allocated_bytes_once_per_inode_and_never_follows_a_link() {
    let setup = Setup::new();
    let cache = setup.ws("cache");
    fs::create_dir_all(cache.join("a/b")).unwrap();
    fs::write(cache.join("a/b/data"), vec![7u8; 64 << 10]).unwrap();
    fs::hard_link(cache.join("a/b/data"), cache.join("a/again")).unwrap();
    // A 1 TiB sparse file occupies nothing.
    File::create(cache.join("sparse"))
        .unwrap()
        .set_len(1 << 40)
        .unwrap();
    symlink(&setup.host, cache.join("home")).unwrap();
    let usage = tree::usage(open(&cache).as_fd(), &TreeLimits::default()).unwrap();
    assert_eq!(usage.entries, 6, "a, a/b, a/b/data, a/again, sparse, home");
    // The data once (64 KiB), the directories' blocks, nothing of the sparse file's length and
    // nothing behind the link.
    assert!(usage.bytes >= 64 << 10, "{usage:?}");
    assert!(usage.bytes < 128 << 10, "{usage:?}");
}

#[test]
fn usage_stops_at_its_entry_and_depth_limits() {
    let setup = Setup::new();
    let cache = setup.ws("cache");
    fs::create_dir_all(cache.join("1/2/3/4")).unwrap();
    for n in 0..10 {
        fs::write(cache.join(format!("f{n}")), "x").unwrap();
    }
    let limits = TreeLimits {
        entries: 5,
        depth: 64,
    };
    assert_eq!(
        tree::usage(open(&cache).as_fd(), &limits),
        Err(TreeError::TooManyEntries { limit: 5 })
    );
    let limits = TreeLimits {
        entries: 100,
        depth: 2,
    };
    assert_eq!(
        tree::usage(open(&cache).as_fd(), &limits),
        Err(TreeError::TooDeep { limit: 2 })
    );
    // The control: within both limits it is sized.
    let limits = TreeLimits {
        entries: 100,
        depth: 4,
    };
    assert_eq!(
        tree::usage(open(&cache).as_fd(), &limits).unwrap().entries,
        14
    );
}

#[test]
fn emptying_removes_links_but_never_what_they_point_to() {
    let setup = Setup::new();
    let cache = setup.ws("cache");
    fs::create_dir_all(cache.join("sub")).unwrap();
    symlink(&setup.host, cache.join("home")).unwrap();
    symlink(&setup.host, cache.join("sub/home")).unwrap();
    symlink(setup.canary(), cache.join("key")).unwrap();
    fs::write(cache.join("sub/file"), "x").unwrap();
    let removed = tree::empty(open(&cache).as_fd()).unwrap();
    assert_eq!(removed, 5);
    assert_eq!(files_in(&cache), 0);
    assert!(cache.is_dir(), "the top itself stays");
    assert_eq!(fs::read_to_string(setup.canary()).unwrap(), CANARY);
    assert_eq!(files_in(&setup.host), 1);
}

#[test]
fn emptying_gets_through_read_only_and_unreadable_directories() {
    let setup = Setup::new();
    let cache = setup.ws("cache");
    for (dir, mode) in [("ro", 0o500), ("none", 0o000), ("wx", 0o300)] {
        fs::create_dir_all(cache.join(dir).join("inner")).unwrap();
        fs::write(cache.join(dir).join("inner/file"), "x").unwrap();
        fs::set_permissions(
            cache.join(dir).join("inner"),
            fs::Permissions::from_mode(mode),
        )
        .unwrap();
        fs::set_permissions(cache.join(dir), fs::Permissions::from_mode(mode)).unwrap();
    }
    tree::empty(open(&cache).as_fd()).unwrap();
    assert_eq!(files_in(&cache), 0);
}

#[test]
fn emptying_a_fifo_and_a_socket_removes_them_without_blocking() {
    let setup = Setup::new();
    let cache = setup.ws("cache");
    fs::create_dir(&cache).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        cache.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::RWXU,
        0,
    )
    .unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(cache.join("socket")).unwrap();
    let top = cache.clone();
    bounded(move || tree::empty(open(&top).as_fd()).unwrap());
    assert_eq!(files_in(&cache), 0);
}

#[test]
fn emptying_a_chain_deeper_than_its_open_directories_still_removes_all_of_it() {
    let setup = Setup::new();
    let cache = setup.ws("cache");
    // 300 levels, well past the 32 directories held open at once.
    let mut deepest = cache.clone();
    for _ in 0..300 {
        deepest.push("d");
    }
    fs::create_dir_all(&deepest).unwrap();
    fs::write(deepest.join("file"), "x").unwrap();
    symlink(&setup.host, deepest.join("home")).unwrap();
    let removed = tree::empty(open(&cache).as_fd()).unwrap();
    assert_eq!(removed, 302);
    assert_eq!(files_in(&cache), 0);
    assert_eq!(fs::read_to_string(setup.canary()).unwrap(), CANARY);
}

#[test]
fn emptying_a_wide_tree_is_linear_and_a_planted_deep_name_cannot_stop_it() {
    let setup = Setup::new();
    let cache = setup.ws("cache");
    fs::create_dir(&cache).unwrap();
    // 20,000 directories: each is listed once (a re-listing per directory took minutes).
    for n in 0..20_000 {
        fs::create_dir(cache.join(format!("d{n}"))).unwrap();
    }
    // A file where a deep chain would be moved to, and a chain deeper than the open directories.
    fs::write(cache.join(".cordon-deep-1"), "planted").unwrap();
    let mut deep = cache.join("chain");
    for _ in 0..40 {
        deep.push("d");
    }
    fs::create_dir_all(&deep).unwrap();
    let top = cache.clone();
    let removed = bounded(move || tree::empty(open(&top).as_fd()).unwrap());
    assert_eq!(removed, 20_000 + 1 + 41);
    assert_eq!(files_in(&cache), 0);
}
