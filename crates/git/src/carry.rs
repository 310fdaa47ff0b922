//! A run's workspace carried to another machine (DESIGN §16, §18): at a step's end the work tree
//! is recorded as a git tree, with every object the run's clone did not start with, so that a
//! resume on a machine without the workspace rebuilds it from a fresh clone of the run's origin.
//!
//! * [`Repo::carry`] stages the work tree as the commit action would (ignored files and the
//!   `hide` paths stay out; the tooling as HEAD has it), writes its tree, and gathers the objects
//!   reachable from HEAD and that tree but not from `origin`'s tree: the run's commits (the
//!   batch's tooling commit, each commit action's), their trees and blobs, and the changed
//!   files' blobs. Bounded by [`MAX_CARRIED`] bytes and [`MAX_CARRIED_OBJECTS`] objects.
//! * [`Carried::encode`] / [`Carried::decode`]: the record's bytes, checked when read.
//! * [`Repo::import_carried`] writes the objects into a fresh clone's object store: each object
//!   is re-hashed as it is written, so its id is what its bytes make, and HEAD and the tree must
//!   then be present.
//! * [`Repo::restore_carried`] writes into a checkout of the carried HEAD the difference between
//!   HEAD's tree and the carried tree, through the work tree's view (no link followed), blobs
//!   read bounded from the object store.

use std::collections::HashSet;

use cordon_workspace::{Kind as FileKind, View, WsPath};
use gix_hash::ObjectId;
use gix_object::Kind;

use crate::GitError;
use crate::repo::{MAX_COMMIT, Repo};
use crate::tree::{self, Mode};
use crate::worktree::{MAX_BLOB, StatCache};

/// The most bytes of objects one record carries.
pub const MAX_CARRIED: u64 = 256 << 20;
/// The most objects one record carries.
pub const MAX_CARRIED_OBJECTS: usize = 200_000;
/// The most commits walked from HEAD looking for the origin.
const MAX_COMMITS: usize = 10_000;
/// The first line of a record.
const MAGIC: &[u8] = b"cordon-carry 1\n";

/// A run's workspace at a step's end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Carried {
    /// The commit the run's clone was made from (its task's ref).
    pub origin: ObjectId,
    /// HEAD at the step's end.
    pub head: ObjectId,
    /// The work tree's tree.
    pub tree: ObjectId,
    objects: Vec<(Kind, Vec<u8>)>,
}

impl Carried {
    /// The record: [`MAGIC`], the three ids one per line, then each object as its kind's
    /// letter, its length (8 bytes, big-endian) and its bytes.
    pub fn encode(&self) -> Vec<u8> {
        let size: usize = self.objects.iter().map(|(_, b)| b.len() + 9).sum();
        let mut out = Vec::with_capacity(MAGIC.len() + 3 * 41 + size);
        out.extend_from_slice(MAGIC);
        for id in [self.origin, self.head, self.tree] {
            out.extend_from_slice(id.to_string().as_bytes());
            out.push(b'\n');
        }
        for (kind, bytes) in &self.objects {
            out.push(letter(*kind));
            out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
            out.extend_from_slice(bytes);
        }
        out
    }

