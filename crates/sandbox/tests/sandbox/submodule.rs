//! Submodules: every gitlink's `.git` (a `gitdir:` file or a directory) and the git directory it
//! names are as read-only as the top-level git directory, so a step cannot plant a
//! `core.fsmonitor` that the user's next `git status` on the host would run.

use std::path::{Path, PathBuf};

use cordon_sandbox::{SandboxError, Session};

use crate::support::*;

/// A workspace with three gitlinks: `lib/sub`, a real submodule (`.git` file naming
/// `.git/modules/lib/sub`); `vendor/emb`, an embedded repository (`.git` directory); and
/// `empty-sub`, an uninitialised one (an empty directory). Returns the upstream too, which must
/// outlive the workspace's use.
fn workspace_with_submodules() -> (tempfile::TempDir, tempfile::TempDir) {
    let upstream = workspace();
    committed_repo(upstream.path());
    let ws = workspace();
    committed_repo(ws.path());
    let url = upstream.path().to_str().expect("utf-8");
    git(ws.path(), &["submodule", "add", "-q", url, "lib/sub"]);
    std::fs::create_dir_all(ws.path().join("vendor/emb")).expect("mkdir");
    committed_repo(&ws.path().join("vendor/emb"));
    git(ws.path(), &["add", "vendor/emb"]);
    let oid = "0123456789abcdef0123456789abcdef01234567";
    git(
        ws.path(),
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{oid},empty-sub"),
        ],
    );
    std::fs::create_dir(ws.path().join("empty-sub")).expect("mkdir");
    (ws, upstream)
}

/// Every way a step could make the host's git run its code through a submodule, then the
/// controls: writes to the submodules' work trees and to the workspace.
const PROBE: &str = "echo 'gitdir: /tmp' > lib/sub/.git 2>/dev/null && echo wrote-dot-git-file; \
    rm -f lib/sub/.git 2>/dev/null && echo removed-dot-git-file; \
    printf '[core]\\nfsmonitor = touch /tmp/pwned\\n' >> .git/modules/lib/sub/config 2>/dev/null \
        && echo wrote-module-config; \
    touch .git/modules/lib/sub/hooks/post-checkout 2>/dev/null && echo wrote-module-hook; \
    printf '[core]\\nfsmonitor = x\\n' >> vendor/emb/.git/config 2>/dev/null && echo wrote-emb-config; \
    touch vendor/emb/.git/hooks/pre-commit 2>/dev/null && echo wrote-emb-hook; \
    mv vendor/emb/.git vendor/emb/.git-old 2>/dev/null && echo moved-emb-git; \
    mv lib/sub lib/sub-old 2>/dev/null && echo moved-sub; \
    mv lib lib-old 2>/dev/null && echo moved-lib; \
    mkdir empty-sub/.git 2>/dev/null && echo created-empty-git; \
    mv empty-sub empty-old 2>/dev/null && echo moved-empty; \
    echo x > lib/sub/control && echo wrote-sub-tree; \
    echo x > vendor/emb/control && echo wrote-emb-tree; \
    touch control && echo wrote-workspace";

#[test]
fn submodule_git_files_and_directories_are_read_only_inside_the_sandbox() {
    let (ws, _upstream) = workspace_with_submodules();
    let root = ws.path();
    let before = |path: &str| std::fs::read(root.join(path)).expect(path);
    let dot_git = before("lib/sub/.git");
    let module_config = before(".git/modules/lib/sub/config");
    let emb_config = before("vendor/emb/.git/config");

    let mut session = open(root);
    let out = stdout(&sh(&mut session, PROBE));
    drop(session);

    // The controls: the probe writes where nothing stops it, inside each submodule's work tree
    // too (the protection is the git directories, not the submodules' files).
    assert_eq!(
        out, "wrote-sub-tree\nwrote-emb-tree\nwrote-workspace\n",
        "only the controls succeed"
    );
    // Judged on the host.
    assert_eq!(before("lib/sub/.git"), dot_git);
    assert_eq!(before(".git/modules/lib/sub/config"), module_config);
    assert_eq!(before("vendor/emb/.git/config"), emb_config);
    for absent in [
        ".git/modules/lib/sub/hooks/post-checkout",
        "vendor/emb/.git/hooks/pre-commit",
        "vendor/emb/.git-old",
        "lib/sub-old",
        "lib-old",
        "empty-sub/.git",
        "empty-old",
    ] {
        assert!(!root.join(absent).exists(), "{absent} must not exist");
    }
}

