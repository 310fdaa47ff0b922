//! The commit action, in process: the work tree is staged as `git add -A` would (read through the
//! view, no filter), tooling and declared artifacts keep HEAD's entries whatever the work tree
//! holds, blobs and trees are written as loose objects, the commit carries the run's trailer, HEAD
//! (its branch) moves with a reflog entry, and the index is rewritten to match the commit.
//! Idempotent: when HEAD already carries the trailer, that commit is the result.

use cordon_workspace::{View, ViewError, WsPath};
use gix_hash::ObjectId;
use gix_object::bstr::{BString, ByteSlice};

use crate::GitError;
use crate::refs::{MAX_PACKED_REFS, MAX_REF};
use crate::repo::{Expect, Repo};
use crate::tree::{self, Entry, Flat, Mode};
use crate::worktree::{Ignoring, Snapshot, StatCache};

/// A commit the action made, or found already made by this run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    pub sha: String,
    /// `false` when HEAD already carried the run's trailer (resume after a crash).
    pub created: bool,
    /// The first [`MAX_FILES`] paths the commit changed, in order (empty when found already
    /// made).
    pub files: Vec<String>,
    /// How many more paths it changed.
    pub files_omitted: u64,
}

/// The most paths a [`Committed`] lists (the run's record of the commit lists as many).
pub const MAX_FILES: usize = 1_000;

impl Repo {
    /// Commits every change in the work tree except `exclude` (paths kept as HEAD has them) on
    /// HEAD, with `message` and the trailer lines `trailer` (`Cordon-Run: <id>`, and for an
    /// outcome task `Cordon-Task: <id>` under it). `Ok(None)` when there is nothing to commit;
    /// HEAD itself (not created) when its message already holds every trailer line, so a
    /// commit repeated after a crash makes none.
    pub fn commit(
        &self,
        workspace: &View,
        message: &str,
        trailer: &str,
        exclude: &[WsPath],
        cache: &mut StatCache,
    ) -> Result<Option<Committed>, GitError> {
        self.check_pinned()?;
        self.refuse_tampering()?;
        let head = self.head()?;
        let (head_tree, _) = self.commit_parts(&head)?;
        // Already made (a resume): nothing is staged.
        if let Some(made) = self.made(head, trailer)? {
            return Ok(Some(made));
        }
        let head_flat = tree::flatten(&self.objects, &head_tree)?;
        let snapshot = self.snapshot(workspace, &head_flat, Ignoring::WorkTree, cache)?;
        let flat = staged(&snapshot, &head_flat, exclude);
        if flat == head_flat {
            return Ok(None);
        }
        self.store_staged(workspace, &head_flat, &flat, &snapshot)?;
        self.commit_flat(flat, message, trailer, &snapshot)
    }

    /// Commits `flat` (its blobs stored already) on HEAD with `message` and `trailer`, moving
    /// HEAD and rewriting the index (with `snapshot`'s metadata where it read the file).
    /// `Ok(None)` when HEAD has that tree, HEAD itself when it holds every trailer line.
    pub(crate) fn commit_flat(
        &self,
        flat: Flat,
        message: &str,
        trailer: &str,
        snapshot: &Snapshot,
    ) -> Result<Option<Committed>, GitError> {
        let head = self.head()?;
        let (head_tree, _) = self.commit_parts(&head)?;
        if let Some(made) = self.made(head, trailer)? {
            return Ok(Some(made));
        }
        let head_flat = tree::flatten(&self.objects, &head_tree)?;
        if flat == head_flat {
            return Ok(None);
        }
        let changed = crate::diff::changes(&head_flat, &flat);
        let tree = tree::write(&self.objects, &flat)?;
        let full_message = format!("{}\n\n{trailer}\n", message.trim_end());
        let (id, signature) = self.write_commit(tree, head, full_message)?;
        // The index and its lock are checked before HEAD moves, so a link there cannot leave
        // HEAD moved and the index stale.
        self.refuse_links(false, "index", Expect::File)?;
        self.refuse_links(false, "index.lock", Expect::File)?;
        self.move_head(head, id, &signature)?;
        self.write_index(&flat, snapshot)?;
        Ok(Some(Committed {
            sha: id.to_string(),
            created: true,
            files: changed
                .iter()
                .take(MAX_FILES)
                .map(|(path, _)| String::from_utf8_lossy(path).into_owned())
                .collect(),
            files_omitted: changed.len().saturating_sub(MAX_FILES) as u64,
        }))
    }

