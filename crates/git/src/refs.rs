//! HEAD and the branch it names, read by cordon through the git directories' views — a regular
//! file reached without following a link, bounded — and parsed here, so a ref a step replaced
//! with a link, a FIFO or a device (`allow_git_mutations`) is refused, never followed, and its
//! bytes never appear in a message. gitoxide's ref store is used only for the transaction that
//! moves HEAD, after [`Repo::refuse_links`] has checked every file it touches.

use cordon_workspace::{View, ViewError, WsPath};
use gix_hash::ObjectId;

use crate::GitError;
use crate::repo::Repo;

/// The most bytes of a loose ref file cordon reads (a ref is one line).
pub(crate) const MAX_REF: usize = 4 << 10;
/// The most bytes of `packed-refs` cordon reads.
pub(crate) const MAX_PACKED_REFS: usize = 64 << 20;
/// How many symbolic refs are followed from HEAD.
const MAX_SYMBOLIC: usize = 5;

/// What a ref names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Object(ObjectId),
    Symbolic(String),
}

impl Repo {
    /// The commit `HEAD` names.
    pub fn head(&self) -> Result<ObjectId, GitError> {
        self.check_pinned()?;
        self.refuse_planted_objects()?;
        let mut name = String::from("HEAD");
        for _ in 0..MAX_SYMBOLIC {
            match self.read_ref(&name)?.ok_or(GitError::NoHead)? {
                Target::Object(id) => return Ok(id),
                Target::Symbolic(next) => name = next,
            }
        }
        Err(GitError::NoHead)
    }

    /// The branch HEAD names (`refs/heads/main`), `None` when HEAD is detached.
    pub(crate) fn head_branch(&self) -> Result<Option<String>, GitError> {
        Ok(match self.read_ref("HEAD")?.ok_or(GitError::NoHead)? {
            Target::Symbolic(name) => Some(name),
            Target::Object(_) => None,
        })
    }

    /// The ref `name` (`HEAD` or `refs/…`): its loose file, else its line in `packed-refs`;
    /// `None` when neither has it.
    pub(crate) fn read_ref(&self, name: &str) -> Result<Option<Target>, GitError> {
        let (view, base) = if per_worktree(name) {
            (&self.git_view, &self.dirs.git_dir)
        } else {
            (&self.common_view, &self.dirs.common_dir)
        };
        let refused = || GitError::LinkedGitDir(base.join(name));
        let path = WsPath::new(name).map_err(|_| refused())?;
        match view.read(&path, MAX_REF + 1) {
            Ok(Some(read)) if read.bytes.len() > MAX_REF => Err(unreadable(name)),
            Ok(Some(read)) => parse_loose(&read.bytes)
                .map(Some)
                .ok_or_else(|| unreadable(name)),
            Ok(None) if name == "HEAD" => Ok(None),
            Ok(None) => self.packed(name),
            // A directory where the ref file would be: git has no such ref either.
            Err(ViewError::NotAFile {
                kind: cordon_workspace::Kind::Directory,
                ..
            }) => self.packed(name),
            Err(_) => Err(refused()),
        }
    }

    /// `name`'s line in the common directory's `packed-refs`.
    fn packed(&self, name: &str) -> Result<Option<Target>, GitError> {
        let Some(bytes) = read_packed_refs(&self.common_view, &self.dirs.common_dir)? else {
            return Ok(None);
        };
        for line in bytes.split(|&b| b == b'\n') {
            if line.starts_with(b"#") || line.starts_with(b"^") || line.is_empty() {
                continue;
            }
            let Some((hex, rest)) = line.split_at_checked(40) else {
                return Err(unreadable("packed-refs"));
            };
            let rest = rest.strip_suffix(b"\r").unwrap_or(rest);
            if rest.strip_prefix(b" ") == Some(name.as_bytes()) {
                return ObjectId::from_hex(hex)
                    .map(|id| Some(Target::Object(id)))
                    .map_err(|_| unreadable("packed-refs"));
            }
        }
        Ok(None)
    }
}

