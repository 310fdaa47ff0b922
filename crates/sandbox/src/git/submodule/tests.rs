//! Submodule discovery over real repositories made with `git` in temporary directories.

use std::process::Command;

use super::*;
use crate::git::protection;

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.test"])
        .args([
            "-c",
            "protocol.file.allow=always",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?}");
}

/// A repository with one commit, in a fresh temporary directory.
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "."]);
    fs::write(dir.path().join("file"), "x").unwrap();
    git(dir.path(), &["add", "file"]);
    git(dir.path(), &["commit", "-q", "-m", "one"]);
    dir
}

/// A workspace holding a real submodule at `lib/sub` (its `.git` a `gitdir:` file naming
/// `.git/modules/lib/sub`), whose upstream has a submodule of its own at `inner`.
fn with_submodule() -> (tempfile::TempDir, tempfile::TempDir, tempfile::TempDir) {
    let inner = repo();
    let upstream = repo();
    git(
        upstream.path(),
        &[
            "submodule",
            "add",
            "-q",
            inner.path().to_str().unwrap(),
            "inner",
        ],
    );
    git(upstream.path(), &["commit", "-q", "-m", "inner"]);
    let ws = repo();
    git(
        ws.path(),
        &[
            "submodule",
            "add",
            "-q",
            upstream.path().to_str().unwrap(),
            "lib/sub",
        ],
    );
    git(
        ws.path(),
        &["submodule", "update", "-q", "--init", "--recursive"],
    );
    (ws, upstream, inner)
}

fn found(ws: &Path) -> Result<Vec<Submodule>, GitError> {
    protection(ws).map(|p| p.submodules)
}

#[test]
fn a_real_submodule_and_its_nested_one_are_found_with_their_git_directories() {
    let (ws, _upstream, _inner) = with_submodule();
    let ws = ws.path().canonicalize().unwrap();
    let modules = ws.join(".git/modules/lib/sub");
    let expected = vec![
        Submodule {
            path: ws.join("lib/sub"),
            git: SubmoduleGit::File {
                file: ws.join("lib/sub/.git"),
                git_dir: Some(modules.clone()),
            },
        },
        Submodule {
            path: ws.join("lib/sub/inner"),
            git: SubmoduleGit::File {
                file: ws.join("lib/sub/inner/.git"),
                git_dir: Some(modules.join("modules/inner")),
            },
        },
    ];
    assert_eq!(found(&ws).unwrap(), expected);
}

#[test]
fn each_kind_of_gitlink_path_is_classified_or_refused() {
    let (ws, _upstream, _inner) = with_submodule();
    let ws = ws.path().canonicalize().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let sub = ws.join("lib/sub");
    let first = |ws: &Path| found(ws).map(|s| s.into_iter().next().map(|s| s.git));
    // Each row changes the checked-out submodule, then says what discovery must make of it.
    type Change = Box<dyn Fn()>;
    type Row = (
        &'static str,
        Change,
        Result<Option<SubmoduleGit>, &'static str>,
    );
    let rows: Vec<Row> = vec![
        (
            "a `.git` naming a directory outside everything is kept but its target not mounted",
            Box::new({
                let (sub, out) = (sub.clone(), outside.path().to_path_buf());
                move || fs::write(sub.join(".git"), format!("gitdir: {}\n", out.display())).unwrap()
            }),
            Ok(Some(SubmoduleGit::File {
                file: sub.join(".git"),
                git_dir: None,
            })),
        ),
        (
            "a `.git` directory is a git directory",
            Box::new({
                let sub = sub.clone();
                move || {
                    fs::remove_file(sub.join(".git")).unwrap();
                    fs::create_dir(sub.join(".git")).unwrap();
                }
            }),
            Ok(Some(SubmoduleGit::Dir(sub.join(".git")))),
        ),
        (
            "no `.git` keeps the directory read-only",
            Box::new({
                let sub = sub.clone();
                move || fs::remove_dir(sub.join(".git")).unwrap()
            }),
            Ok(Some(SubmoduleGit::Missing { is_dir: true })),
        ),
        (
            "a symlinked `.git` is refused",
            Box::new({
                let sub = sub.clone();
                move || std::os::unix::fs::symlink("/tmp", sub.join(".git")).unwrap()
            }),
            Err("symlinked .git"),
        ),
        (
            "a symlinked parent directory is refused",
            Box::new({
                let (ws, out) = (ws.clone(), outside.path().to_path_buf());
                move || {
                    fs::rename(ws.join("lib"), out.join("lib")).unwrap();
                    std::os::unix::fs::symlink(out.join("lib"), ws.join("lib")).unwrap();
                }
            }),
            Err("symlinked submodule"),
        ),
        (
            "an absent gitlink path is left out",
            Box::new({
                let ws = ws.clone();
                move || fs::remove_file(ws.join("lib")).unwrap()
            }),
            Ok(None),
        ),
        (
            "a file at the gitlink path is kept read-only",
            Box::new({
                let ws = ws.clone();
                move || {
                    fs::create_dir(ws.join("lib")).unwrap();
                    fs::write(ws.join("lib/sub"), "").unwrap();
                }
            }),
            Ok(Some(SubmoduleGit::Missing { is_dir: false })),
        ),
    ];
    for (what, change, expected) in rows {
        change();
        let actual = first(&ws);
        match (actual, expected) {
            (Ok(actual), Ok(expected)) => assert_eq!(actual, expected, "{what}"),
            (Err(GitError::SymlinkedDotGit { .. }), Err("symlinked .git")) => {
                fs::remove_file(sub.join(".git")).unwrap();
            }
            (Err(GitError::SymlinkedSubmodule { .. }), Err("symlinked submodule")) => {}
            (actual, expected) => panic!("{what}: got {actual:?}, want {expected:?}"),
        }
    }
}

