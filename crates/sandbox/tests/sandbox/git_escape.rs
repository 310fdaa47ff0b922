//! Git layouts where the workspace is not simply the top of a work tree with a `.git` directory:
//! a submodule's own work tree, a `--separate-git-dir` repository, a subdirectory of a work tree
//! with submodules under it, linked worktrees inside the workspace, and `.git` files naming a
//! missing directory. In each, a step tries to make the user's next `git status` on the host run
//! its program (a `core.fsmonitor` in a repository it made, with a `.git` file repointed at it);
//! judged by running `git status` on the host, with a pinned environment, and looking for the
//! marker. Each session also runs the same attack on a decoy — a `.git` file nothing protects —
//! whose marker must appear: the control that shows the attack works where nothing stops it.

use std::path::{Path, PathBuf};

use cordon_sandbox::git::GitError;
use cordon_sandbox::{SandboxError, Session};

use crate::support::*;

/// A shell snippet, run in the sandbox: makes a repository at `repo` (relative to the working
/// directory) whose `core.fsmonitor` touches `marker` (a host path), and writes `dot_git` to name
/// it as `named`. Prints `wrote <dot_git>` when the `.git` write succeeds.
fn attack(repo: &str, marker: &Path, dot_git: &str, named: &str) -> String {
    format!(
        "git init -q --bare {repo} && git -C {repo} config core.bare false && \
         git -C {repo} config core.fsmonitor 'touch {marker}; false'; \
         printf 'gitdir: {named}\\n' > {dot_git} 2>/dev/null && echo 'wrote {dot_git}'; ",
        marker = marker.display()
    )
}

/// The decoy: `decoy/.git` naming `../.decoy-git`, an ordinary workspace file no layer protects.
fn plant_decoy(ws: &Path) {
    std::fs::create_dir_all(ws.join("decoy")).expect("mkdir");
    std::fs::write(ws.join("decoy/.git"), "gitdir: ../.decoy-git\n").expect("write");
}

/// Markers in a directory outside the workspace: the attack's and the decoy's.
struct Markers {
    _dir: tempfile::TempDir,
    attack: PathBuf,
    decoy: PathBuf,
}

fn markers() -> Markers {
    let dir = tempfile::tempdir().expect("a marker directory");
    // The sandbox's fsmonitor runs as whoever runs git on the host; let anyone create markers.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .expect("chmod");
    let attack = dir.path().join("attack");
    let decoy = dir.path().join("decoy");
    Markers {
        _dir: dir,
        attack,
        decoy,
    }
}

/// Runs `script` plus the decoy attack in a session on `ws`, then `git status` on the host in
/// `ws/decoy`, and asserts the control: the decoy's `.git` was rewritten and its marker made.
fn run_with_control(ws: &Path, markers: &Markers, script: &str) -> String {
    plant_decoy(ws);
    let decoy = attack(
        ".decoy-evil",
        &markers.decoy,
        "decoy/.git",
        "../.decoy-evil",
    );
    let mut session = open(ws);
    let outcome = sh(&mut session, &format!("{script}{decoy}"));
    drop(session);
    let out = stdout(&outcome);
    assert!(
        out.contains("wrote decoy/.git"),
        "the control write: {out}{}",
        stderr(&outcome)
    );
    host_git(&ws.join("decoy"), &["status"]);
    assert!(
        markers.decoy.exists(),
        "the control: host git status runs the decoy's fsmonitor"
    );
    out
}

/// Asserts the attack left no trace on the host: `file` still holds `before`, and `git status`
/// in each of `dirs` does not run the planted fsmonitor.
fn assert_host_unchanged(markers: &Markers, file: &Path, before: &[u8], dirs: &[&Path]) {
    assert_eq!(
        std::fs::read(file).expect("the .git file"),
        before,
        "{file:?} is unchanged"
    );
    for dir in dirs {
        host_git(dir, &["status"]);
        host_git(dir, &["status", "--ignore-submodules=none"]);
    }
    assert!(
        !markers.attack.exists(),
        "host git status must not run the sandbox's fsmonitor"
    );
}

