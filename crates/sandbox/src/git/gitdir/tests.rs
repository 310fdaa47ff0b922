//! The `gitdir:` grammar as git reads it, and path resolution over real directories: every
//! route the sandbox could change is refused, every route it cannot is followed.

use std::os::unix::fs::symlink;

use super::*;

#[test]
fn gitdir_files_parse_exactly_like_git_reads_them() {
    // Each row: the file's bytes, the path git would use (`None`: git refuses the file).
    let rows: [(&[u8], Option<&str>); 13] = [
        (
            b"gitdir: ../main/.git/worktrees/a\n",
            Some("../main/.git/worktrees/a"),
        ),
        (b"gitdir: /abs\r\n", Some("/abs")),
        (b"gitdir: /abs", Some("/abs")),
        (b"gitdir: /abs\n\n\r\n", Some("/abs")),
        // One space exactly: a second one is part of the path.
        (b"gitdir:  ../x\n", Some(" ../x")),
        (b"gitdir: ../x \n", Some("../x ")),
        // A second line is part of the path too.
        (b"gitdir: a\nb\n", Some("a\nb")),
        // A NUL ends the path (git treats it as a C string).
        (b"gitdir: a\0b\n", Some("a")),
        (b"gitdir:../x\n", None),
        (b"GITDIR: x\n", None),
        (b"gitdir: \n", None),
        (b" gitdir: x\n", None),
        (b"", None),
    ];
    for (bytes, expected) in rows {
        let actual = parse(bytes).map(|p| p.to_str().expect("utf-8"));
        assert_eq!(actual, expected, "{:?}", String::from_utf8_lossy(bytes));
    }
}

/// A workspace `ws` and a directory `out` beside it, canonical, with:
/// `ws/.git/modules/sub` (a module git directory), `ws/lib/sub` (a gitlink), `ws/other`,
/// `out/git` (a git directory outside), `out/link-in` → `ws/other`, `out/link-out` → `out/git`.
fn tree() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let base = root.path().canonicalize().unwrap();
    let (ws, out) = (base.join("ws"), base.join("out"));
    for dir in [".git/modules/sub", "lib/sub", "other/deep"] {
        fs::create_dir_all(ws.join(dir)).unwrap();
    }
    fs::create_dir_all(out.join("git")).unwrap();
    fs::write(ws.join("file"), "").unwrap();
    symlink(ws.join("other"), out.join("link-in")).unwrap();
    symlink(out.join("git"), out.join("link-out")).unwrap();
    symlink("../.git", ws.join("lib/dot-git-link")).unwrap();
    (root, ws, out)
}

#[test]
fn named_directories_resolve_only_on_routes_the_sandbox_cannot_change() {
    let (_root, ws, out) = tree();
    let sub = ws.join("lib/sub");
    type Expected = Result<Option<PathBuf>, &'static str>;
    // Each row: the path in `lib/sub/.git`, where it leads (`None`: nothing git could use).
    let rows: Vec<(&str, Expected)> = vec![
        (
            "../../.git/modules/sub",
            Ok(Some(ws.join(".git/modules/sub"))),
        ),
        (
            &*Box::leak(
                ws.join(".git/modules/sub")
                    .display()
                    .to_string()
                    .into_boxed_str(),
            ),
            Ok(Some(ws.join(".git/modules/sub"))),
        ),
        ("../../../out/git", Ok(Some(out.join("git")))),
        // A link outside the workspace is the host's: followed.
        ("../../../out/link-out", Ok(Some(out.join("git")))),
        // Missing outside: git cannot use it and the sandbox cannot create it.
        ("../../../out/absent", Ok(None)),
        ("../../../out/absent/../git", Ok(None)),
        // Missing, or a file, inside: the sandbox could create a directory there.
        ("../../.gitsub", Err("missing")),
        ("../../file", Err("missing")),
        ("../../file/x", Err("missing")),
        // A link inside the workspace: the sandbox can repoint it.
        ("../dot-git-link/modules/sub", Err("symlink")),
        // A link outside that leads back in, through a directory the plan does not pin.
        ("../../../out/link-in/../.git/modules/sub", Err("detour")),
        // ... or into the directory mounted (which pins those above it).
        ("../../../out/link-in/deep", Ok(Some(ws.join("other/deep")))),
        // Through a directory the plan does not pin, and back out of it.
        ("../../other/deep/../../.git/modules/sub", Err("detour")),
        ("../../other/../.git/modules/sub", Err("detour")),
        // Into a directory and on to a directory inside it: it is mounted, so pinned.
        ("../../other/deep", Ok(Some(ws.join("other/deep")))),
        // The `.git` file's own directories are pinned (they hold a mount point).
        (
            "../sub/../../.git/modules/sub",
            Ok(Some(ws.join(".git/modules/sub"))),
        ),
        (".", Ok(Some(sub.clone()))),
    ];
    for (named, expected) in rows {
        let actual = resolve(&ws, &sub, OsStr::new(named));
        match (actual, expected) {
            (Ok(Named::Dir(dir)), Ok(Some(want))) => assert_eq!(dir, want, "{named}"),
            (Ok(Named::Nothing), Ok(None)) => {}
            (Err(GitFileProblem::Missing { .. }), Err("missing"))
            | (Err(GitFileProblem::Symlink { .. }), Err("symlink"))
            | (Err(GitFileProblem::Detour { .. }), Err("detour")) => {}
            (actual, expected) => panic!("{named}: got {actual:?}, want {expected:?}"),
        }
    }
}

#[test]
fn a_symlink_loop_is_refused() {
    let (_root, ws, out) = tree();
    // Relative targets: each turn costs one component, so the link count, not the depth cap
    // (`a_path_deeper_than_cordon_walks_is_refused`), is what stops it.
    symlink("b", out.join("a")).unwrap();
    symlink("a", out.join("b")).unwrap();
    assert_eq!(
        resolve(&ws, &ws, out.join("a").as_os_str()),
        Err(GitFileProblem::Loop)
    );
}

#[test]
fn a_path_deeper_than_cordon_walks_is_refused() {
    let (_root, ws, out) = tree();
    let at_limit = out.join("d/".repeat(MAX_WALK - out.components().count() + 1));
    fs::create_dir_all(at_limit.join("d")).unwrap();
    assert_eq!(
        resolve(&ws, &ws, at_limit.as_os_str()),
        Ok(Named::Dir(at_limit.clone())),
        "at the limit"
    );
    assert_eq!(
        resolve(&ws, &ws, at_limit.join("d").as_os_str()),
        Err(GitFileProblem::TooDeep)
    );
}