    /// Reads a record, refusing anything [`Carried::encode`] does not write or that passes the
    /// bounds.
    pub fn decode(bytes: &[u8]) -> Result<Carried, GitError> {
        let damaged = |what: &str| GitError::Objects(format!("the workspace record is {what}"));
        let mut rest = bytes
            .strip_prefix(MAGIC)
            .ok_or_else(|| damaged("not one cordon writes"))?;
        let mut ids = [ObjectId::null(gix_hash::Kind::Sha1); 3];
        for id in &mut ids {
            let end = rest
                .iter()
                .position(|&b| b == b'\n')
                .ok_or_else(|| damaged("cut short"))?;
            *id = ObjectId::from_hex(&rest[..end]).map_err(|_| damaged("damaged (an id)"))?;
            rest = &rest[end + 1..];
        }
        let mut objects = Vec::new();
        let mut total = 0u64;
        while let Some((&first, after)) = rest.split_first() {
            let kind = kind_of(first).ok_or_else(|| damaged("damaged (an object's kind)"))?;
            let (len, after) = after
                .split_first_chunk::<8>()
                .ok_or_else(|| damaged("cut short"))?;
            let len = u64::from_be_bytes(*len);
            total = total.saturating_add(len);
            if total > MAX_CARRIED || objects.len() >= MAX_CARRIED_OBJECTS {
                return Err(damaged("larger than cordon carries"));
            }
            let len = usize::try_from(len).map_err(|_| damaged("cut short"))?;
            if after.len() < len {
                return Err(damaged("cut short"));
            }
            objects.push((kind, after[..len].to_vec()));
            rest = &after[len..];
        }
        let [origin, head, tree] = ids;
        Ok(Carried {
            origin,
            head,
            tree,
            objects,
        })
    }

    /// How many objects the record carries.
    pub fn object_count(&self) -> usize {
        self.objects.len()
    }
}

fn letter(kind: Kind) -> u8 {
    match kind {
        Kind::Commit => b'c',
        Kind::Tree => b't',
        Kind::Blob => b'b',
        Kind::Tag => b'g',
    }
}

fn kind_of(letter: u8) -> Option<Kind> {
    match letter {
        b'c' => Some(Kind::Commit),
        b't' => Some(Kind::Tree),
        b'b' => Some(Kind::Blob),
        _ => None,
    }
}

/// The objects being gathered, within the bounds.
struct Gathered {
    objects: Vec<(Kind, Vec<u8>)>,
    bytes: u64,
    seen: HashSet<ObjectId>,
}

impl Gathered {
    fn push(&mut self, kind: Kind, bytes: Vec<u8>) -> Result<(), GitError> {
        self.bytes = self.bytes.saturating_add(bytes.len() as u64);
        if self.bytes > MAX_CARRIED || self.objects.len() >= MAX_CARRIED_OBJECTS {
            return Err(too_large());
        }
        self.objects.push((kind, bytes));
        Ok(())
    }

    /// The most bytes the next object may have.
    fn room(&self) -> u64 {
        MAX_CARRIED.saturating_sub(self.bytes)
    }
}

fn too_large() -> GitError {
    GitError::Objects(format!(
        "the workspace holds more than cordon carries to another machine ({} MiB or {} objects \
         beyond the run's origin)",
        MAX_CARRIED >> 20,
        MAX_CARRIED_OBJECTS
    ))
}

impl Repo {
    /// The work tree of `workspace` and the run's objects beyond `origin` (see the module).
    /// `exclude` paths (the run's tooling) are taken as HEAD has them. The changed files' blobs
    /// are written into the object store, as the commit action writes them.
    pub fn carry(
        &self,
        workspace: &View,
        origin: ObjectId,
        exclude: &[WsPath],
        cache: &mut StatCache,
    ) -> Result<Carried, GitError> {
        let crate::commit::Staged {
            head,
            head_flat,
            snapshot,
            flat,
        } = self.stage(workspace, exclude, cache)?;
        // The changed files' sizes, as the snapshot saw them, before any blob is written.
        let changed: u64 = crate::diff::changes(&head_flat, &flat)
            .iter()
            .filter_map(|(path, _)| snapshot.entries.get(path)?.meta.map(|m| m.size))
            .fold(0, u64::saturating_add);
        if changed > MAX_CARRIED {
            return Err(too_large());
        }
        self.store_staged(workspace, &head_flat, &flat, &snapshot)?;
        let work_tree = tree::write(&self.objects, &flat)?;
        let mut gathered = Gathered {
            objects: Vec::new(),
            bytes: 0,
            seen: HashSet::new(),
        };
        let (origin_tree, _) = self.commit_parts(&origin)?;
        self.mark(origin_tree, &mut gathered.seen)?;
        // The commits from HEAD back to the origin (every parent: a merge brings its side).
        let mut commits = vec![head];
        let mut walked = 0;
        while let Some(commit) = commits.pop() {
            if commit == origin || !gathered.seen.insert(commit) {
                continue;
            }
            walked += 1;
            if walked > MAX_COMMITS {
                return Err(GitError::Objects(format!(
                    "HEAD is more than {MAX_COMMITS} commits from the run's origin {origin}; \
                     the workspace cannot be carried to another machine"
                )));
            }
            let bytes = self.raw(&commit, Kind::Commit, MAX_COMMIT, gathered.room())?;
            let parsed = gix_object::CommitRef::from_bytes(&bytes, gix_hash::Kind::Sha1)
                .map_err(|err| GitError::Objects(format!("the commit {commit}: {err}")))?;
            let tree = parsed.tree();
            commits.extend(parsed.parents());
            drop(parsed);
            gathered.push(Kind::Commit, bytes)?;
            self.gather(tree, &mut gathered)?;
        }
        self.gather(work_tree, &mut gathered)?;
        Ok(Carried {
            origin,
            head,
            tree: work_tree,
            objects: gathered.objects,
        })
    }

