//! The view against the attacks a sandbox can stage in the work tree, each judged on the host: a
//! canary outside the workspace is never read, changed or deleted, no call blocks, memory stays
//! bounded. Every case runs with both resolutions (`openat2` and the component walk), and each
//! refusal has a control that shows the host itself can read the canary.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use cordon_workspace::{
    Kind, Limits, Meta, Removed, Resolve, View, ViewError, Visit, Visitor, WalkError, WsPath,
};

const CANARY: &str = "canary-7f3a: the host user's private key";

/// A workspace and, beside it, a directory standing for the rest of the host.
struct Setup {
    _dir: tempfile::TempDir,
    workspace: PathBuf,
    host: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("ws");
        let host = dir.path().join("home");
        std::fs::create_dir(&workspace).unwrap();
        std::fs::create_dir(&host).unwrap();
        std::fs::write(host.join("id_ed25519"), CANARY).unwrap();
        // The control: the host user can read the canary.
        assert_eq!(
            std::fs::read_to_string(host.join("id_ed25519")).unwrap(),
            CANARY
        );
        Setup {
            _dir: dir,
            workspace,
            host,
        }
    }

    fn canary(&self) -> PathBuf {
        self.host.join("id_ed25519")
    }

    fn views(&self) -> Vec<View> {
        [Resolve::Openat2, Resolve::Walk]
            .into_iter()
            .map(|resolve| View::open(&self.workspace).unwrap().with_resolve(resolve))
            .collect()
    }

    fn ws(&self, rel: &str) -> PathBuf {
        self.workspace.join(rel)
    }
}

fn path(text: &str) -> WsPath {
    WsPath::new(text).unwrap()
}

/// Runs `f` on a thread and fails the test if it has not returned within 20 s (the host must not
/// block on anything the sandbox left behind).
fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = send.send(f());
    });
    receive
        .recv_timeout(Duration::from_secs(20))
        .expect("the host blocked on workspace content")
}

#[test]
fn the_kernel_in_ci_has_openat2() {
    let setup = Setup::new();
    assert_eq!(
        View::open(&setup.workspace).unwrap().resolve(),
        Resolve::Openat2
    );
}

#[test]
fn a_regular_file_is_read_whole_within_the_limit() {
    let setup = Setup::new();
    std::fs::create_dir(setup.ws("out")).unwrap();
    std::fs::write(setup.ws("out/report.md"), "VERDICT: APPROVED\n").unwrap();
    for view in setup.views() {
        let read = view.read(&path("out/report.md"), 1024).unwrap().unwrap();
        assert_eq!(read.bytes, b"VERDICT: APPROVED\n");
        assert_eq!(read.omitted(), 0);
        assert!(view.read(&path("out/absent.md"), 1024).unwrap().is_none());
        assert!(
            view.read(&path("nowhere/absent.md"), 1024)
                .unwrap()
                .is_none()
        );
    }
}

