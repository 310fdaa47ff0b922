//! The mount plan as data: each case is a layout and the exact steps it must produce, rendered one
//! per line so a table row reads like the mount list it describes.

use super::*;

fn describe(step: &Step) -> String {
    let access = |a: &Access| match a {
        Access::ReadOnly => "ro",
        Access::ReadWrite => "rw",
    };
    match step {
        Step::Bind {
            source,
            target,
            kind,
            access: a,
        } => {
            let source = match source {
                Source::Host(path) => format!("host:{}", path.display()),
                Source::Descriptor {
                    index,
                    check: Check::Detached,
                } => format!("fd{index}"),
                Source::Descriptor {
                    index,
                    check: Check::SameObjectAs(path),
                } => format!("fd{index}={}", path.display()),
                Source::Itself => "itself".into(),
            };
            format!("bind {} {source} {} {kind:?}", access(a), target.display())
        }
        Step::Symlink { path, points_to } => {
            format!("symlink {} -> {}", path.display(), points_to.display())
        }
        Step::Tmpfs { target, mode, size } => {
            format!("tmpfs {} {mode:o} {size:?}", target.display())
        }
        Step::SharedTmp {
            tmp,
            shm,
            home,
            var_tmp,
            runtime,
            size,
        } => {
            let shown =
                |p: &Option<PathBuf>| p.as_ref().map_or("-".into(), |p| p.display().to_string());
            format!(
                "sharedtmp {} {} {} {} {} {size}",
                tmp.display(),
                shm.display(),
                shown(home),
                shown(var_tmp),
                shown(runtime),
            )
        }
        Step::Proc { target } => format!("proc {}", target.display()),
        Step::Devpts { target } => format!("devpts {}", target.display()),
        Step::Generated { target, contents } => format!(
            "generated {} {}",
            target.display(),
            contents.lines().count()
        ),
        Step::Mask { target, kind } => format!("mask {} {kind:?}", target.display()),
    }
}

/// The steps every session has, after the system directories.
const BASE: [&str; 16] = [
    "tmpfs /dev 755 Some(1048576)",
    "symlink /bin -> usr/bin",
    "proc /proc",
    "generated /etc/passwd 2",
    "generated /etc/group 2",
    "bind rw host:/dev/null /dev/null Device",
    "bind rw host:/dev/zero /dev/zero Device",
    "bind rw host:/dev/full /dev/full Device",
    "bind rw host:/dev/random /dev/random Device",
    "bind rw host:/dev/urandom /dev/urandom Device",
    "bind rw host:/dev/tty /dev/tty Device",
    "devpts /dev/pts",
    "symlink /dev/ptmx -> pts/ptmx",
    "symlink /dev/fd -> /proc/self/fd",
    "symlink /dev/stdin -> /proc/self/fd/0",
    "symlink /dev/stdout -> /proc/self/fd/1",
];

fn layout() -> Layout {
    Layout {
        image: None,
        system: vec![
            SystemEntry::Dir("/usr".into()),
            SystemEntry::Symlink {
                path: "/bin".into(),
                points_to: "usr/bin".into(),
            },
            SystemEntry::Dir("/etc".into()),
        ],
        workspace: Mounted {
            path: "/work/ws".into(),
            source: Source::Descriptor {
                index: 0,
                check: Check::Detached,
            },
            kind: Kind::Dir,
        },
        workspace_read_only: false,
        git: None,
        submodules: Vec::new(),
        git_mutations: GitMutations::Deny,
        read_only: Vec::new(),
        caches: Vec::new(),
        hide: Vec::new(),
        protect: Vec::new(),
        masks: Vec::new(),
        home: "/root".into(),
        runtime_dir: "/run/user/1000".into(),
        passwd: "a\nb\n".into(),
        group: "a\nb\n".into(),
        tmp_size: 1000,
    }
}