/// The common directory's `packed-refs`, `None` without one; refused when it is not a regular
/// file reached without a link, or larger than [`MAX_PACKED_REFS`].
pub(crate) fn read_packed_refs(
    common: &View,
    common_dir: &std::path::Path,
) -> Result<Option<Vec<u8>>, GitError> {
    let path = WsPath::name(b"packed-refs").expect("a plain name");
    match common.read(&path, MAX_PACKED_REFS + 1) {
        Ok(Some(read)) if read.bytes.len() > MAX_PACKED_REFS => Err(GitError::Objects(format!(
            "`packed-refs` is larger than {MAX_PACKED_REFS} bytes"
        ))),
        Ok(read) => Ok(read.map(|read| read.bytes)),
        Err(_) => Err(GitError::LinkedGitDir(common_dir.join("packed-refs"))),
    }
}

/// Refs kept per worktree (in the git directory, not the common one), as git keeps them.
pub(crate) fn per_worktree(name: &str) -> bool {
    name == "HEAD"
        || ["refs/bisect/", "refs/worktree/", "refs/rewritten/"]
            .iter()
            .any(|prefix| name.starts_with(prefix))
}

/// A loose ref's content as git writes it: `ref: <name>` or a hex object id, then one optional
/// `\n` — nothing else is trimmed, so the name cordon checks is byte for byte the name gitoxide
/// would follow (a trailing U+3000 that `str::trim_end` dropped named another ref to gitoxide).
/// The name a symbolic ref names must be a valid full ref name (no `..`, no control characters,
/// no whitespace, below `refs/`).
pub(crate) fn parse_loose(bytes: &[u8]) -> Option<Target> {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let text = std::str::from_utf8(bytes).ok()?;
    if let Some(name) = text.strip_prefix("ref:") {
        let name = name.strip_prefix(' ').unwrap_or(name);
        if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return None;
        }
        let valid = name.starts_with("refs/")
            && gix_ref::FullName::try_from(name).is_ok()
            && WsPath::new(name).is_ok();
        return valid.then(|| Target::Symbolic(name.to_owned()));
    }
    (text.len() == 40)
        .then(|| ObjectId::from_hex(text.as_bytes()).ok())
        .flatten()
        .map(Target::Object)
}

/// A ref cordon cannot parse, named without its content (which a step may have pointed at
/// anything).
fn unreadable(name: &str) -> GitError {
    GitError::Objects(format!(
        "the ref `{name}` is not a ref git writes; repair it with `git update-ref`"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loose_refs_are_one_line_naming_an_object_or_a_branch() {
        let id = "0123456789abcdef0123456789abcdef01234567";
        for (text, expected) in [
            (
                format!("{id}\n"),
                Some(Target::Object(ObjectId::from_hex(id.as_bytes()).unwrap())),
            ),
            (
                "ref: refs/heads/main\n".to_owned(),
                Some(Target::Symbolic("refs/heads/main".into())),
            ),
            (
                "ref:refs/heads/x".to_owned(),
                Some(Target::Symbolic("refs/heads/x".into())),
            ),
            ("ref: refs/heads/main\u{3000}\n".to_owned(), None),
            ("ref: refs/heads/main \n".to_owned(), None),
            ("ref: refs/heads/main\r\n".to_owned(), None),
            ("ref: refs/heads/main\n\n".to_owned(), None),
            (format!("{id} \n"), None),
            ("ref: refs/heads/../../config\n".to_owned(), None),
            ("ref: /etc/passwd\n".to_owned(), None),
            ("ref: HEAD\n".to_owned(), None),
            ("ref: refs/heads/a\nb\n".to_owned(), None),
            ("canary secret\n".to_owned(), None),
            (format!("{id}0\n"), None),
            (String::new(), None),
        ] {
            assert_eq!(parse_loose(text.as_bytes()), expected, "{text:?}");
        }
    }

    #[test]
    fn only_the_worktree_refs_live_in_the_git_directory() {
        for (name, own) in [
            ("HEAD", true),
            ("refs/bisect/bad", true),
            ("refs/heads/main", false),
            ("refs/tags/v1", false),
        ] {
            assert_eq!(per_worktree(name), own, "{name}");
        }
    }
}