    /// HEAD as the commit already made when its message holds every line of `trailer`.
    fn made(&self, head: ObjectId, trailer: &str) -> Result<Option<Committed>, GitError> {
        let (_, head_message) = self.commit_parts(&head)?;
        let holds = |wanted: &str| {
            head_message
                .lines()
                .any(|line| line.trim() == wanted.trim())
        };
        Ok(trailer.lines().all(holds).then(|| Committed {
            sha: head.to_string(),
            created: false,
            files: Vec::new(),
            files_omitted: 0,
        }))
    }

    /// Stores the blob of every path `flat` adds or changes against `head_flat`, read from
    /// `workspace` as `snapshot` saw it.
    pub(crate) fn store_staged(
        &self,
        workspace: &View,
        head_flat: &Flat,
        flat: &Flat,
        snapshot: &Snapshot,
    ) -> Result<(), GitError> {
        self.refuse_object_links()?;
        for (path, change) in crate::diff::changes(head_flat, flat) {
            let entry = match change {
                crate::diff::Change::Added(entry)
                | crate::diff::Change::Modified { new: entry, .. } => entry,
                crate::diff::Change::Deleted(_) => continue,
            };
            self.write_blob(workspace, &path, &entry, snapshot)?;
        }
        Ok(())
    }

    /// Writes a commit of `tree` on `parent` by the run's identity, now.
    pub(crate) fn write_commit(
        &self,
        tree: ObjectId,
        parent: ObjectId,
        message: String,
    ) -> Result<(ObjectId, gix_actor::Signature), GitError> {
        let signature = self.signature();
        let commit = gix_object::Commit {
            tree,
            parents: vec![parent].into(),
            author: signature.clone(),
            committer: signature.clone(),
            encoding: None,
            message: BString::from(message),
            extra_headers: Vec::new(),
        };
        Ok((self.write_object(&commit)?, signature))
    }

    /// The run's author and committer, now.
    pub(crate) fn signature(&self) -> gix_actor::Signature {
        gix_actor::Signature {
            name: BString::from(self.identity.name.as_str()),
            email: BString::from(self.identity.email.as_str()),
            time: gix_date::Time::now_utc(),
        }
    }

    pub(crate) fn write_object(
        &self,
        object: &dyn gix_object::WriteTo,
    ) -> Result<ObjectId, GitError> {
        use gix_object::Write as _;
        self.objects
            .write(object)
            .map_err(GitError::library("write an object"))
    }

    /// Refuses when the object directory or one of its fan-out directories is anything but a
    /// real directory (gitoxide writes loose objects by path).
    pub(crate) fn refuse_object_links(&self) -> Result<(), GitError> {
        self.refuse_links(true, "objects", Expect::Directory)?;
        for fan in 0..=255u8 {
            self.refuse_links(true, &format!("objects/{fan:02x}"), Expect::Directory)?;
        }
        Ok(())
    }

    /// Writes the blob of `entry` (a work-tree file or link at `path`) unless the store has it.
    pub(crate) fn write_blob(
        &self,
        workspace: &View,
        path: &[u8],
        entry: &Entry,
        snapshot: &Snapshot,
    ) -> Result<(), GitError> {
        use gix_object::{Exists as _, Write as _};
        if entry.mode == Mode::Gitlink || self.objects.exists(&entry.id) {
            return Ok(());
        }
        let hex = entry.id.to_hex().to_string();
        let ws_path = WsPath::from_bytes(path).map_err(|_| {
            GitError::Objects(format!(
                "object {hex} for `{}` is missing from the repository",
                String::from_utf8_lossy(path)
            ))
        })?;
        let changed = || {
            GitError::View(ViewError::Changed {
                path: ws_path.shown(),
            })
        };
        let written = match entry.mode {
            Mode::Link => {
                let target = workspace.read_link(&ws_path)?.ok_or_else(changed)?;
                self.objects
                    .write_buf(gix_object::Kind::Blob, &target)
                    .map_err(GitError::library("write a blob"))?
            }
            _ => {
                let open = workspace.open_file(&ws_path)?.ok_or_else(changed)?;
                let seen = snapshot.entries.get(path).and_then(|s| s.meta);
                if seen.is_some_and(|m| m != open.meta) {
                    return Err(changed());
                }
                let size = open.meta.size;
                let mut reader = std::io::Read::take(open.file, size);
                self.objects
                    .write_stream(gix_object::Kind::Blob, size, &mut reader)
                    .map_err(GitError::library("write a blob"))?
            }
        };
        if written != entry.id {
            return Err(changed());
        }
        Ok(())
    }