fn check(layout: Layout, expected_extra: &[&str]) {
    let actual: Vec<String> = plan(&layout).steps.iter().map(describe).collect();
    let mut expected: Vec<String> = vec![
        "bind ro host:/usr /usr Dir".into(),
        "bind ro host:/etc /etc Dir".into(),
    ];
    expected.extend(BASE.iter().map(|s| s.to_string()));
    expected.extend([
        "symlink /dev/stderr -> /proc/self/fd/2".to_string(),
        "sharedtmp /tmp /dev/shm /root /var/tmp /run/user/1000 1000".to_string(),
    ]);
    expected.push("bind rw fd0 /work/ws Dir".into());
    expected.extend(expected_extra.iter().map(|s| s.to_string()));
    // Order matters only between a mount and the mounts below it; compare as the plan orders.
    let mut sorted_expected = expected.clone();
    sorted_expected.sort();
    let mut sorted_actual = actual.clone();
    sorted_actual.sort();
    assert_eq!(
        sorted_actual,
        sorted_expected,
        "the plan has other steps:\n{}",
        actual.join("\n")
    );
    for (i, step) in plan(&layout).steps.iter().enumerate() {
        for later in &plan(&layout).steps[i + 1..] {
            assert!(
                !(step.target() != later.target() && step.target().starts_with(later.target())),
                "{} is mounted before {}, which covers it",
                describe(step),
                describe(later)
            );
        }
    }
}

#[test]
fn the_root_holds_the_system_dirs_dev_proc_tmp_home_and_workspace_only() {
    check(layout(), &[]);
}

#[test]
fn read_only_paths_and_hidden_paths_are_mounted_in_order() {
    let mut l = layout();
    l.read_only.push(Mounted {
        path: "/opt/sdk".into(),
        source: Source::Descriptor {
            index: 1,
            check: Check::Detached,
        },
        kind: Kind::Dir,
    });
    l.hide = vec![
        ("/work/ws/secrets".into(), Kind::Dir),
        ("/work/ws/.env".into(), Kind::File),
    ];
    check(
        l,
        &[
            "bind ro fd1 /opt/sdk Dir",
            "mask /work/ws/secrets Dir",
            "mask /work/ws/.env File",
        ],
    );
}

#[test]
fn masks_apply_only_where_the_sandbox_can_see_the_path() {
    let mut l = layout();
    l.masks = vec![
        ("/usr/local/bin/cordon".into(), Kind::File),
        ("/work/ws/state".into(), Kind::Dir),
        ("/home/ada/.config/cordon/policy.toml".into(), Kind::File),
        ("/srv/state".into(), Kind::Dir),
    ];
    check(
        l,
        &["mask /usr/local/bin/cordon File", "mask /work/ws/state Dir"],
    );
}

#[test]
fn the_git_directory_is_a_read_only_mount_point() {
    let mut l = layout();
    l.git = Some(GitLayout {
        dot_git_file: None,
        dirs: vec![Mounted {
            path: "/work/ws/.git".into(),
            source: Source::Itself,
            kind: Kind::Dir,
        }],
        protected: vec![
            ("/work/ws/.git/config".into(), Kind::File),
            ("/work/ws/.git/hooks".into(), Kind::Dir),
        ],
        covers: Vec::new(),
    });
    check(l, &["bind ro itself /work/ws/.git Dir"]);
}

#[test]
fn allowed_git_mutations_keep_config_and_hooks_read_only() {
    let mut l = layout();
    l.git_mutations = GitMutations::Allow;
    l.git = Some(GitLayout {
        dot_git_file: None,
        dirs: vec![Mounted {
            path: "/work/ws/.git".into(),
            source: Source::Itself,
            kind: Kind::Dir,
        }],
        protected: vec![
            ("/work/ws/.git/config".into(), Kind::File),
            ("/work/ws/.git/hooks".into(), Kind::Dir),
        ],
        covers: Vec::new(),
    });
    check(
        l,
        &[
            "bind rw itself /work/ws/.git Dir",
            "bind ro itself /work/ws/.git/config File",
            "bind ro itself /work/ws/.git/hooks Dir",
        ],
    );
}