#[test]
fn a_symlink_to_a_host_file_is_never_read() {
    let setup = Setup::new();
    symlink(setup.canary(), setup.ws("summary.md")).unwrap();
    // Control: following the link, as `std::fs::read` does, reads the canary.
    assert_eq!(
        std::fs::read_to_string(setup.ws("summary.md")).unwrap(),
        CANARY
    );
    for view in setup.views() {
        let err = view.read(&path("summary.md"), 1 << 20).unwrap_err();
        assert!(
            matches!(
                &err,
                ViewError::NotAFile {
                    kind: Kind::Symlink,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "`summary.md` is a symbolic link, not a regular file"
        );
        let mut seen = Vec::new();
        assert!(
            view.stream(&path("summary.md"), &mut |b| seen.extend_from_slice(b))
                .is_err()
        );
        assert!(seen.is_empty());
    }
}

#[test]
fn a_symlinked_parent_directory_is_neither_read_nor_deleted_through() {
    let setup = Setup::new();
    symlink(&setup.host, setup.ws("out")).unwrap();
    // Control: the joined path reaches the canary.
    assert!(setup.ws("out/id_ed25519").exists());
    for view in setup.views() {
        let target = path("out/id_ed25519");
        assert!(matches!(
            view.read(&target, 1 << 20),
            Err(ViewError::Blocked { .. })
        ));
        assert!(matches!(
            view.remove(&target),
            Err(ViewError::Blocked { .. })
        ));
        assert!(matches!(view.meta(&target), Err(ViewError::Blocked { .. })));
        assert!(matches!(
            view.write(&target, b"overwritten"),
            Err(ViewError::Blocked { .. })
        ));
        assert!(matches!(
            view.list(Some(&path("out")), 100),
            Err(ViewError::Blocked { .. })
        ));
    }
    assert_eq!(std::fs::read_to_string(setup.canary()).unwrap(), CANARY);
}

#[test]
fn a_link_deeper_in_the_path_blocks_as_well() {
    let setup = Setup::new();
    std::fs::create_dir_all(setup.ws("a/b")).unwrap();
    symlink(&setup.host, setup.ws("a/b/c")).unwrap();
    for view in setup.views() {
        assert!(matches!(
            view.read(&path("a/b/c/id_ed25519"), 1 << 20),
            Err(ViewError::Blocked { .. })
        ));
    }
}

#[test]
fn a_fifo_is_refused_without_blocking() {
    let setup = Setup::new();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        setup.ws("out.md").as_path(),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let workspace = setup.workspace.clone();
    let results = bounded(move || {
        [Resolve::Openat2, Resolve::Walk]
            .into_iter()
            .map(|resolve| {
                let view = View::open(&workspace).unwrap().with_resolve(resolve);
                view.read(&path("out.md"), 1 << 16).map(|_| ())
            })
            .collect::<Vec<_>>()
    });
    for result in results {
        let err = result.unwrap_err();
        assert!(
            matches!(
                err,
                ViewError::NotAFile {
                    kind: Kind::Fifo,
                    ..
                }
            ),
            "{err:?}"
        );
    }
}

#[test]
fn a_device_is_never_opened() {
    let setup = Setup::new();
    symlink("/dev/zero", setup.ws("zero.md")).unwrap();
    let made = rustix::fs::mknodat(
        rustix::fs::CWD,
        setup.ws("dev.md").as_path(),
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o600),
        rustix::fs::makedev(1, 5),
    );
    let root = rustix::process::geteuid().is_root();
    if !root {
        // A user without CAP_MKNOD cannot make a device, so neither can a sandbox.
        assert!(made.is_err());
    }
    for view in setup.views() {
        assert!(matches!(
            view.read(&path("zero.md"), 1 << 16),
            Err(ViewError::NotAFile {
                kind: Kind::Symlink,
                ..
            })
        ));
        if root {
            made.unwrap();
            assert!(matches!(
                view.read(&path("dev.md"), 1 << 16),
                Err(ViewError::NotAFile {
                    kind: Kind::CharDevice,
                    ..
                })
            ));
        }
    }
}

#[test]
fn a_sparse_file_is_read_up_to_the_limit_only() {
    let setup = Setup::new();
    let file = std::fs::File::create(setup.ws("huge.md")).unwrap();
    let claimed = 1u64 << 40;
    file.set_len(claimed).unwrap();
    for view in setup.views() {
        let read = view.read(&path("huge.md"), 64 << 10).unwrap().unwrap();
        assert_eq!(read.bytes.len(), 64 << 10);
        assert_eq!(read.size, claimed);
        assert_eq!(read.omitted(), claimed - (64 << 10));
        // The allocation follows the limit, not the size the file claims.
        assert!(read.bytes.capacity() <= 128 << 10);
    }
}

#[test]
fn a_directory_where_a_file_was_expected_is_left_alone() {
    let setup = Setup::new();
    std::fs::create_dir_all(setup.ws("summary.md/keep")).unwrap();
    for view in setup.views() {
        assert!(matches!(
            view.read(&path("summary.md"), 10),
            Err(ViewError::NotAFile {
                kind: Kind::Directory,
                ..
            })
        ));
        assert_eq!(
            view.remove(&path("summary.md")).unwrap(),
            Removed::KeptDirectory
        );
    }
    assert!(setup.ws("summary.md/keep").is_dir());
}

#[test]
fn removing_a_link_removes_the_link_and_never_its_target() {
    let setup = Setup::new();
    for view in setup.views() {
        symlink(setup.canary(), setup.ws("out.md")).unwrap();
        assert_eq!(
            view.remove(&path("out.md")).unwrap(),
            Removed::Removed(Kind::Symlink)
        );
        assert!(std::fs::symlink_metadata(setup.ws("out.md")).is_err());
        assert_eq!(std::fs::read_to_string(setup.canary()).unwrap(), CANARY);
        std::fs::write(setup.ws("out.md"), "x").unwrap();
        assert_eq!(
            view.remove(&path("out.md")).unwrap(),
            Removed::Removed(Kind::File)
        );
        assert_eq!(view.remove(&path("out.md")).unwrap(), Removed::Absent);
    }
}

#[test]
fn a_link_is_read_as_its_target_text() {
    let setup = Setup::new();
    symlink("../../etc/shadow", setup.ws("link")).unwrap();
    std::fs::write(setup.ws("file"), "x").unwrap();
    for view in setup.views() {
        assert_eq!(
            view.read_link(&path("link")).unwrap().unwrap(),
            b"../../etc/shadow"
        );
        assert!(matches!(
            view.read_link(&path("file")),
            Err(ViewError::NotAFile {
                kind: Kind::File,
                ..
            })
        ));
        assert!(view.read_link(&path("absent")).unwrap().is_none());
    }
}

#[test]
fn streaming_reads_the_whole_file_in_pieces() {
    let setup = Setup::new();
    let content: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(setup.ws("blob.bin"), &content).unwrap();
    for view in setup.views() {
        let mut seen = Vec::new();
        let mut largest = 0;
        let meta = view
            .stream(&path("blob.bin"), &mut |piece| {
                largest = largest.max(piece.len());
                seen.extend_from_slice(piece);
            })
            .unwrap()
            .unwrap();
        assert_eq!(seen, content);
        assert!(largest <= 64 << 10);
        assert_eq!(meta.size, content.len() as u64);
    }
}

#[test]
fn writing_replaces_a_regular_file_and_refuses_anything_else() {
    let setup = Setup::new();
    std::fs::write(setup.ws("PLAN.md"), "Status: open\n").unwrap();
    std::fs::set_permissions(setup.ws("PLAN.md"), std::fs::Permissions::from_mode(0o640)).unwrap();
    symlink(setup.canary(), setup.ws("linked.md")).unwrap();
    for view in setup.views() {
        view.write(&path("PLAN.md"), b"Status: COMPLETED\n")
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(setup.ws("PLAN.md")).unwrap(),
            "Status: COMPLETED\n"
        );
        let mode = std::fs::metadata(setup.ws("PLAN.md"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o640);
        view.write(&path("new.md"), b"fresh").unwrap();
        assert!(matches!(
            view.write(&path("linked.md"), b"overwritten"),
            Err(ViewError::NotAFile {
                kind: Kind::Symlink,
                ..
            })
        ));
    }
    assert_eq!(std::fs::read_to_string(setup.canary()).unwrap(), CANARY);
    // No temporary file is left behind.
    let names: Vec<String> = std::fs::read_dir(&setup.workspace)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with(".cordon-write")),
        "{names:?}"
    );
}

