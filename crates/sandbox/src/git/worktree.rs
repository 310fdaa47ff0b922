//! Finding the linked worktrees a git directory has registered (`git worktree add`), so that one
//! placed inside the workspace gets its `.git` file protected like a submodule's.
//!
//! Why: a linked worktree's `.git` is a `gitdir:` file in its work tree. Inside the workspace the
//! sandbox could repoint it at a directory it made, with a `core.fsmonitor` that `git status` in
//! that worktree on the host would run. Git records every linked worktree in the common directory
//! as `worktrees/<name>/gitdir`, holding the path of the worktree's `.git` file: absolute, or
//! (git ≥ 2.48, `worktree.useRelativePaths`) relative to `worktrees/<name>/`. That
//! record lives in the git directory — read-only inside the sandbox, and with
//! `allow_git_mutations` `worktrees/` stays read-only as a whole (`PROTECTED_IF_PRESENT`) — so
//! it cannot be erased to drop a worktree from the next session's protection.

use std::collections::HashSet;
use std::fs;
use std::path::{Component, Path, PathBuf};

use super::{GitError, MAX_SUBMODULES, read_pointer};

/// The work trees of the linked worktrees registered in `git_dir` and in its common directory
/// (which `git_dir/commondir` names, for a worktree's or submodule's own git directory). Whether
/// each lies inside the workspace is the caller's to decide. A record is absolute, or relative to
/// its administrative directory (git ≥ 2.48); one cordon cannot interpret refuses the session.
pub fn linked(workspace: &Path, git_dir: &Path) -> Result<Vec<PathBuf>, GitError> {
    let mut commons = vec![git_dir.to_path_buf()];
    // Reading only: the common directory chooses which workspace paths get protected, never
    // what is mounted, so it is followed wherever it points.
    if let Some(text) = read_pointer(&git_dir.join("commondir"))?
        && let Ok(common) = git_dir
            .join(text.trim_end_matches(['\n', '\r']))
            .canonicalize()
        && !commons.contains(&common)
    {
        commons.push(common);
    }
    let mut found = Vec::new();
    // Each work tree once, through a hash set (not a scan of `found` per record).
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut read = 0usize;
    for common in commons {
        let Ok(entries) = fs::read_dir(common.join("worktrees")) else {
            continue;
        };
        for entry in entries {
            let entry = entry.map_err(|source| GitError::Read {
                path: common.join("worktrees"),
                source,
            })?;
            // A forged directory with millions of entries must not make the host do unbounded
            // work: past the limit the session is refused like too many gitlinks.
            read += 1;
            if read > MAX_SUBMODULES {
                return Err(GitError::TooManySubmodules {
                    limit: MAX_SUBMODULES,
                });
            }
            let record = entry.path().join("gitdir");
            let Some(text) = read_pointer(&record)? else {
                continue;
            };
            let named = Path::new(text.trim_end_matches(['\n', '\r']));
            // Git ≥ 2.48 may write the record relative to the administrative directory
            // (`worktree.useRelativePaths`): `../../../wt1/.git` from `<common>/worktrees/<name>/`.
            // Resolved the same way here; skipping such records left those worktrees unprotected
            // (review 3, finding 2).
            let dot_git = match resolve(workspace, &entry.path(), named) {
                Record::Path(path) => path,
                // Outside the workspace and absent: nothing the sandbox can reach.
                Record::Elsewhere => continue,
                Record::Unreadable => {
                    return Err(GitError::WorktreeRecord { path: record });
                }
            };
            // Not a record git writes (it always names a `.git`): cordon cannot tell which
            // work tree it stands for, so it refuses rather than guess.
            let work_tree = match dot_git.parent() {
                Some(parent) if dot_git.file_name().is_some_and(|name| name == ".git") => parent,
                _ => return Err(GitError::WorktreeRecord { path: record }),
            };
            if seen.insert(work_tree.to_path_buf()) {
                found.push(work_tree.to_path_buf());
            }
        }
    }
    Ok(found)
}

/// What a worktree record names.
#[derive(Debug, PartialEq, Eq)]
enum Record {
    /// The `.git` path, with the part outside the workspace canonical (links there followed:
    /// the sandbox cannot change them) and the part inside it plain (`in_workspace` checks it
    /// for links).
    Path(PathBuf),
    /// Outside the workspace, and missing there: no route into the workspace.
    Elsewhere,
    /// A record with `..` inside the workspace, or a link loop: not one git writes.
    Unreadable,
}