    /// HEAD's first parent: at a batch run's start, the commit its clone was made from (HEAD is
    /// the batch's tooling commit on it).
    pub fn head_parent(&self) -> Result<ObjectId, GitError> {
        let head = self.head()?;
        let bytes = self.raw(&head, Kind::Commit, MAX_COMMIT, MAX_COMMIT)?;
        let parsed = gix_object::CommitRef::from_bytes(&bytes, gix_hash::Kind::Sha1)
            .map_err(|err| GitError::Objects(format!("the commit {head}: {err}")))?;
        parsed
            .parents()
            .next()
            .ok_or_else(|| GitError::Objects(format!("HEAD {head} has no parent")))
    }

    /// Writes every object of `carried` into the object store, then checks that its HEAD and
    /// tree are there.
    pub fn import_carried(&self, carried: &Carried) -> Result<(), GitError> {
        use gix_object::{Exists as _, Write as _};
        self.refuse_object_links()?;
        for (kind, bytes) in &carried.objects {
            self.objects
                .write_buf(*kind, bytes)
                .map_err(GitError::library("write a carried object"))?;
        }
        for (what, id) in [("HEAD", carried.head), ("tree", carried.tree)] {
            if !self.objects.exists(&id) {
                return Err(GitError::Objects(format!(
                    "the workspace record's {what} {id} is not among its objects or the clone's"
                )));
            }
        }
        Ok(())
    }

    /// Writes into `workspace`, a checkout of `carried.head`, every difference between that
    /// commit's tree and the carried tree (deletions first, as a deleted path may be the
    /// directory a later one needs).
    pub fn restore_carried(&self, workspace: &View, carried: &Carried) -> Result<(), GitError> {
        let head = self.head()?;
        if head != carried.head {
            return Err(GitError::Objects(format!(
                "the clone's HEAD is {head}, not the recorded {}",
                carried.head
            )));
        }
        let (head_tree, _) = self.commit_parts(&head)?;
        let from = tree::flatten(&self.objects, &head_tree)?;
        let to = tree::flatten(&self.objects, &carried.tree)?;
        let changes = crate::diff::changes(&from, &to);
        let path_of = |path: &[u8]| {
            WsPath::from_bytes(path).map_err(|err| {
                GitError::Objects(format!(
                    "the recorded path `{}` cannot be written: {err}",
                    cordon_protocol::text::escape_line(&String::from_utf8_lossy(path))
                ))
            })
        };
        for (path, change) in &changes {
            if let crate::diff::Change::Deleted(_) = change {
                workspace.remove(&path_of(path)?)?;
            }
        }
        for (path, change) in &changes {
            let entry = match change {
                crate::diff::Change::Added(entry)
                | crate::diff::Change::Modified { new: entry, .. } => entry,
                crate::diff::Change::Deleted(_) => continue,
            };
            let ws = path_of(path)?;
            // A directory of HEAD's where the carried tree has a file: its files were deleted
            // above, so what is left is empty directories.
            if entry.mode != Mode::Gitlink
                && workspace
                    .meta(&ws)?
                    .is_some_and(|m| m.kind == FileKind::Directory)
            {
                workspace.remove_all(&ws, 1 << 16)?;
            }
            if entry.mode == Mode::Link && workspace.meta(&ws)?.is_some() {
                workspace.remove(&ws)?;
            }
            self.put(workspace, &ws, entry, None, crate::parallel::Fresh::No)?;
        }
        Ok(())
    }