#[test]
fn listing_skips_dot_git_and_reports_it() {
    let setup = Setup::new();
    std::fs::create_dir(setup.ws(".git")).unwrap();
    std::fs::write(setup.ws("b"), "").unwrap();
    std::fs::write(setup.ws("a"), "").unwrap();
    symlink(setup.canary(), setup.ws("c")).unwrap();
    for view in setup.views() {
        let listing = view.list(None, 10).unwrap();
        assert!(listing.has_git);
        let names: Vec<&[u8]> = listing.entries.iter().map(|e| e.name.as_slice()).collect();
        assert_eq!(names, [&b"a"[..], b"b", b"c"]);
        assert_eq!(listing.entries[2].meta.kind, Kind::Symlink);
        let err = view.list(None, 2).unwrap_err();
        assert!(
            matches!(err, ViewError::TooManyEntries { limit: 2, .. }),
            "{err:?}"
        );
    }
}

#[derive(Default)]
struct Collect {
    entries: Vec<(String, Kind)>,
    repositories: Vec<String>,
    skip: Option<String>,
}

impl Visitor for Collect {
    fn entry(&mut self, path: &WsPath, meta: &Meta) -> Visit {
        self.entries.push((path.to_string_lossy(), meta.kind));
        if self.skip.as_deref() == Some(path.to_string_lossy().as_str()) {
            Visit::Skip
        } else {
            Visit::Descend
        }
    }