/// Resolves the record `named` against the administrative directory `admin` (canonical, like
/// every directory listed from a canonical common directory), as git does for a relative record.
/// Outside the workspace each component is canonicalised as it is added, so a record reaching the
/// workspace through a symlink outside it (`/home/u/link/wt/.git`, `link` → the workspace's
/// parent) still lands on the workspace path that `in_workspace` compares against.
fn resolve(workspace: &Path, admin: &Path, named: &Path) -> Record {
    let mut current = if named.is_absolute() {
        PathBuf::from("/")
    } else {
        admin.to_path_buf()
    };
    let inside = |path: &Path| path.starts_with(workspace);
    for component in named.components() {
        match component {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                // Climbing the administrative directory's own (canonical) path is what a
                // relative record does. Past a component the record added inside the workspace,
                // a `..` could climb out of a directory the sandbox replaced with a link; git
                // never writes one there.
                if inside(&current) && current != workspace && !admin.starts_with(&current) {
                    return Record::Unreadable;
                }
                current.pop();
            }
            Component::Normal(name) => {
                if inside(&current) {
                    current.push(name);
                    continue;
                }
                let next = current.join(name);
                // Outside the workspace (`next` is inside only when it is the workspace, which
                // exists): a missing component there cannot lead into it.
                current = match next.canonicalize() {
                    Ok(canonical) => canonical,
                    Err(_) => return Record::Elsewhere,
                };
            }
        }
    }
    Record::Path(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worktree_records_resolve_like_git_reads_them() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let ws = root.join("ws");
        let admin = root.join("repo/.git/worktrees/feat");
        fs::create_dir_all(&admin).unwrap();
        fs::create_dir_all(ws.join("wt1")).unwrap();
        std::os::unix::fs::symlink(&root, root.join("link")).unwrap();
        // Each row: the record, what it resolves to.
        let in_ws_admin = ws.join(".git/worktrees/feat");
        fs::create_dir_all(&in_ws_admin).unwrap();
        assert_eq!(
            resolve(&ws, &in_ws_admin, Path::new("../../../wt1/.git")),
            Record::Path(ws.join("wt1/.git")),
            "an administrative directory inside the workspace"
        );
        let rows: [(String, Record); 6] = [
            (
                "../../../../ws/wt1/.git".into(),
                Record::Path(ws.join("wt1/.git")),
            ),
            (
                format!("{}/ws/wt1/.git", root.display()),
                Record::Path(ws.join("wt1/.git")),
            ),
            (
                "../../../../link/ws/wt1/.git".into(),
                Record::Path(ws.join("wt1/.git")),
            ),
            ("../../../../ws/wt1/../x/.git".into(), Record::Unreadable),
            ("../../../../missing/wt/.git".into(), Record::Elsewhere),
            (
                "../../../../ws/new/.git".into(),
                Record::Path(ws.join("new/.git")),
            ),
        ];
        for (record, expected) in rows {
            assert_eq!(
                resolve(&ws, &admin, Path::new(&record)),
                expected,
                "{record}"
            );
        }
    }

    #[test]
    fn a_worktree_record_cordon_cannot_interpret_refuses_the_session() {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().canonicalize().unwrap();
        let git_dir = ws.join(".git");
        fs::create_dir_all(git_dir.join("worktrees/feat")).unwrap();
        fs::create_dir_all(ws.join("wt1")).unwrap();
        let record = git_dir.join("worktrees/feat/gitdir");
        for text in ["../../../wt1/../x/.git\n", "../../../wt1/not-git\n"] {
            fs::write(&record, text).unwrap();
            match linked(&ws, &git_dir) {
                Err(error @ GitError::WorktreeRecord { .. }) => {
                    assert!(error.to_string().contains("git worktree prune"), "{error}");
                }
                other => panic!("{text}: must refuse, got {other:?}"),
            }
        }
        // The control: the record as git ≥ 2.48 writes it.
        fs::write(&record, "../../../wt1/.git\n").unwrap();
        assert_eq!(linked(&ws, &git_dir).unwrap(), vec![ws.join("wt1")]);
    }
}