#[test]
fn an_index_cordon_cannot_parse_or_read_refuses_the_session() {
    let ws = repo();
    let index = ws.path().join(".git/index");
    fs::write(&index, b"DIRC\0\0\0\x09garbage").unwrap();
    assert!(
        matches!(found(ws.path()), Err(GitError::Index { .. })),
        "unknown version"
    );
    fs::remove_file(&index).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &index).unwrap();
    assert!(
        matches!(found(ws.path()), Err(GitError::Read { .. })),
        "a symlinked index"
    );
    fs::remove_file(&index).unwrap();
    assert_eq!(found(ws.path()).unwrap(), Vec::new(), "no index at all");
}

#[test]
fn more_gitlinks_than_cordon_protects_refuse_the_session() {
    let ws = repo();
    let names: Vec<String> = (0..=MAX_SUBMODULES).map(|n| format!("m/{n}")).collect();
    add_gitlinks(ws.path(), &names);
    for n in 0..=MAX_SUBMODULES {
        fs::create_dir_all(ws.path().join(format!("m/{n}"))).unwrap();
    }
    assert!(matches!(
        found(ws.path()),
        Err(GitError::TooManySubmodules {
            limit: MAX_SUBMODULES
        })
    ));
    // At the limit itself, every one is found.
    git(
        ws.path(),
        &[
            "update-index",
            "--force-remove",
            &format!("m/{MAX_SUBMODULES}"),
        ],
    );
    assert_eq!(found(ws.path()).unwrap().len(), MAX_SUBMODULES);
}

/// A repository with embedded repositories nested `levels` deep (`n/n/n...`), each registered as
/// a gitlink in the index of the one above.
fn nested_chain(levels: usize) -> tempfile::TempDir {
    let ws = repo();
    let oid = "0123456789abcdef0123456789abcdef01234567";
    let mut dir = ws.path().to_path_buf();
    for _ in 0..levels {
        let child = dir.join("n");
        fs::create_dir(&child).unwrap();
        git(&child, &["init", "-q", "."]);
        git(
            &dir,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("160000,{oid},n"),
            ],
        );
        dir = child;
    }
    ws
}

#[test]
fn submodules_nested_deeper_than_cordon_follows_refuse_the_session() {
    let ws = nested_chain(MAX_DEPTH);
    assert_eq!(found(ws.path()).unwrap().len(), MAX_DEPTH, "at the limit");
    let ws = nested_chain(MAX_DEPTH + 1);
    match found(ws.path()) {
        Err(GitError::TooDeep { limit, path }) => {
            assert_eq!(limit, MAX_DEPTH);
            assert!(path.ends_with("n/n/n/n/n/n/n/n"), "{path:?}");
        }
        other => panic!("must refuse, got {other:?}"),
    }
}

#[test]
fn a_split_index_whose_gitlink_was_replaced_still_lists_it() {
    // The reviewer's case: after `--split-index`, a new commit in the submodule and `git add`
    // write the gitlink as a replacement (empty name) in the split part.
    let (ws, _upstream, _inner) = with_submodule();
    let ws = ws.path().canonicalize().unwrap();
    git(&ws, &["update-index", "--split-index"]);
    let sub = ws.join("lib/sub");
    fs::write(sub.join("more"), "y").unwrap();
    git(&sub, &["add", "more"]);
    git(&sub, &["commit", "-q", "-m", "two"]);
    git(
        &ws,
        &["-c", "splitIndex.maxPercentChange=100", "add", "lib/sub"],
    );
    let split = crate::git::index::parse(&fs::read(ws.join(".git/index")).unwrap()).unwrap();
    let shared = split.shared.expect("a split index");
    assert_eq!(shared.replaced.len(), 1, "the gitlink is a replacement");
    let paths: Vec<PathBuf> = found(&ws).unwrap().into_iter().map(|s| s.path).collect();
    assert_eq!(paths, vec![sub.clone(), sub.join("inner")]);
}