    fn repository(&mut self, path: &WsPath) {
        self.repositories.push(path.to_string_lossy());
    }
}

#[test]
fn the_walk_never_follows_a_link_and_stops_at_nested_repositories() {
    let setup = Setup::new();
    std::fs::create_dir(setup.ws(".git")).unwrap();
    std::fs::create_dir_all(setup.ws("src/deep")).unwrap();
    std::fs::write(setup.ws("src/deep/lib.rs"), "").unwrap();
    symlink(&setup.host, setup.ws("src/home")).unwrap();
    std::fs::create_dir_all(setup.ws("vendor/.git")).unwrap();
    std::fs::write(setup.ws("vendor/inner.rs"), "").unwrap();
    std::fs::create_dir_all(setup.ws("target/debug")).unwrap();
    for view in setup.views() {
        let mut collect = Collect {
            skip: Some("target".to_owned()),
            ..Collect::default()
        };
        let visited = view.walk(&Limits::default(), &mut collect).unwrap();
        let expected = [
            ("src", Kind::Directory),
            ("src/deep", Kind::Directory),
            ("src/deep/lib.rs", Kind::File),
            ("src/home", Kind::Symlink),
            ("target", Kind::Directory),
            ("vendor", Kind::Directory),
        ];
        let expected: Vec<(String, Kind)> = expected
            .iter()
            .map(|(p, k)| ((*p).to_owned(), *k))
            .collect();
        assert_eq!(collect.entries, expected);
        assert_eq!(collect.repositories, ["vendor"]);
        assert_eq!(visited, expected.len());
    }
}

#[test]
fn entries_listed_but_not_yet_visited_count_against_the_limit() {
    let setup = Setup::new();
    // A chain of directories, each also holding many files: the walk descends first, so the
    // files of every level wait in memory at once.
    let mut dir = setup.workspace.clone();
    for level in 0..4 {
        dir.push(format!("d{level}"));
        std::fs::create_dir(&dir).unwrap();
        for i in 0..10 {
            std::fs::write(dir.join(format!("f{i}")), "").unwrap();
        }
    }
    for view in setup.views() {
        let limits = Limits {
            entries: 30,
            ..Limits::default()
        };
        let mut collect = Collect::default();
        let err = view.walk(&limits, &mut collect).unwrap_err();
        assert!(
            matches!(err, WalkError::TooManyEntries { limit: 30 }),
            "{err:?}"
        );
        assert!(
            collect.entries.len() < 30,
            "stopped when the listings held more than the limit, after {} visits",
            collect.entries.len()
        );
        let fits = Limits {
            entries: 44,
            ..Limits::default()
        };
        assert_eq!(view.walk(&fits, &mut Collect::default()).unwrap(), 44);
    }
}