    /// Moves HEAD (through its branch) from `old` to `new`, with a reflog entry.
    fn move_head(
        &self,
        old: ObjectId,
        new: ObjectId,
        signature: &gix_actor::Signature,
    ) -> Result<(), GitError> {
        use gix_ref::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
        // Every file the transaction writes, and the directories they sit in, checked first.
        // gitoxide reads the ref files and `packed-refs` whole: each must be a regular file of
        // a ref's size.
        self.refuse_links(false, "HEAD", Expect::File)?;
        self.refuse_oversized(false, "HEAD", MAX_REF)?;
        self.refuse_links(false, "logs/HEAD", Expect::File)?;
        self.refuse_links(true, "packed-refs", Expect::File)?;
        self.refuse_oversized(true, "packed-refs", MAX_PACKED_REFS)?;
        let branch = self.head_branch()?;
        // gitoxide follows HEAD itself: its reading must name what cordon's names, or the files
        // checked here are not the files it writes.
        let theirs = self
            .refs
            .try_find_loose("HEAD")
            .map_err(GitError::library("read HEAD"))?
            .map(|head| match head.target {
                gix_ref::Target::Symbolic(name) => Some(name.as_bstr().to_string()),
                gix_ref::Target::Object(_) => None,
            });
        if theirs != Some(branch.clone()) {
            return Err(GitError::Objects(
                "HEAD is not a ref git writes (cordon and gitoxide read it differently); repair \
                 it with `git symbolic-ref HEAD refs/heads/<branch>`"
                    .to_owned(),
            ));
        }
        if let Some(branch) = &branch {
            // gitoxide follows a chain of symbolic refs to its end and writes that ref and its
            // reflog: cordon moves only a branch HEAD names directly, so the files checked here
            // are the files written.
            if let Some(crate::refs::Target::Symbolic(_)) = self.read_ref(branch)? {
                return Err(GitError::Objects(format!(
                    "`{branch}` is itself a symbolic ref; the commit action moves only a branch \
                     HEAD names directly: point HEAD at it with `git symbolic-ref HEAD <branch>`"
                )));
            }
            let common = !crate::refs::per_worktree(branch);
            self.refuse_links(common, branch, Expect::File)?;
            self.refuse_oversized(common, branch, MAX_REF)?;
            self.refuse_links(common, &format!("logs/{branch}"), Expect::File)?;
        }
        let edit = RefEdit {
            change: Change::Update {
                log: LogChange {
                    mode: RefLog::AndReference,
                    force_create_reflog: false,
                    message: BString::from("cordon: commit action"),
                },
                expected: PreviousValue::MustExistAndMatch(gix_ref::Target::Object(old)),
                new: gix_ref::Target::Object(new),
            },
            name: "HEAD"
                .try_into()
                .map_err(|_| GitError::Objects("HEAD is not a reference name".to_owned()))?,
            deref: true,
        };
        let mut time = gix_date::parse::TimeBuf::default();
        self.refs
            .transaction()
            .prepare(
                [edit],
                gix_lock::acquire::Fail::Immediately,
                gix_lock::acquire::Fail::Immediately,
            )
            .map_err(GitError::library("lock HEAD"))?
            .commit(Some(signature.to_ref(&mut time)))
            .map_err(GitError::library("move HEAD"))?;
        Ok(())
    }