#[test]
fn without_submodule_protection_the_same_probe_rewrites_a_nested_git_file() {
    // The control for the test above at the layer level: the same `.git` file, in a directory
    // that is not a gitlink in the index, is an ordinary workspace file.
    let (ws, _upstream) = workspace_with_submodules();
    let root = ws.path();
    std::fs::create_dir(root.join("plain")).expect("mkdir");
    std::fs::copy(root.join("lib/sub/.git"), root.join("plain/.git")).expect("copy");
    let mut session = open(root);
    let out = stdout(&sh(
        &mut session,
        "echo 'gitdir: /tmp' > plain/.git && echo wrote",
    ));
    drop(session);
    assert_eq!(out, "wrote\n");
    assert_eq!(
        std::fs::read_to_string(root.join("plain/.git")).expect("read"),
        "gitdir: /tmp\n"
    );
}

/// Gives the top-level git directory every entry `allow_git_mutations` protects.
fn add_protected_entries(git_dir: &Path) {
    std::fs::create_dir_all(git_dir.join("info")).expect("mkdir info");
    std::fs::create_dir_all(git_dir.join("hooks")).expect("mkdir hooks");
    std::fs::create_dir_all(git_dir.join("objects/info")).expect("mkdir objects/info");
    for file in ["config.worktree", "objects/info/alternates"] {
        std::fs::write(git_dir.join(file), "").expect("write");
    }
    std::fs::write(git_dir.join("commondir"), ".\n").expect("commondir");
}

#[test]
fn allowed_git_mutations_protect_a_submodule_git_directory_like_the_top_level_one() {
    let (ws, _upstream) = workspace_with_submodules();
    let root = ws.path();
    add_protected_entries(&root.join(".git"));
    add_protected_entries(&root.join("vendor/emb/.git"));
    let mutations = |root: &Path| {
        let config = allowing_git_mutations(root);
        Session::open(config)
    };
    // The submodule's git directory lacks them: refused, naming it.
    match mutations(root) {
        Err(SandboxError::GitMutations { path, .. }) => assert!(
            path.starts_with(
                root.canonicalize()
                    .expect("canonical")
                    .join(".git/modules/lib/sub")
            ),
            "{path:?}"
        ),
        Err(other) => panic!("wrong refusal: {other}"),
        Ok(_) => panic!("the session must be refused"),
    }
    add_protected_entries(&root.join(".git/modules/lib/sub"));
    let mut session = mutations(root).expect("the session opens");
    let out = stdout(&sh(
        &mut session,
        "echo x >> .git/modules/lib/sub/config 2>/dev/null && echo wrote-module-config; \
         echo x >> vendor/emb/.git/config 2>/dev/null && echo wrote-emb-config; \
         echo 'gitdir: /tmp' > lib/sub/.git 2>/dev/null && echo wrote-dot-git-file; \
         touch .git/modules/lib/sub/objects/new && echo wrote-module-objects; \
         touch vendor/emb/.git/objects/new && echo wrote-emb-objects",
    ));
    drop(session);
    // Objects are what mutations allow (the controls); config and the `.git` file stay put.
    assert_eq!(out, "wrote-module-objects\nwrote-emb-objects\n");
    assert!(
        !std::fs::read_to_string(root.join(".git/modules/lib/sub/config"))
            .expect("read")
            .ends_with("x\n")
    );
}

/// The submodule workspace with every protected entry the mounted git directories need, and
/// `lib/sub` deinitialised: its git directory stays in `.git/modules/lib/sub` (returned).
fn deinitialised() -> (tempfile::TempDir, tempfile::TempDir, PathBuf) {
    let (ws, upstream) = workspace_with_submodules();
    let root = ws.path();
    add_protected_entries(&root.join(".git"));
    add_protected_entries(&root.join("vendor/emb/.git"));
    git(root, &["submodule", "deinit", "-q", "-f", "lib/sub"]);
    let module = root.join(".git/modules/lib/sub");
    (ws, upstream, module)
}