/// The whole repointing attack on the `.git` file `dot_git` (relative to `ws`), which held
/// `before` when the test began: a session makes repository `repo` with a planted fsmonitor and
/// rewrites `dot_git` to name it as `named`, next to the decoy control. Asserts the host is
/// unchanged (the file, `git status` in each of `dirs`) and that the rewrite did not succeed.
fn assert_repointing_fails(
    ws: &Path,
    dot_git: &str,
    before: &[u8],
    (repo, named): (&str, &str),
    dirs: &[&Path],
) {
    let markers = markers();
    let out = run_with_control(ws, &markers, &attack(repo, &markers.attack, dot_git, named));
    assert_host_unchanged(&markers, &ws.join(dot_git), before, dirs);
    assert!(
        !out.contains(&format!("wrote {dot_git}")),
        "{dot_git}: {out}"
    );
}

#[test]
fn a_submodule_work_tree_as_workspace_keeps_its_git_file() {
    let root = workspace();
    let upstream = root.path().join("upstream");
    committed_repo(&upstream);
    let superproject = root.path().join("super");
    committed_repo(&superproject);
    let url = upstream.to_str().expect("utf-8");
    git(&superproject, &["submodule", "add", "-q", url, "sub"]);
    let ws = superproject.join("sub");
    let before = std::fs::read(ws.join(".git")).expect("read");
    assert_repointing_fails(
        &ws,
        ".git",
        &before,
        (".evil", ".evil"),
        &[&ws, &superproject],
    );
}

#[test]
fn a_separate_git_dir_workspace_keeps_its_git_file() {
    let root = workspace();
    let ws = root.path().join("ws");
    let elsewhere = root.path().join("elsewhere");
    git(
        root.path(),
        &[
            "init",
            "-q",
            "--separate-git-dir",
            elsewhere.to_str().expect("utf-8"),
            "ws",
        ],
    );
    std::fs::write(ws.join("file"), "x").expect("write");
    git(&ws, &["add", "file"]);
    git(&ws, &["commit", "-q", "-m", "one"]);
    let before = std::fs::read(ws.join(".git")).expect("read");
    assert_repointing_fails(&ws, ".git", &before, (".evil", ".evil"), &[&ws]);
}

#[test]
fn a_subdirectory_of_a_work_tree_keeps_the_submodules_under_it() {
    let root = workspace();
    let upstream = root.path().join("upstream");
    committed_repo(&upstream);
    let top = root.path().join("ws2");
    committed_repo(&top);
    let url = upstream.to_str().expect("utf-8");
    git(&top, &["submodule", "add", "-q", url, "libs/sub"]);
    let ws = top.join("libs");
    let before = std::fs::read(ws.join("sub/.git")).expect("read");
    assert_repointing_fails(&ws, "sub/.git", &before, ("evil", "../evil"), &[&top]);
}

#[test]
fn a_linked_worktree_inside_the_workspace_keeps_its_git_file() {
    let ws = workspace();
    committed_repo(ws.path());
    git(ws.path(), &["worktree", "add", "-q", ".worktrees/feat"]);
    let feat = ws.path().join(".worktrees/feat");
    let before = std::fs::read(feat.join(".git")).expect("read");
    assert_repointing_fails(
        ws.path(),
        ".worktrees/feat/.git",
        &before,
        (".e", "../../.e"),
        &[&feat, ws.path()],
    );
}