/// Adds gitlinks at `names` to the index of the repository at `ws`, through git itself.
fn add_gitlinks(ws: &Path, names: &[String]) {
    let oid = "0123456789abcdef0123456789abcdef01234567";
    let lines: String = names
        .iter()
        .map(|name| format!("160000 {oid}\t{name}\n"))
        .collect();
    let mut child = Command::new("git")
        .args(["update-index", "--index-info"])
        .current_dir(ws)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), lines.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());
}

#[test]
fn gitlink_paths_too_deep_or_below_too_many_directories_refuse_the_session() {
    let chain = |first: &str, levels: usize| format!("{first}{}", "/d".repeat(levels - 1));
    // One past the depth limit is refused; the limit itself is accepted.
    let ws = repo();
    add_gitlinks(ws.path(), &[chain("a", MAX_COMPONENTS + 1)]);
    match found(ws.path()) {
        Err(GitError::PathTooDeep { limit, .. }) => assert_eq!(limit, MAX_COMPONENTS),
        other => panic!("must refuse, got {other:?}"),
    }
    let ws = repo();
    let at_limit = chain("a", MAX_COMPONENTS);
    add_gitlinks(ws.path(), std::slice::from_ref(&at_limit));
    fs::create_dir_all(ws.path().join(&at_limit)).unwrap();
    assert_eq!(found(ws.path()).unwrap().len(), 1, "at the limit");
    // Disjoint chains: 65 × 255 directories between the workspace and the gitlinks.
    let ws = repo();
    let names: Vec<String> = (0..65)
        .map(|n| chain(&format!("c{n}"), MAX_COMPONENTS))
        .collect();
    add_gitlinks(ws.path(), &names);
    for name in &names {
        fs::create_dir_all(ws.path().join(name)).unwrap();
    }
    match found(ws.path()) {
        Err(GitError::TooManyDirectories { limit }) => assert_eq!(limit, MAX_DIRECTORIES),
        other => panic!("must refuse, got {other:?}"),
    }
}

#[test]
fn indexes_larger_than_cordon_reads_refuse_the_session_naming_the_fix() {
    let ws = repo();
    let index = ws.path().join(".git/index");
    // Sparse: no disk is used, and the size is refused before anything is read.
    fs::File::options()
        .write(true)
        .open(&index)
        .unwrap()
        .set_len(MAX_INDEX + 1)
        .unwrap();
    match found(ws.path()) {
        Err(error @ GitError::IndexTooLarge { .. }) => {
            assert!(error.to_string().contains("git sparse-checkout"), "{error}");
        }
        other => panic!("must refuse, got {other:?}"),
    }
    // All indexes together: a budget already spent refuses the next one, however small.
    let ws = repo();
    let mut budget = IndexBudget {
        read: MAX_INDEX_BYTES,
    };
    match read_index(&ws.path().join(".git/index"), &mut budget) {
        Err(error @ GitError::IndexesTooLarge { .. }) => {
            assert!(
                error.to_string().contains("git submodule deinit"),
                "{error}"
            );
        }
        other => panic!("must refuse, got {other:?}"),
    }
}

#[test]
fn a_superproject_index_is_read_whatever_the_workspace_root_holds() {
    // Review 3, finding 1: a `.git` at the root of a workspace inside a superproject (planted
    // by an earlier session) must not switch off the superproject's gitlinks under it.
    let (top, _upstream, _inner) = with_submodule();
    let top = top.path().canonicalize().unwrap();
    let ws = top.join("lib");
    for plant in ["dir", "file", "none"] {
        let _ = fs::remove_dir(ws.join(".git"));
        let _ = fs::remove_file(ws.join(".git"));
        match plant {
            "dir" => fs::create_dir(ws.join(".git")).unwrap(),
            "file" => fs::write(ws.join(".git"), "junk\n").unwrap(),
            _ => {}
        }
        let paths: Vec<PathBuf> = found(&ws).unwrap().into_iter().map(|s| s.path).collect();
        assert!(paths.contains(&ws.join("sub")), "{plant}: {paths:?}");
    }
}

#[test]
fn a_superproject_with_more_gitlinks_elsewhere_than_cordon_protects_still_opens_below_it() {
    // Review 3, finding 5: only the gitlinks inside the workspace count.
    let top = repo();
    let mut names: Vec<String> = (0..=MAX_SUBMODULES).map(|n| format!("m/{n}")).collect();
    names.push("libs/sub".into());
    add_gitlinks(top.path(), &names);
    let ws = top.path().canonicalize().unwrap().join("libs");
    fs::create_dir_all(ws.join("sub")).unwrap();
    let paths: Vec<PathBuf> = found(&ws).unwrap().into_iter().map(|s| s.path).collect();
    assert_eq!(paths, vec![ws.join("sub")]);
    // The control: from the superproject's top, they all count and the session is refused.
    assert!(matches!(
        found(top.path()),
        Err(GitError::TooManySubmodules { .. })
    ));
}
