//! The git directories nested inside a git directory — submodules' under `modules/` (at any
//! depth, deinitialised ones included) and linked worktrees' under `worktrees/` — whose
//! configuration must stay read-only when `allow_git_mutations` makes the git directory itself
//! writable.
//!
//! Why: the mount plan keeps [`PROTECTED`](super::PROTECTED) read-only in every git directory it
//! mounts, but it mounts only the git directories a gitlink or `.git` file leads to. A
//! deinitialised submodule keeps its git directory in `modules/<name>`, which `git submodule
//! update` on the host adopts again, config and hooks included; a worktree's administrative
//! directory holds the `commondir` and `config.worktree` git reads in that worktree, and the
//! `gitdir` record cordon itself trusts (`worktree.rs`). All of them lie inside the writable git
//! directory. Only existing entries can be kept read-only (a mount needs something to cover), so
//! the entries git would obey if a sandbox created them are required, and the session refused
//! when one is missing (review of 2026-12-02, finding 2): `commondir` in every module git
//! directory (a deinitialised module's, which `git submodule update --init` follows), and in
//! every worktree's administrative directory `commondir`, `gitdir` and — when the common
//! `config` enables `extensions.worktreeConfig` — `config.worktree`.

use std::fs;
use std::path::{Path, PathBuf};

use super::{GitError, MAX_SUBMODULES, PROTECTED};

/// The directories of a git directory not walked for nested git directories: they hold no
/// configuration git reads (`objects/info/alternates` is protected through [`PROTECTED`] at each
/// git directory) and may hold thousands of entries.
const SKIPPED: [&str; 4] = ["objects", "refs", "logs", "worktrees"];

/// The entries below `git_dir` to keep read-only (see the module documentation), not `git_dir`'s
/// own [`PROTECTED`] ones: the existing ones, and the required ones whether they exist or not
/// (the caller refuses a missing one). Symlinks are returned too: the caller refuses them, since
/// a mount would follow one.
pub fn protected_below(git_dir: &Path) -> Result<Vec<PathBuf>, GitError> {
    let mut found = Vec::new();
    worktree_entries(git_dir, &mut found)?;
    // Directories to look at under `modules/`. Module names may hold slashes, so a directory
    // there is a git directory or one level of a name — and which one cannot be told from
    // `HEAD`: under `allow_git_mutations` the sandbox may delete a module's `HEAD` (review 3,
    // finding 6), the directory stops looking like a git directory, its `config` is left
    // writable, and once `HEAD` is back (`git submodule update` on the host) git adopts the
    // planted configuration. So every directory visited keeps its existing protected entries
    // read-only, whatever it looks like, and the walk goes on below it — except into the parts
    // of a git directory that hold no configuration and may be huge (`objects`, `refs`,
    // `logs`), the protected entries themselves (already read-only as a whole), and
    // `worktrees/` (its entries are protected by `worktree_entries`).
    let mut pending = vec![git_dir.join("modules")];
    // A forged tree of millions of directories must not make the host walk it all; a real
    // module directory has a handful of directories besides the skipped ones.
    let mut budget = 8 * MAX_SUBMODULES;
    while let Some(dir) = pending.pop() {
        if budget == 0 {
            return Err(GitError::TooManySubmodules {
                limit: MAX_SUBMODULES,
            });
        }
        budget -= 1;
        // Not following links: a link here is returned (when it stands at a protected entry's
        // name; the caller refuses it) or skipped (git would follow it, but then it names a
        // directory outside this one, which cordon does not mount writable).
        if !fs::symlink_metadata(&dir).is_ok_and(|meta| meta.is_dir()) {
            continue;
        }
        found.extend(existing(&dir, &PROTECTED));
        // A module's git directory (its `config` is read-only, so it cannot stop looking like
        // one): the `commondir` git would follow must exist to be kept read-only.
        if fs::symlink_metadata(dir.join("config")).is_ok() {
            let commondir = dir.join("commondir");
            if !found.contains(&commondir) {
                found.push(commondir);
            }
            if enables_worktree_config(&dir.join("config")) {
                let worktree = dir.join("config.worktree");
                if !found.contains(&worktree) {
                    found.push(worktree);
                }
            }
        }
        worktree_entries(&dir, &mut found)?;
        let entries = fs::read_dir(&dir).map_err(|source| GitError::Read {
            path: dir.clone(),
            source,
        })?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let skipped = SKIPPED.iter().any(|skip| name == *skip)
                || PROTECTED.iter().any(|protected| name == *protected);
            if !skipped && entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                pending.push(entry.path());
            }
        }
    }
    Ok(found)
}

/// Adds what every `git_dir/worktrees/<name>/` must keep read-only: `commondir`, `gitdir`, and
/// `config.worktree` when it exists or git would read it.
fn worktree_entries(git_dir: &Path, found: &mut Vec<PathBuf>) -> Result<(), GitError> {
    let Ok(entries) = fs::read_dir(git_dir.join("worktrees")) else {
        return Ok(());
    };
    let worktree_config = enables_worktree_config(&git_dir.join("config"));
    for (n, entry) in entries.flatten().enumerate() {
        if n >= MAX_SUBMODULES {
            return Err(GitError::TooManySubmodules {
                limit: MAX_SUBMODULES,
            });
        }
        // A link in place of an administrative directory is none git made; what it names is
        // outside this git directory and not mounted writable.
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            let dir = entry.path();
            // Required (a missing one is refused by the caller): what git reads in that
            // worktree, `config.worktree` only when git reads it at all.
            found.push(dir.join("commondir"));
            found.push(dir.join("gitdir"));
            let worktree = dir.join("config.worktree");
            if worktree_config || fs::symlink_metadata(&worktree).is_ok() {
                found.push(worktree);
            }
        }
    }
    Ok(())
}

/// Whether the git `config` at `path` may enable `extensions.worktreeConfig` (then git reads a
/// `config.worktree` beside each worktree's directory). Conservative: the word anywhere, in any
/// case, in the first 1 MiB; a config that cannot be read counts as enabling it.
fn enables_worktree_config(path: &Path) -> bool {
    use std::io::Read;
    let Ok(meta) = fs::symlink_metadata(path) else {
        return false;
    };
    if !meta.is_file() {
        return true;
    }
    let mut text = Vec::new();
    let read = fs::File::open(path).and_then(|file| file.take(1 << 20).read_to_end(&mut text));
    read.is_err()
        || text
            .to_ascii_lowercase()
            .windows(b"worktreeconfig".len())
            .any(|w| w == b"worktreeconfig")
}

/// The `names` under `dir` that exist (as anything, links included).
fn existing(dir: &Path, names: &[&str]) -> Vec<PathBuf> {
    names
        .iter()
        .map(|name| dir.join(name))
        .filter(|path| fs::symlink_metadata(path).is_ok())
        .collect()
}