    /// Rewrites the index so that it holds exactly `flat`, with the work tree's metadata for the
    /// entries whose content was read (git then sees them unchanged without reading them).
    fn write_index(&self, flat: &Flat, snapshot: &Snapshot) -> Result<(), GitError> {
        self.refuse_links(false, "index", Expect::File)?;
        self.write_index_at(&self.dirs.git_dir.join("index"), flat, snapshot)
    }

    /// [`Repo::write_index`] at `path` (a task worktree's new git directory, which cordon made).
    pub(crate) fn write_index_at(
        &self,
        path: &std::path::Path,
        flat: &Flat,
        snapshot: &Snapshot,
    ) -> Result<(), GitError> {
        use gix_index::entry::{Flags, Mode as IndexMode, Stat};
        let mut state = gix_index::State::new(gix_hash::Kind::Sha1);
        for (path, entry) in flat {
            let stat = snapshot
                .entries
                .get(path)
                .filter(|seen| seen.entry == *entry)
                .and_then(|seen| seen.meta)
                .map(|meta| {
                    let time = |(secs, nsecs): (i64, u32)| gix_index::entry::stat::Time {
                        secs: u32::try_from(secs).unwrap_or(0),
                        nsecs,
                    };
                    Stat {
                        mtime: time(meta.mtime),
                        ctime: time(meta.ctime),
                        dev: meta.dev as u32,
                        ino: meta.ino as u32,
                        uid: meta.uid,
                        gid: meta.gid,
                        size: meta.size as u32,
                    }
                })
                .unwrap_or_default();
            let mode = match entry.mode {
                Mode::File => IndexMode::FILE,
                Mode::Executable => IndexMode::FILE_EXECUTABLE,
                Mode::Link => IndexMode::SYMLINK,
                Mode::Gitlink => IndexMode::COMMIT,
            };
            state.dangerously_push_entry(stat, entry.id, Flags::empty(), mode, path.as_bstr());
        }
        state.sort_entries();
        let mut file = gix_index::File::from_state(state, path.to_path_buf());
        file.write(gix_index::write::Options::default(), Default::default())
            .map_err(GitError::library("write the index"))
    }
}

/// The work tree staged against HEAD as the commit action stages it.
pub(crate) struct Staged {
    pub head: ObjectId,
    pub head_flat: Flat,
    pub snapshot: Snapshot,
    /// What a commit would record ([`staged`]).
    pub flat: Flat,
}

impl Repo {
    /// `workspace` staged against HEAD, `exclude` paths as HEAD has them, after the checks every
    /// writer of objects makes (the directories pinned, the git directory untampered).
    pub(crate) fn stage(
        &self,
        workspace: &View,
        exclude: &[WsPath],
        cache: &mut StatCache,
    ) -> Result<Staged, GitError> {
        self.check_pinned()?;
        self.refuse_tampering()?;
        let head = self.head()?;
        let (head_tree, _) = self.commit_parts(&head)?;
        let head_flat = tree::flatten(&self.objects, &head_tree)?;
        let snapshot = self.snapshot(workspace, &head_flat, Ignoring::WorkTree, cache)?;
        let flat = staged(&snapshot, &head_flat, exclude);
        Ok(Staged {
            head,
            head_flat,
            snapshot,
            flat,
        })
    }
}

/// The flat tree the commit records: the snapshot, with every `exclude` path (and what lies below
/// it) as HEAD has it.
pub(crate) fn staged(snapshot: &Snapshot, head: &Flat, exclude: &[WsPath]) -> Flat {
    let excluded = |path: &[u8]| {
        exclude.iter().any(|e| {
            let e = e.as_bytes();
            path.starts_with(e) && (path.len() == e.len() || path[e.len()] == b'/')
        })
    };
    let mut flat: Flat = snapshot
        .entries
        .iter()
        .filter(|(path, _)| !excluded(path))
        .map(|(path, seen)| (path.clone(), seen.entry))
        .collect();
    for (path, entry) in head {
        if excluded(path) {
            flat.insert(path.clone(), *entry);
        }
    }
    flat
}