    /// Every tree and blob id below `tree` (trees read, blobs only named), into `seen`.
    fn mark(&self, tree: ObjectId, seen: &mut HashSet<ObjectId>) -> Result<(), GitError> {
        let mut stack = vec![tree];
        let mut entries = 0usize;
        while let Some(tree) = stack.pop() {
            if !seen.insert(tree) {
                continue;
            }
            let bytes = self.raw(&tree, Kind::Tree, tree::MAX_TREE, tree::MAX_TREE)?;
            for entry in gix_object::TreeRefIter::from_bytes(&bytes, gix_hash::Kind::Sha1) {
                let entry = entry.map_err(|err| GitError::Objects(err.to_string()))?;
                entries += 1;
                if entries > tree::MAX_ENTRIES {
                    return Err(GitError::TreeTooLarge {
                        limit: tree::MAX_ENTRIES,
                    });
                }
                if entry.mode.is_tree() {
                    stack.push(entry.oid.to_owned());
                } else {
                    seen.insert(entry.oid.to_owned());
                }
            }
        }
        Ok(())
    }

    /// `tree` and everything below it not seen yet, into `gathered`. A submodule's commit is
    /// another repository's and is not carried.
    fn gather(&self, tree: ObjectId, gathered: &mut Gathered) -> Result<(), GitError> {
        let mut stack = vec![tree];
        while let Some(tree) = stack.pop() {
            if !gathered.seen.insert(tree) {
                continue;
            }
            let bytes = self.raw(&tree, Kind::Tree, tree::MAX_TREE, gathered.room())?;
            for entry in gix_object::TreeRefIter::from_bytes(&bytes, gix_hash::Kind::Sha1) {
                let entry = entry.map_err(|err| GitError::Objects(err.to_string()))?;
                let id = entry.oid.to_owned();
                if entry.mode.is_tree() {
                    stack.push(id);
                } else if !entry.mode.is_commit() && gathered.seen.insert(id) {
                    let blob = self.raw(&id, Kind::Blob, MAX_BLOB, gathered.room())?;
                    gathered.push(Kind::Blob, blob)?;
                }
            }
            gathered.push(Kind::Tree, bytes)?;
        }
        Ok(())
    }

    /// The bytes of object `id`, which must be a `kind`, refused before it is inflated past
    /// `cap` (the most cordon reads of one) or `room` (what the record has left).
    fn raw(&self, id: &ObjectId, kind: Kind, cap: u64, room: u64) -> Result<Vec<u8>, GitError> {
        use gix_object::{Find as _, FindHeader as _};
        let header = self
            .objects
            .try_header(id)
            .map_err(GitError::library("read an object's header"))?
            .ok_or_else(|| GitError::Objects(format!("the object {id} is missing")))?;
        if header.size > cap {
            return Err(GitError::Objects(format!(
                "the object {id} is {} bytes, more than the {cap} cordon reads of one",
                header.size
            )));
        }
        if header.size > room {
            return Err(too_large());
        }
        let mut buffer = Vec::new();
        let data = self
            .objects
            .try_find(id, &mut buffer)
            .map_err(GitError::library("read an object"))?
            .ok_or_else(|| GitError::Objects(format!("the object {id} is missing")))?;
        if data.kind != kind {
            return Err(GitError::Objects(format!(
                "the object {id} is a {}, not a {kind}",
                data.kind
            )));
        }
        Ok(data.data.to_vec())
    }
}