#[test]
fn a_git_file_naming_a_missing_directory_inside_the_workspace_refuses_the_session() {
    let root = workspace();
    let upstream = root.path().join("upstream");
    committed_repo(&upstream);
    let ws = root.path().join("ws");
    committed_repo(&ws);
    let url = upstream.to_str().expect("utf-8");
    git(&ws, &["submodule", "add", "-q", url, "sub"]);
    // What a hostile earlier session (or a careless hand) could leave: a `.git` file naming a
    // directory that does not exist yet, inside the workspace, where the sandbox could make it.
    std::fs::write(ws.join("sub/.git"), "gitdir: ../.gitsub\n").expect("write");
    match Session::open(config(&ws)) {
        Err(SandboxError::Git(GitError::UnsafeGitFile { path, .. })) => {
            assert!(path.ends_with("sub/.git"), "{path:?}");
        }
        Err(other) => panic!("wrong refusal: {other}"),
        Ok(_) => panic!("the session must be refused"),
    }
    // The control: with the directory there, the session opens and it is read-only.
    std::fs::rename(ws.join(".git/modules/sub"), ws.join(".gitsub")).expect("rename");
    let mut session = open(&ws);
    let out = stdout(&sh(
        &mut session,
        "echo '[core]' >> .gitsub/config 2>/dev/null && echo wrote-config; \
         touch control && echo wrote-workspace",
    ));
    assert_eq!(out, "wrote-workspace\n");
}

/// A repository with a linked worktree in `.worktrees/feat` and every entry the top-level git
/// directory must hold for `allow_git_mutations`; returns it and its git directory.
fn worktree_repository() -> (tempfile::TempDir, std::path::PathBuf) {
    let ws = workspace();
    committed_repo(ws.path());
    git(ws.path(), &["worktree", "add", "-q", ".worktrees/feat"]);
    let git_dir = ws.path().join(".git");
    for dir in ["info", "hooks", "objects/info"] {
        std::fs::create_dir_all(git_dir.join(dir)).expect("mkdir");
    }
    for file in ["config.worktree", "objects/info/alternates"] {
        std::fs::write(git_dir.join(file), "").expect("write");
    }
    std::fs::write(git_dir.join("commondir"), ".\n").expect("commondir");
    (ws, git_dir)
}

#[test]
fn allowed_git_mutations_keep_a_linked_worktree_git_file_and_record_read_only() {
    let (ws, git_dir) = worktree_repository();
    let record = git_dir.join("worktrees/feat/commondir");
    let record_before = std::fs::read(&record).expect("the worktree's commondir");
    let mut config = config(ws.path());
    config.git_mutations = cordon_sandbox::mounts::GitMutations::Allow;
    let mut session = Session::open(config).expect("the session opens");
    let out = stdout(&sh(
        &mut session,
        "echo 'gitdir: /tmp' > .worktrees/feat/.git 2>/dev/null && echo wrote-dot-git; \
         echo /tmp > .git/worktrees/feat/commondir 2>/dev/null && echo wrote-record; \
         touch .git/objects/new && echo wrote-objects",
    ));
    drop(session);
    // The control: mutations are allowed where they are meant to be.
    assert_eq!(out, "wrote-objects\n");
    assert_eq!(std::fs::read(&record).expect("read"), record_before);
}

#[test]
fn a_git_planted_at_the_root_of_a_subdirectory_workspace_keeps_the_submodules_under_it() {
    // Review 3, finding 1: session 1 plants a `.git` at the workspace root (nothing is there to
    // protect); session 2 must still read the superproject's index and keep `sub/.git`.
    for plant in ["mkdir .git", "echo junk > .git"] {
        let root = workspace();
        let upstream = root.path().join("upstream");
        committed_repo(&upstream);
        let top = root.path().join("s1");
        committed_repo(&top);
        let url = upstream.to_str().expect("utf-8");
        git(&top, &["submodule", "add", "-q", url, "libs/sub"]);
        let ws = top.join("libs");
        let before = std::fs::read(ws.join("sub/.git")).expect("read");
        let mut session = open(&ws);
        let planted = stdout(&sh(&mut session, &format!("{plant} && echo planted")));
        drop(session);
        assert_eq!(
            planted, "planted\n",
            "{plant}: session 1 plants the root `.git`"
        );

        assert_repointing_fails(&ws, "sub/.git", &before, ("evil", "../evil"), &[&top]);
    }
}