#[test]
fn the_walk_stops_at_its_limits_with_the_fix() {
    let setup = Setup::new();
    for i in 0..20 {
        std::fs::write(setup.ws(&format!("f{i}")), "").unwrap();
    }
    let mut deep = setup.workspace.clone();
    for _ in 0..10 {
        deep.push("d");
    }
    std::fs::create_dir_all(&deep).unwrap();
    for view in setup.views() {
        let limits = Limits {
            entries: 15,
            ..Limits::default()
        };
        let err = view.walk(&limits, &mut Collect::default()).unwrap_err();
        assert!(
            matches!(err, WalkError::TooManyEntries { limit: 15 }),
            "{err:?}"
        );
        assert!(err.to_string().contains(".gitignore"), "{err}");
        let limits = Limits {
            depth: 5,
            ..Limits::default()
        };
        let err = view.walk(&limits, &mut Collect::default()).unwrap_err();
        assert!(
            matches!(err, WalkError::TooDeep { limit: 5, .. }),
            "{err:?}"
        );
    }
}

#[test]
fn a_workspace_path_never_reaches_inside_dot_git() {
    assert!(WsPath::new(".git/config").is_err());
    assert!(WsPath::new("sub/.git/hooks/pre-commit").is_err());
    assert!(WsPath::name(b".git").is_err());
    assert!(WsPath::new("a").unwrap().join(b".Git").is_err());
}

#[test]
fn the_view_resolves_beneath_the_directory_it_opened() {
    let setup = Setup::new();
    std::fs::write(setup.ws("file"), "inside").unwrap();
    let views = setup.views();
    // The workspace's path now names another directory: the view still reads the one it opened.
    let moved = setup.workspace.with_file_name("moved");
    std::fs::rename(&setup.workspace, &moved).unwrap();
    std::fs::create_dir(&setup.workspace).unwrap();
    std::fs::write(setup.ws("file"), "replacement").unwrap();
    for view in views {
        let read = view.read(&path("file"), 100).unwrap().unwrap();
        assert_eq!(read.bytes, b"inside");
    }
    let _ = Path::new(&moved);
}

mod tree;

#[test]
fn directories_links_and_modes_are_made_beneath_the_workspace_and_never_through_a_link() {
    let setup = Setup::new();
    std::fs::create_dir(setup.ws("real")).unwrap();
    symlink(&setup.host, setup.ws("escape")).unwrap();
    std::fs::write(setup.ws("plain"), "x").unwrap();
    for view in setup.views() {
        // The controls: directories, an executable file and a link are made inside.
        view.create_dirs(&path("real/a/b")).unwrap();
        view.create_dirs(&path("real/a/b")).unwrap();
        assert!(setup.ws("real/a/b").is_dir());
        view.write_file(&path("real/a/run.sh"), b"#!/bin/sh\n", true)
            .unwrap();
        let mode = std::fs::metadata(setup.ws("real/a/run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o100, 0o100, "executable");
        view.write_file(&path("real/a/run.sh"), b"#!/bin/sh\n", false)
            .unwrap();
        let mode = std::fs::metadata(setup.ws("real/a/run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0, "no longer executable");
        view.symlink(&path("real/link"), b"../../home/id_ed25519")
            .unwrap();
        assert_eq!(
            std::fs::read_link(setup.ws("real/link")).unwrap(),
            Path::new("../../home/id_ed25519")
        );
        // Replacing the link replaces the link, not what it points to.
        view.symlink(&path("real/link"), b"elsewhere").unwrap();
        assert_eq!(std::fs::read_to_string(setup.canary()).unwrap(), CANARY);
        std::fs::remove_file(setup.ws("real/link")).unwrap();
        std::fs::remove_dir_all(setup.ws("real/a")).unwrap();
        // Refusals: below a link, below a file; nothing appears on the host.
        assert!(matches!(
            view.create_dirs(&path("escape/made")),
            Err(ViewError::Blocked { .. })
        ));
        assert!(view.create_dirs(&path("plain/made")).is_err());
        assert!(view.write_file(&path("escape/new"), b"x", false).is_err());
        assert!(view.symlink(&path("escape/new-link"), b"x").is_err());
        assert!(!setup.host.join("made").exists());
        assert!(!setup.host.join("new").exists());
        assert!(!setup.host.join("new-link").exists());
        // A directory is never replaced by a link.
        assert!(matches!(
            view.symlink(&path("real"), b"x"),
            Err(ViewError::NotAFile { .. })
        ));
    }
}
