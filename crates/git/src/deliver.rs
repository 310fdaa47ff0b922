//! What the `deliver` action reads from the run's repository (DESIGN §15, §18): the parents of
//! the run's commits, the blobs they changed (checked for secret values before anything is
//! pushed), a remote's URL from the config the run started with, and the object directory a
//! push reads from. All in process, every object sized from its header before it is inflated.

use std::path::PathBuf;

use gix_hash::ObjectId;
use gix_object::{FindExt as _, FindHeader as _};

use crate::repo::MAX_COMMIT;
use crate::tree::{Flat, Mode, flatten};
use crate::worktree::MAX_BLOB;
use crate::{GitError, Repo};

/// A blob a commit added or changed, by path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changed {
    pub path: Vec<u8>,
    pub id: ObjectId,
}

impl Repo {
    /// The parents of `commit` (hex), refused past [`MAX_COMMIT`] bytes before it is inflated.
    pub fn parents(&self, commit: &str) -> Result<Vec<String>, GitError> {
        self.read_commit(commit, |c| c.parents().map(|p| p.to_string()).collect())
    }

    /// The message of `commit`, refused past [`MAX_COMMIT`] bytes before it is inflated.
    pub fn message(&self, commit: &str) -> Result<Vec<u8>, GitError> {
        self.read_commit(commit, |c| c.message.to_vec())
    }

    fn read_commit<T>(
        &self,
        commit: &str,
        read: impl FnOnce(gix_object::CommitRef<'_>) -> T,
    ) -> Result<T, GitError> {
        let id = parse_id(commit)?;
        self.refuse_large(&id, MAX_COMMIT, "commit")?;
        let mut buffer = Vec::new();
        let parsed = self
            .objects
            .find_commit(&id, &mut buffer)
            .map_err(GitError::library("read a commit to deliver"))?;
        Ok(read(parsed))
    }

    /// Every blob (files and links) `commit` adds or changes against its first parent (all of
    /// its tree for a root commit).
    pub fn changed_blobs(&self, commit: &str) -> Result<Vec<Changed>, GitError> {
        let id = parse_id(commit)?;
        let (tree, _) = self.commit_parts(&id)?;
        let parent = self.parents(commit)?.into_iter().next();
        let theirs = match parent {
            Some(parent) => {
                let (tree, _) = self.commit_parts(&parse_id(&parent)?)?;
                flatten(&self.objects, &tree)?
            }
            None => Flat::new(),
        };
        let ours = flatten(&self.objects, &tree)?;
        Ok(ours
            .into_iter()
            .filter(|(path, entry)| {
                !matches!(entry.mode, Mode::Gitlink)
                    && theirs.get(path).is_none_or(|old| old.id != entry.id)
            })
            .map(|(path, entry)| Changed { path, id: entry.id })
            .collect())
    }

    /// The bytes of the blob `id`, refused past the largest file cordon's git reads.
    pub fn blob(&self, id: &ObjectId) -> Result<Vec<u8>, GitError> {
        self.refuse_large(id, MAX_BLOB, "blob")?;
        let mut buffer = Vec::new();
        let blob = self
            .objects
            .find_blob(id, &mut buffer)
            .map_err(GitError::library("read a blob to deliver"))?;
        Ok(blob.data.to_vec())
    }

    /// `remote.<name>.url` in the repository's config as the run started (never re-read: a
    /// step could have changed it since), when it names one.
    pub fn remote_url(&self, name: &str) -> Option<String> {
        let bytes = self.config.as_deref()?;
        let config = gix_config::File::from_bytes_no_includes(
            bytes,
            gix_config::file::Metadata::from(gix_config::Source::Local),
            gix_config::file::init::Options::default(),
        )
        .ok()?;
        let url = config.string(format!("remote.{name}.url").as_str())?;
        let url = url.to_string();
        (!url.is_empty() && !url.contains(['\n', '\r'])).then_some(url)
    }

    /// The object directory of the repository (its common directory's `objects`), which a push
    /// reads the run's commits from.
    pub fn objects_dir(&self) -> PathBuf {
        self.dirs.common_dir.join("objects")
    }

    fn refuse_large(&self, id: &ObjectId, limit: u64, what: &str) -> Result<(), GitError> {
        match self.objects.try_header(id) {
            Ok(Some(header)) if header.size > limit => Err(GitError::Objects(format!(
                "the {what} {id} is {} bytes, more than the {limit} cordon's git reads",
                header.size
            ))),
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(GitError::Objects(format!(
                "the {what} {id} is not in the repository"
            ))),
            Err(err) => Err(GitError::Objects(err.to_string())),
        }
    }
}

fn parse_id(hex: &str) -> Result<ObjectId, GitError> {
    ObjectId::from_hex(hex.as_bytes())
        .map_err(|_| GitError::Objects(format!("`{hex}` is not an object id")))
}