/// One version-2 index entry: mode, a zero object name, the name padded with NULs to 8 bytes.
fn index_entry(mode: u32, name: &[u8]) -> Vec<u8> {
    let mut entry = vec![0u8; 40];
    entry[24..28].copy_from_slice(&mode.to_be_bytes());
    entry.extend([0u8; 20]);
    let flags = u16::try_from(name.len().min(0xFFF)).expect("masked");
    entry.extend(flags.to_be_bytes());
    entry.extend(name);
    let padded = (entry.len() + 8) & !7;
    entry.resize(padded, 0);
    entry
}

/// A version-2 index of gitlinks at `names`, with `extensions`, and a zero trailing hash.
fn gitlink_index(names: &[Vec<u8>], extensions: &[u8]) -> Vec<u8> {
    let mut out = b"DIRC".to_vec();
    out.extend(2u32.to_be_bytes());
    out.extend(u32::try_from(names.len()).expect("few").to_be_bytes());
    for name in names {
        out.extend(index_entry(0o160000, name));
    }
    out.extend(extensions);
    out.extend([0u8; 20]);
    out
}

/// A repository at `ws` whose index is the hand-built `index` (and `shared`, its shared index,
/// when split).
fn repo_with_index(ws: &Path, index: &[u8], shared: Option<&[u8]>) {
    git(ws, &["init", "-q", "."]);
    std::fs::write(ws.join(".git/index"), index).expect("write the index");
    if let Some(shared) = shared {
        let name = format!(".git/sharedindex.{}", "11".repeat(20));
        std::fs::write(ws.join(name), shared).expect("write the shared index");
    }
}

#[test]
fn a_forged_split_index_of_long_gitlink_names_is_decided_without_hanging_the_host() {
    // Review 3, finding 3: 4096 gitlinks of ~4000-byte names in the split part and in the
    // shared index (250 components, under the depth cap, so the merge itself is what is
    // exercised). Merging them by scanning the list for each name (a component-by-component
    // comparison each) took many minutes; a hash set takes milliseconds. Same names in both: the union is 4096 and the
    // session opens; different names: the union is 8192 and it is refused, as soon as the limit
    // is passed.
    let deep = "/aaaaaaaaaaaaaaa".repeat(249);
    let names = |tag: &str| -> Vec<Vec<u8>> {
        (0..cordon_sandbox::git::MAX_SUBMODULES)
            .map(|n| format!("{tag}{n:05}{deep}").into_bytes())
            .collect()
    };
    let mut link = b"link".to_vec();
    link.extend(20u32.to_be_bytes());
    link.extend([0x11u8; 20]);
    for (shared_tag, opens) in [("", true), ("b", false)] {
        let ws = workspace();
        let split = gitlink_index(&names(""), &link);
        let shared = gitlink_index(&names(shared_tag), &[]);
        repo_with_index(ws.path(), &split, Some(&shared));
        match Session::open(config(ws.path())) {
            Ok(mut session) if opens => {
                // Nothing exists at those paths: nothing to mount, the session works.
                assert_eq!(stdout(&sh(&mut session, "echo ok")), "ok\n");
            }
            Err(SandboxError::Git(GitError::TooManySubmodules { limit })) if !opens => {
                assert_eq!(limit, cordon_sandbox::git::MAX_SUBMODULES);
            }
            Ok(_) => panic!("{shared_tag:?}: the union of 8192 gitlinks must be refused"),
            Err(other) => panic!("{shared_tag:?}: wrong outcome: {other}"),
        }
    }
}