#[test]
fn allowed_git_mutations_keep_a_deinitialised_submodule_git_directory_configuration_read_only() {
    // `git submodule deinit` leaves the module's git directory in `.git/modules/lib/sub`; no
    // gitlink leads to it any more, yet `git submodule update --init` on the host would adopt it,
    // config and all.
    let (ws, _upstream, module) = deinitialised();
    let root = ws.path();
    // Without a `commondir` to keep read-only the session is refused (see the next test); one
    // naming the directory itself changes nothing for git.
    std::fs::write(module.join("commondir"), ".\n").expect("commondir");
    let config_before = std::fs::read(module.join("config")).expect("the module config");
    let config = allowing_git_mutations(root);
    let mut session = Session::open(config).expect("the session opens");
    let out = stdout(&sh(
        &mut session,
        "printf '[core]\\nfsmonitor = x\\n' >> .git/modules/lib/sub/config 2>/dev/null \
             && echo wrote-module-config; \
         touch .git/modules/lib/sub/objects/new && echo wrote-module-objects; \
         touch .git/objects/new && echo wrote-objects",
    ));
    drop(session);
    // The controls: the module's objects and the top-level objects are writable.
    assert_eq!(out, "wrote-module-objects\nwrote-objects\n");
    assert_eq!(
        std::fs::read(module.join("config")).expect("the module config"),
        config_before
    );
}

#[test]
fn allowed_git_mutations_keep_a_module_configuration_read_only_after_its_head_is_deleted() {
    // Review 3, finding 6: session 1 deletes the deinitialised module's `HEAD` (allowed: the git
    // directory is writable), so that it no longer looks like a git directory; session 2 then
    // plants `core.fsmonitor` in its `config`, which `git submodule update` on the host would
    // adopt once `HEAD` is back.
    let (ws, _upstream, module) = deinitialised();
    let root = ws.path();
    std::fs::write(module.join("commondir"), ".\n").expect("commondir");
    let config_before = std::fs::read(module.join("config")).expect("the module config");
    let mutations = || {
        let config = allowing_git_mutations(root);
        Session::open(config).expect("the session opens")
    };
    let mut session = mutations();
    let out = stdout(&sh(
        &mut session,
        "rm .git/modules/lib/sub/HEAD && echo removed-head",
    ));
    drop(session);
    assert_eq!(out, "removed-head\n", "session 1 deletes HEAD");
    assert!(!module.join("HEAD").exists());

    let mut session = mutations();
    let out = stdout(&sh(
        &mut session,
        "printf '[core]\\nfsmonitor = x\\n' >> .git/modules/lib/sub/config 2>/dev/null \
             && echo wrote-module-config; \
         touch .git/modules/lib/sub/objects/new && echo wrote-module-objects",
    ));
    drop(session);
    // The control: the module's objects are still writable, as mutations allow.
    assert_eq!(out, "wrote-module-objects\n");
    assert_eq!(
        std::fs::read(module.join("config")).expect("the module config"),
        config_before
    );
}

#[test]
fn allowed_git_mutations_refuse_a_deinitialised_module_without_a_commondir_to_keep() {
    // Review of 2026-12-02, finding 2: a `commondir` created in a deinitialised module's git
    // directory is followed by `git submodule update --init` on the host.
    let (ws, _upstream, module) = deinitialised();
    let root = ws.path();
    match Session::open(allowing_git_mutations(root)) {
        Err(cordon_sandbox::SandboxError::GitMutations { path, problem }) => {
            assert!(path.ends_with("modules/lib/sub/commondir"), "{path:?}");
            assert_eq!(problem, "does not exist");
        }
        Err(other) => panic!("wrong refusal: {other}"),
        Ok(_) => panic!("the session must be refused"),
    }
    // The control: with the entry there to keep, the session opens and cannot change it.
    std::fs::write(module.join("commondir"), ".\n").expect("commondir");
    let mut session = Session::open(allowing_git_mutations(root)).expect("the session opens");
    let out = stdout(&sh(
        &mut session,
        "echo ../evil > .git/modules/lib/sub/commondir 2>/dev/null && echo wrote",
    ));
    drop(session);
    assert_eq!(out, "");
    assert_eq!(
        std::fs::read_to_string(module.join("commondir")).expect("read"),
        ".\n"
    );
}