#[test]
fn a_worktree_binds_its_dot_git_file_and_both_git_dirs() {
    let mut l = layout();
    l.git = Some(GitLayout {
        dot_git_file: Some("/work/ws/.git".into()),
        dirs: vec![
            Mounted {
                path: "/src/main/.git/worktrees/ws".into(),
                source: Source::Descriptor {
                    index: 1,
                    check: Check::Detached,
                },
                kind: Kind::Dir,
            },
            Mounted {
                path: "/src/main/.git".into(),
                source: Source::Descriptor {
                    index: 2,
                    check: Check::Detached,
                },
                kind: Kind::Dir,
            },
        ],
        protected: Vec::new(),
        covers: Vec::new(),
    });
    check(
        l,
        &[
            "bind ro itself /work/ws/.git File",
            "bind ro fd1 /src/main/.git/worktrees/ws Dir",
            "bind ro fd2 /src/main/.git Dir",
            // Pinned, so it cannot be renamed away from under the worktree's git directory.
            "bind rw itself /src/main/.git/worktrees Dir",
        ],
    );
}

#[test]
fn every_directory_above_a_mask_or_protected_git_entry_is_pinned_as_a_mount_point() {
    let mut l = layout();
    l.git_mutations = GitMutations::Allow;
    l.git = Some(GitLayout {
        dot_git_file: Some("/work/ws/.git".into()),
        dirs: vec![Mounted {
            path: "/work/ws/meta/gd".into(),
            source: Source::Itself,
            kind: Kind::Dir,
        }],
        protected: vec![(
            "/work/ws/meta/gd/objects/info/alternates".into(),
            Kind::File,
        )],
        covers: Vec::new(),
    });
    l.hide = vec![("/work/ws/config/deep/secrets.yml".into(), Kind::File)];
    check(
        l,
        &[
            "bind ro itself /work/ws/.git File",
            "bind rw itself /work/ws/meta/gd Dir",
            "bind ro itself /work/ws/meta/gd/objects/info/alternates File",
            "mask /work/ws/config/deep/secrets.yml File",
            "bind rw itself /work/ws/meta Dir",
            "bind rw itself /work/ws/meta/gd/objects Dir",
            "bind rw itself /work/ws/meta/gd/objects/info Dir",
            "bind rw itself /work/ws/config Dir",
            "bind rw itself /work/ws/config/deep Dir",
        ],
    );
}

#[test]
fn protected_entries_are_read_only_mount_points_over_the_workspace_with_pinned_parents() {
    let mut l = layout();
    l.protect = vec![
        ("/work/ws/pipeline.yaml".into(), Kind::File),
        ("/work/ws/agents/review/x.agent.md".into(), Kind::File),
        ("/work/ws/docs".into(), Kind::Dir),
    ];
    check(
        l,
        &[
            "bind ro itself /work/ws/pipeline.yaml File",
            "bind ro itself /work/ws/agents/review/x.agent.md File",
            "bind ro itself /work/ws/docs Dir",
            // Pinned, so the protected file cannot be carried away by renaming its directory.
            "bind rw itself /work/ws/agents Dir",
            "bind rw itself /work/ws/agents/review Dir",
        ],
    );
}

#[test]
fn a_protected_entry_that_is_also_hidden_is_masked_after_its_read_only_mount() {
    let mut l = layout();
    l.protect = vec![("/work/ws/notes.md".into(), Kind::File)];
    l.hide = vec![("/work/ws/notes.md".into(), Kind::File)];
    let steps = plan(&l).steps;
    let position = |wanted: &str| steps.iter().position(|s| describe(s) == wanted);
    let (bound, masked) = (
        position("bind ro itself /work/ws/notes.md File"),
        position("mask /work/ws/notes.md File"),
    );
    assert!(
        matches!((bound, masked), (Some(b), Some(m)) if b < m),
        "{bound:?} {masked:?}"
    );
    check(
        l,
        &[
            "bind ro itself /work/ws/notes.md File",
            "mask /work/ws/notes.md File",
        ],
    );
}

#[test]
fn home_inside_the_workspace_gets_no_tmpfs_over_it() {
    let mut l = layout();
    l.home = "/work/ws".into();
    let steps: Vec<String> = plan(&l).steps.iter().map(describe).collect();
    assert!(
        !steps
            .iter()
            .any(|s| s.starts_with("tmpfs /work/ws") || s.contains("/dev/shm /work/ws")),
        "{steps:#?}"
    );
}