#[test]
fn gitlinks_deeper_than_cordon_protects_refuse_the_session_and_one_at_the_limit_is_kept() {
    // Review 3, finding 4: 64 existing gitlink directories 1000 levels deep made the mount plan
    // cubic (minutes on the host). Past MAX_COMPONENTS the session is refused before any of
    // that work, naming the path and the fix.
    use cordon_sandbox::git::MAX_COMPONENTS;
    let chain = |levels: usize| "/d".repeat(levels - 1);
    let ws = workspace();
    let names: Vec<Vec<u8>> = (0..64)
        .map(|n| format!("{n:02}{}", chain(1000)).into_bytes())
        .collect();
    repo_with_index(ws.path(), &gitlink_index(&names, &[]), None);
    for name in &names {
        let name = std::str::from_utf8(name).expect("utf-8");
        std::fs::create_dir_all(ws.path().join(name)).expect("mkdir");
    }
    match Session::open(config(ws.path())) {
        Err(SandboxError::Git(error @ GitError::PathTooDeep { .. })) => {
            let message = error.to_string();
            assert!(message.contains("deeper than cordon protects"), "{message}");
            assert!(message.contains("git submodule deinit"), "{message}");
        }
        Err(other) => panic!("wrong refusal: {other}"),
        Ok(_) => panic!("the session must be refused"),
    }

    // The control: one gitlink exactly MAX_COMPONENTS deep is kept read-only as a whole (no
    // `.git` in it), so no `.git` can be created there, while its parent stays writable.
    let ws = workspace();
    let name = format!("l{}", chain(MAX_COMPONENTS));
    repo_with_index(
        ws.path(),
        &gitlink_index(&[name.clone().into_bytes()], &[]),
        None,
    );
    std::fs::create_dir_all(ws.path().join(&name)).expect("mkdir");
    let mut session = open(ws.path());
    let out = stdout(&sh(
        &mut session,
        &format!(
            "mkdir {name}/.git 2>/dev/null && echo created-git; \
             touch {name}/../control && echo wrote-parent"
        ),
    ));
    drop(session);
    assert_eq!(out, "wrote-parent\n");
    assert!(!ws.path().join(&name).join(".git").exists());
}

#[test]
fn a_linked_worktree_recorded_with_relative_paths_keeps_its_git_file() {
    // Review 3, finding 2: git ≥ 2.48 (`worktree.useRelativePaths`) writes both pointers
    // relative; this git may be older, so the files are written by hand as 2.48 writes them.
    let ws = workspace();
    committed_repo(ws.path());
    git(ws.path(), &["worktree", "add", "-q", ".worktrees/feat"]);
    let feat = ws.path().join(".worktrees/feat");
    std::fs::write(
        ws.path().join(".git/worktrees/feat/gitdir"),
        "../../../.worktrees/feat/.git\n",
    )
    .expect("the relative record");
    std::fs::write(feat.join(".git"), "gitdir: ../../.git/worktrees/feat\n")
        .expect("the relative .git");
    git(&feat, &["status", "-s"]);
    let before = std::fs::read(feat.join(".git")).expect("read");
    assert_repointing_fails(
        ws.path(),
        ".worktrees/feat/.git",
        &before,
        (".e", "../../.e"),
        &[&feat, ws.path()],
    );
}

#[test]
fn allowed_git_mutations_refuse_a_worktree_without_the_config_git_would_read() {
    // Review of 2026-12-02, finding 2: with `extensions.worktreeConfig` on, a `config.worktree`
    // created in a worktree's administrative directory is read by git in that worktree.
    let (ws, git_dir) = worktree_repository();
    git(ws.path(), &["config", "extensions.worktreeConfig", "true"]);
    let allow = || {
        let mut config = config(ws.path());
        config.git_mutations = cordon_sandbox::mounts::GitMutations::Allow;
        Session::open(config)
    };
    match allow() {
        Err(cordon_sandbox::SandboxError::GitMutations { path, .. }) => {
            assert!(path.ends_with("worktrees/feat/config.worktree"), "{path:?}");
        }
        Err(other) => panic!("wrong refusal: {other}"),
        Ok(_) => panic!("the session must be refused"),
    }
    // The control: once the file exists it is kept read-only and the session opens.
    let record = git_dir.join("worktrees/feat/config.worktree");
    std::fs::write(&record, "").expect("write");
    let mut session = allow().expect("the session opens");
    let out = stdout(&sh(
        &mut session,
        "echo '[core]' > .git/worktrees/feat/config.worktree 2>/dev/null && echo wrote; \
         touch .git/objects/new && echo wrote-objects",
    ));
    drop(session);
    assert_eq!(out, "wrote-objects\n");
    assert_eq!(std::fs::read(&record).expect("read"), b"");
}