#[test]
fn var_tmp_and_the_runtime_directory_come_from_the_shared_tmpfs_unless_in_the_workspace() {
    let shared = |l: &Layout| {
        plan(l)
            .steps
            .iter()
            .map(describe)
            .find(|s| s.starts_with("sharedtmp"))
            .expect("a shared tmpfs")
    };
    assert_eq!(
        shared(&layout()),
        "sharedtmp /tmp /dev/shm /root /var/tmp /run/user/1000 1000"
    );
    // A workspace at `/var` or `/run` holds them (it is mounted after the tmpfs and covers it).
    let mut l = layout();
    l.workspace.path = "/var".into();
    assert_eq!(
        shared(&l),
        "sharedtmp /tmp /dev/shm /root - /run/user/1000 1000"
    );
    let mut l = layout();
    l.workspace.path = "/run".into();
    assert_eq!(shared(&l), "sharedtmp /tmp /dev/shm /root /var/tmp - 1000");
}

#[test]
fn a_workspace_under_tmp_is_mounted_after_the_private_tmp() {
    let mut l = layout();
    l.workspace.path = "/tmp/x/ws".into();
    let steps = plan(&l).steps;
    let position = |prefix: &str| {
        steps
            .iter()
            .position(|s| describe(s).starts_with(prefix))
            .expect(prefix)
    };
    assert!(position("sharedtmp /tmp") < position("bind rw fd0 /tmp/x/ws"));
}

/// The top-level git directory of `layout()`'s workspace, read-only.
fn top_git() -> GitLayout {
    GitLayout {
        dot_git_file: None,
        dirs: vec![Mounted {
            path: "/work/ws/.git".into(),
            source: Source::Itself,
            kind: Kind::Dir,
        }],
        protected: vec![("/work/ws/.git/config".into(), Kind::File)],
        covers: Vec::new(),
    }
}

#[test]
fn a_submodule_git_file_and_the_directory_it_names_are_read_only_mount_points() {
    let mut l = layout();
    l.git = Some(top_git());
    l.submodules = vec![
        GitLayout {
            dot_git_file: Some("/work/ws/lib/sub/.git".into()),
            dirs: vec![Mounted {
                path: "/work/ws/.git/modules/lib/sub".into(),
                source: Source::Itself,
                kind: Kind::Dir,
            }],
            protected: vec![("/work/ws/.git/modules/lib/sub/config".into(), Kind::File)],
            covers: Vec::new(),
        },
        GitLayout {
            dot_git_file: None,
            dirs: vec![Mounted {
                path: "/work/ws/vendor/.git".into(),
                source: Source::Itself,
                kind: Kind::Dir,
            }],
            protected: Vec::new(),
            covers: Vec::new(),
        },
    ];
    // An uninitialised submodule: its empty directory is kept read-only whole.
    l.protect = vec![("/work/ws/empty-sub".into(), Kind::Dir)];
    check(
        l,
        &[
            "bind ro itself /work/ws/.git Dir",
            "bind ro itself /work/ws/lib/sub/.git File",
            "bind ro itself /work/ws/.git/modules/lib/sub Dir",
            "bind ro itself /work/ws/vendor/.git Dir",
            "bind ro itself /work/ws/empty-sub Dir",
            // Pinned: neither the submodule nor its git directory can be moved away and replaced.
            "bind rw itself /work/ws/lib Dir",
            "bind rw itself /work/ws/lib/sub Dir",
            "bind rw itself /work/ws/vendor Dir",
            // Inside the read-only `.git`, so still read-only: a copy keeps its mount's flags.
            "bind rw itself /work/ws/.git/modules Dir",
            "bind rw itself /work/ws/.git/modules/lib Dir",
        ],
    );
}

#[test]
fn allowed_git_mutations_keep_a_submodule_config_read_only_like_the_top_level_one() {
    let mut l = layout();
    l.git_mutations = GitMutations::Allow;
    l.git = Some(top_git());
    l.submodules = vec![GitLayout {
        dot_git_file: Some("/work/ws/sub/.git".into()),
        dirs: vec![Mounted {
            path: "/work/ws/.git/modules/sub".into(),
            source: Source::Itself,
            kind: Kind::Dir,
        }],
        protected: vec![("/work/ws/.git/modules/sub/config".into(), Kind::File)],
        covers: Vec::new(),
    }];
    check(
        l,
        &[
            "bind rw itself /work/ws/.git Dir",
            "bind ro itself /work/ws/.git/config File",
            "bind ro itself /work/ws/sub/.git File",
            "bind rw itself /work/ws/.git/modules/sub Dir",
            "bind ro itself /work/ws/.git/modules/sub/config File",
            "bind rw itself /work/ws/sub Dir",
            "bind rw itself /work/ws/.git/modules Dir",
        ],
    );
}

#[test]
fn shared_directories_are_pinned_once_and_a_target_above_another_is_not_pinned() {
    let mut l = layout();
    l.protect = vec![
        ("/work/ws/a/b/c".into(), Kind::Dir),
        ("/work/ws/a/b/c/d/e".into(), Kind::File),
        ("/work/ws/a/x".into(), Kind::File),
    ];
    check(
        l,
        &[
            "bind ro itself /work/ws/a/b/c Dir",
            "bind ro itself /work/ws/a/b/c/d/e File",
            "bind ro itself /work/ws/a/x File",
            "bind rw itself /work/ws/a Dir",
            "bind rw itself /work/ws/a/b Dir",
            "bind rw itself /work/ws/a/b/c/d Dir",
        ],
    );
}

#[test]
fn deep_targets_pin_each_directory_once() {
    // Review 3, finding 4: the pinning walk is linear in the targets' depth (a scan per
    // ancestor made a thousand-deep target cost millions of comparisons). Two targets a thousand
    // deep sharing all but their last directory.
    let deep = PathBuf::from("/work/ws").join("d/".repeat(1000));
    let mut l = layout();
    l.protect = vec![
        (deep.join("one"), Kind::File),
        (deep.join("two"), Kind::File),
    ];
    let pins = plan(&l)
        .steps
        .iter()
        .filter(|step| {
            matches!(
                step,
                Step::Bind {
                    access: Access::ReadWrite,
                    source: Source::Itself,
                    ..
                }
            )
        })
        .count();
    assert_eq!(pins, 1000);
}

#[test]
fn a_private_git_directory_is_mounted_writable_with_the_hosts_entries_read_only_over_it() {
    let mut l = layout();
    l.git_mutations = GitMutations::Allow;
    let cover = |path: &str, kind| Mounted {
        path: path.into(),
        source: Source::Descriptor {
            index: 1,
            check: Check::Detached,
        },
        kind,
    };
    l.git = Some(GitLayout {
        dot_git_file: None,
        dirs: vec![Mounted {
            path: "/work/ws/.git".into(),
            source: Source::Descriptor {
                index: 0,
                check: Check::Detached,
            },
            kind: Kind::Dir,
        }],
        protected: Vec::new(),
        covers: vec![
            cover("/work/ws/.git/config", Kind::File),
            cover("/work/ws/.git/cordon-objects", Kind::Dir),
        ],
    });
    let plan = plan(&l);
    let at = |target: &str| {
        plan.steps
            .iter()
            .position(|s| s.target() == Path::new(target))
            .unwrap_or_else(|| panic!("{target} is mounted"))
    };
    assert!(at("/work/ws") < at("/work/ws/.git"));
    assert!(at("/work/ws/.git") < at("/work/ws/.git/config"));
    for (target, expected) in [
        ("/work/ws/.git", Access::ReadWrite),
        ("/work/ws/.git/config", Access::ReadOnly),
        ("/work/ws/.git/cordon-objects", Access::ReadOnly),
    ] {
        match &plan.steps[at(target)] {
            Step::Bind { access, .. } => assert_eq!(*access, expected, "{target}"),
            other => panic!("{target}: {other:?}"),
        }
    }
}
