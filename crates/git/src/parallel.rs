//! An outcome run's parallel tasks (DESIGN §13, §18): each works in a linked worktree of its own,
//! based on a run-private commit of the main work tree, and an accepted task's work is merged
//! back into the main work tree here, in process.
//!
//! * [`Repo::base_commit`] writes a commit of the main work tree as the commit action would stage
//!   it (tooling as HEAD has it), with HEAD as its parent. No ref names it and HEAD does not
//!   move: it is the base of the worktrees, so a dependent task builds on the tasks accepted
//!   before it whatever `commit:` says.
//! * [`Repo::create_worktree`] makes the worktree in a directory cordon owns (in the state
//!   directory): a work tree whose `.git` file names a git directory beside it, whose `HEAD` is
//!   the base (detached), whose `commondir` is the repository's, and whose index matches the base.
//!   The base's tree is written through a view of the new directory: no path leaves it, no link
//!   is followed, and every blob is read bounded from the object store.
//! * [`Repo::merge`] is a three-way merge of the base, the main work tree and the task's work
//!   tree, by path; where both changed one text file, its lines are merged by gitoxide's
//!   `gix-merge` text driver — no attributes, filters, hooks or merge drivers are read from
//!   either tree. Both trees are read through their views and every file read is checked
//!   against the snapshot's object id. Nothing is written unless the whole merge is clean, so a
//!   conflict leaves the main work tree as it was.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use cordon_workspace::{Kind, View, ViewError, WsPath};
use gix_hash::ObjectId;

use crate::GitError;
use crate::repo::Repo;
use crate::tree::{self, Entry, Flat, Mode};
use crate::worktree::{Ignoring, MAX_BLOB, StatCache};

/// The most bytes of conflict text a [`Merged::Conflict`] report holds.
pub const MAX_CONFLICT_REPORT: usize = 16 << 10;
/// The most conflicting paths a report names.
const MAX_CONFLICT_PATHS: usize = 50;

/// How a task's merge into the main work tree ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Merged {
    /// Written into the main work tree: the paths it changed there, in order, and the run's
    /// new accepted commit (the one passed in, with the task's changes as merged).
    Clean {
        changed: Vec<String>,
        accepted: ObjectId,
    },
    /// Nothing was written: what conflicted, for the task's next `execute` (bounded by
    /// [`MAX_CONFLICT_REPORT`]).
    Conflict { paths: Vec<String>, report: String },
}

/// A task's worktree as [`Repo::create_worktree`] made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Worktree {
    /// The work tree (the task's sessions' workspace).
    pub work: PathBuf,
    /// Its git directory: `HEAD`, `commondir`, `gitdir`, `index`.
    pub git_dir: PathBuf,
}

impl Worktree {
    /// The layout under `dir`: `dir/work` and `dir/git`.
    pub fn at(dir: &Path) -> Worktree {
        Worktree {
            work: dir.join("work"),
            git_dir: dir.join("git"),
        }
    }
}

/// Whether a file is written into a new checkout (made durable once at its end) or into a
/// work tree (each file durable when written).
#[derive(Clone, Copy)]
pub(crate) enum Fresh {
    Yes,
    No,
}

/// What the merge takes for one path.
enum Take {
    Task(Entry),
    Delete,
    Merged(Entry, Vec<u8>),
}

impl Repo {
    /// A commit of `workspace` as the commit action would stage it — every `exclude` path (the
    /// run's tooling) as HEAD has it — whose parent is HEAD. Its objects are written; no ref
    /// names it and HEAD does not move.
    pub fn base_commit(
        &self,
        workspace: &View,
        message: &str,
        exclude: &[WsPath],
        cache: &mut StatCache,
    ) -> Result<ObjectId, GitError> {
        let staged = self.stage(workspace, exclude, cache)?;
        self.store_staged(workspace, &staged.head_flat, &staged.flat, &staged.snapshot)?;
        let tree = tree::write(&self.objects, &staged.flat)?;
        let head = staged.head;
        let message = format!("{}\n", message.trim_end());
        Ok(self.write_commit(tree, head, message)?.0)
    }

    /// Makes a linked worktree of this repository at `dir` (which must not exist; its parent
    /// must), checked out at `base`. Built under `dir` with `.partial` appended and renamed into
    /// place, so a crash leaves either no worktree or a whole one.
    pub fn create_worktree(&self, base: ObjectId, dir: &Path) -> Result<Worktree, GitError> {
        let partial = PathBuf::from(format!("{}.partial", dir.display()));
        if std::fs::symlink_metadata(&partial).is_ok() {
            std::fs::remove_dir_all(&partial).map_err(GitError::io("remove", &partial))?;
        }
        let made = Worktree::at(&partial);
        let create = |path: &Path| {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(path)
                .map_err(GitError::io("create", path))
        };
        use std::os::unix::fs::DirBuilderExt as _;
        create(&partial)?;
        create(&made.work)?;
        create(&made.git_dir)?;
        let last = Worktree::at(dir);
        // The final paths: git reads them after the rename.
        let write = |path: PathBuf, text: String| {
            std::fs::write(&path, text).map_err(GitError::io("write", &path))
        };
        write(made.git_dir.join("HEAD"), format!("{base}\n"))?;
        write(
            made.git_dir.join("commondir"),
            format!("{}\n", self.dirs.common_dir.display()),
        )?;
        write(
            made.git_dir.join("gitdir"),
            format!("{}\n", last.work.join(".git").display()),
        )?;
        write(
            made.work.join(".git"),
            format!("gitdir: {}\n", last.git_dir.display()),
        )?;
        let (tree_id, _) = self.commit_parts(&base)?;
        let flat = tree::flatten(&self.objects, &tree_id)?;
        let view = View::open(&made.work).map_err(GitError::io("open", &made.work))?;
        self.check_out(&flat, &view)?;
        self.write_index_at(&made.git_dir.join("index"), &flat, &Default::default())?;
        // One flush of the filesystem for the whole checkout, before it is renamed into place.
        view.sync_filesystem()
            .map_err(GitError::io("flush the worktree at", &made.work))?;
        std::fs::rename(&partial, dir).map_err(GitError::io("rename", &partial))?;
        Ok(last)
    }

    /// Writes every entry of `flat` into the empty work tree `view`: files with their
    /// executable bit, links as links, a submodule as an empty directory.
    fn check_out(&self, flat: &Flat, view: &View) -> Result<(), GitError> {
        for (path, entry) in flat {
            let ws = WsPath::from_bytes(path).map_err(|err| {
                GitError::Objects(format!(
                    "the path `{}` cannot be checked out into a task's worktree: {err}",
                    cordon_protocol::text::escape_line(&String::from_utf8_lossy(path))
                ))
            })?;
            self.put(view, &ws, entry, None, Fresh::Yes)?;
        }
        Ok(())
    }

    /// Writes `entry` at `path` in `view` (its parents made), its content `bytes` or the blob.
    pub(crate) fn put(
        &self,
        view: &View,
        path: &WsPath,
        entry: &Entry,
        bytes: Option<&[u8]>,
        fresh: Fresh,
    ) -> Result<(), GitError> {
        if let (Some(parent), _) = path.split() {
            let parent = WsPath::from_bytes(parent)
                .map_err(|_| GitError::View(ViewError::Blocked { path: path.shown() }))?;
            view.create_dirs(&parent)?;
        }
        let owned;
        let bytes = match (bytes, entry.mode) {
            (Some(bytes), _) => bytes,
            (None, Mode::Gitlink) => &[][..],
            (None, _) => {
                owned = self.blob_bytes(&entry.id)?;
                &owned
            }
        };
        match entry.mode {
            Mode::Gitlink => view.create_dirs(path)?,
            Mode::Link => view.symlink(path, bytes)?,
            Mode::File | Mode::Executable => {
                let executable = entry.mode == Mode::Executable;
                match fresh {
                    Fresh::Yes => view.create_file(path, bytes, executable)?,
                    Fresh::No => view.write_file(path, bytes, executable)?,
                }
            }
        }
        Ok(())
    }

    /// The blob `id`, refused past [`MAX_BLOB`] before it is inflated.
    fn blob_bytes(&self, id: &ObjectId) -> Result<Vec<u8>, GitError> {
        use gix_object::FindHeader as _;
        if let Ok(Some(header)) = self.objects.try_header(id)
            && header.size > MAX_BLOB
        {
            return Err(GitError::Objects(format!(
                "the blob {id} is {} bytes, more than the {MAX_BLOB} cordon's git reads",
                header.size
            )));
        }
        use gix_object::FindExt as _;
        let mut buffer = Vec::new();
        let blob = self
            .objects
            .find_blob(id, &mut buffer)
            .map_err(GitError::library("read a blob"))?;
        Ok(blob.data.to_vec())
    }

    /// Merges the task's work tree (`task`, whose HEAD is the base it started from) into this
    /// repository's work tree `main`: written only when clean. `exclude` paths (the run's
    /// tooling) are never changed. `accepted` is the run's accepted commit and the message of
    /// the next: the task's changes, as merged, are added to its tree — only those paths, so
    /// nothing else of the main work tree (a file an accepted `.gitignore` change stopped
    /// ignoring) reaches a later task's worktree or a commit. Merging again after a crash
    /// writes nothing and returns the same accepted tree.
    pub fn merge(
        &self,
        main: &View,
        task: &Repo,
        task_view: &View,
        exclude: &[WsPath],
        accepted: (ObjectId, &str),
        cache: &mut StatCache,
    ) -> Result<Merged, GitError> {
        self.check_pinned()?;
        let base_commit = task.head()?;
        let (base_tree, _) = task.commit_parts(&base_commit)?;
        let base = tree::flatten(&self.objects, &base_tree)?;
        let head = self.head()?;
        let (head_tree, _) = self.commit_parts(&head)?;
        let head_flat = tree::flatten(&self.objects, &head_tree)?;
        let ours_snapshot = self.snapshot(main, &head_flat, Ignoring::WorkTree, cache)?;
        let ours = ours_snapshot.flat();
        let theirs = task
            .snapshot(
                task_view,
                &base,
                Ignoring::WorkTree,
                &mut StatCache::default(),
            )?
            .flat();
        let excluded = |path: &[u8]| {
            exclude.iter().any(|e| {
                let e = e.as_bytes();
                path.starts_with(e) && (path.len() == e.len() || path[e.len()] == b'/')
            })
        };
        let paths: BTreeSet<&Vec<u8>> = base
            .keys()
            .chain(ours.keys())
            .chain(theirs.keys())
            .collect();
        let mut takes: BTreeMap<Vec<u8>, Take> = BTreeMap::new();
        let mut conflicts: Vec<(Vec<u8>, String)> = Vec::new();
        // What the task changed, as it ends up in the main work tree (`None`: deleted).
        let mut task_changes: BTreeMap<Vec<u8>, Option<Entry>> = BTreeMap::new();
        for path in paths {
            let (b, o, t) = (base.get(path), ours.get(path), theirs.get(path));
            if t == b || excluded(path) {
                continue;
            }
            task_changes.insert(path.clone(), t.copied());
            if o == t {
                continue;
            }
            if o == b {
                takes.insert(
                    path.clone(),
                    match t {
                        Some(entry) => Take::Task(*entry),
                        None => Take::Delete,
                    },
                );
                continue;
            }
            // Both changed the path, differently.
            match self.merge_file(main, task_view, path, b, o, t)? {
                Ok((entry, bytes)) => {
                    takes.insert(path.clone(), Take::Merged(entry, bytes));
                }
                Err(why) => conflicts.push((path.clone(), why)),
            }
        }
        // The merged tree must still be a tree: no path both a file and a directory.
        let mut result: Flat = ours.clone();
        for (path, take) in &takes {
            match take {
                Take::Task(entry) | Take::Merged(entry, _) => {
                    result.insert(path.clone(), *entry);
                }
                Take::Delete => {
                    result.remove(path);
                }
            }
        }
        for path in takes.keys() {
            let shadowed = path
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'/')
                .map(|(i, _)| &path[..i])
                .find(|prefix| result.contains_key(*prefix));
            let below = result
                .range::<Vec<u8>, _>((
                    std::ops::Bound::Excluded(path.clone()),
                    std::ops::Bound::Unbounded,
                ))
                .next()
                .is_some_and(|(next, _)| {
                    next.starts_with(path) && next.get(path.len()) == Some(&b'/')
                });
            if result.contains_key(path) && (shadowed.is_some() || below) {
                conflicts.push((
                    path.clone(),
                    "it is a file in one tree and a directory in the other".to_owned(),
                ));
            }
        }
        // A path the task adds must not be where the main work tree holds something no snapshot
        // counts (an ignored file, a directory).
        for (path, take) in &takes {
            if matches!(take, Take::Task(_) | Take::Merged(..)) && !ours.contains_key(path) {
                let ws = ws_path(path)?;
                let meta = match main.meta(&ws) {
                    Ok(meta) => meta,
                    // Below a link or a file of the main work tree: in the way, a conflict
                    // (never followed).
                    Err(ViewError::Blocked { .. }) => {
                        conflicts.push((
                            path.clone(),
                            "the main work tree has a link or a file where its directory would \
                             be"
                            .to_owned(),
                        ));
                        continue;
                    }
                    Err(err) => return Err(err.into()),
                };
                if let Some(meta) = meta
                    && !(meta.kind == Kind::Directory
                        && result.get(path).is_some_and(|e| e.mode == Mode::Gitlink))
                {
                    conflicts.push((
                        path.clone(),
                        format!(
                            "the main work tree holds {} there that git does not track (an \
                             ignored file?)",
                            meta.kind
                        ),
                    ));
                }
            }
        }
        if !conflicts.is_empty() {
            return Ok(conflict_report(conflicts));
        }
        // Deletions first: a path deleted may be the directory a later path needs.
        for (path, take) in &takes {
            if let Take::Delete = take {
                main.remove(&ws_path(path)?)?;
            }
        }
        let mut changed = Vec::new();
        self.refuse_object_links()?;
        for (path, take) in &takes {
            let ws = ws_path(path)?;
            match take {
                Take::Delete => {}
                Take::Task(entry) => {
                    let bytes = read_checked(task_view, &ws, entry)?;
                    self.put(main, &ws, entry, Some(&bytes), Fresh::No)?;
                    self.store_blob(entry, &bytes)?;
                }
                Take::Merged(entry, bytes) => {
                    self.put(main, &ws, entry, Some(bytes), Fresh::No)?;
                    self.store_blob(entry, bytes)?;
                    task_changes.insert(path.clone(), Some(*entry));
                }
            }
            changed.push(String::from_utf8_lossy(path).into_owned());
        }
        // The accepted tree: the old one with the task's changes. A change the main work tree
        // already held (a merge repeated after a crash) has its blob stored from the task's file.
        let (accepted, message) = accepted;
        let (accepted_tree, _) = self.commit_parts(&accepted)?;
        let mut flat = tree::flatten(&self.objects, &accepted_tree)?;
        for (path, entry) in &task_changes {
            match entry {
                Some(entry) => {
                    if !matches!(takes.get(path), Some(Take::Task(_) | Take::Merged(..))) {
                        let bytes = read_checked(task_view, &ws_path(path)?, entry)?;
                        self.store_blob(entry, &bytes)?;
                    }
                    flat.insert(path.clone(), *entry);
                }
                None => {
                    flat.remove(path);
                }
            }
        }
        let tree = tree::write(&self.objects, &flat)?;
        let message = format!("{}\n", message.trim_end());
        let (accepted, _) = self.write_commit(tree, accepted, message)?;
        Ok(Merged::Clean { changed, accepted })
    }

    /// Stores `bytes` as the blob of `entry` unless the store has it (a submodule has none).
    fn store_blob(&self, entry: &Entry, bytes: &[u8]) -> Result<(), GitError> {
        use gix_object::{Exists as _, Write as _};
        if entry.mode == Mode::Gitlink || self.objects.exists(&entry.id) {
            return Ok(());
        }
        let written = self
            .objects
            .write_buf(gix_object::Kind::Blob, bytes)
            .map_err(GitError::library("write a blob"))?;
        if written != entry.id {
            return Err(GitError::Objects(format!(
                "the blob written for {} is {written}",
                entry.id
            )));
        }
        Ok(())
    }

    /// Commits the tree of the run's accepted commit `accepted` on HEAD with `message` and the
    /// trailer lines `trailer` (HEAD its parent, the index rewritten to it), as
    /// [`Repo::commit`] does for a work tree: `Ok(None)` when HEAD has that tree already, HEAD
    /// itself when its message holds every trailer line. Only what the run accepted is
    /// committed, whatever else the main work tree holds.
    pub fn commit_accepted(
        &self,
        accepted: ObjectId,
        message: &str,
        trailer: &str,
    ) -> Result<Option<crate::Committed>, GitError> {
        self.check_pinned()?;
        self.refuse_tampering()?;
        let (tree_id, _) = self.commit_parts(&accepted)?;
        let flat = tree::flatten(&self.objects, &tree_id)?;
        self.commit_flat(flat, message, trailer, &Default::default())
    }

    /// Both trees changed `path` differently: a text merge of the two files against the base
    /// (an add on both sides merges against nothing), or why it conflicts.
    #[allow(clippy::type_complexity)]
    fn merge_file(
        &self,
        main: &View,
        task_view: &View,
        path: &[u8],
        base: Option<&Entry>,
        ours: Option<&Entry>,
        theirs: Option<&Entry>,
    ) -> Result<Result<(Entry, Vec<u8>), String>, GitError> {
        let (Some(o), Some(t)) = (file_entry(ours), file_entry(theirs)) else {
            let what = |e: Option<&Entry>| match e.map(|e| e.mode) {
                None => "deleted it",
                Some(Mode::Link) => "made it a link",
                Some(Mode::Gitlink) => "changed the submodule",
                Some(_) => "changed the file",
            };
            return Ok(Err(format!(
                "the main work tree {} and the task {}",
                what(ours),
                what(theirs)
            )));
        };
        if base.is_some_and(|b| !matches!(b.mode, Mode::File | Mode::Executable)) {
            return Ok(Err(
                "both made it a file where the base has something else".to_owned()
            ));
        }
        // The mode as the three-way rule picks it; both changing it differently cannot happen
        // with two modes.
        let mode = match base {
            Some(b) if b.mode == o.mode => t.mode,
            _ => o.mode,
        };
        let ws = ws_path(path)?;
        let ours_bytes = read_checked(main, &ws, o)?;
        let theirs_bytes = read_checked(task_view, &ws, t)?;
        let base_bytes = match base {
            Some(b) => self.blob_bytes(&b.id)?,
            None => Vec::new(),
        };
        if [&ours_bytes, &theirs_bytes, &base_bytes]
            .iter()
            .any(|bytes| bytes.contains(&0))
        {
            return Ok(Err("both changed it and it is binary".to_owned()));
        }
        use gix_merge::blob::builtin_driver::text;
        let mut out = Vec::new();
        let mut input = gix_imara_diff::InternedInput::default();
        let labels = gix_merge::blob::builtin_driver::text::Labels {
            ancestor: Some("base".into()),
            current: Some("main work tree".into()),
            other: Some("task".into()),
        };
        let options = text::Options {
            conflict: text::Conflict::Keep {
                style: text::ConflictStyle::Diff3,
                marker_size: text::Conflict::DEFAULT_MARKER_SIZE
                    .try_into()
                    .unwrap_or(std::num::NonZeroU8::MIN),
            },
            ..text::Options::default()
        };
        let resolution = gix_merge::blob::builtin_driver::text(
            &mut out,
            &mut input,
            labels,
            &ours_bytes,
            &base_bytes,
            &theirs_bytes,
            options,
        );
        match resolution {
            gix_merge::blob::Resolution::Complete
            | gix_merge::blob::Resolution::CompleteWithAutoResolvedConflict => {
                let id =
                    gix_object::compute_hash(gix_hash::Kind::Sha1, gix_object::Kind::Blob, &out)
                        .map_err(GitError::library("hash a merged file"))?;
                Ok(Ok((Entry { mode, id }, out)))
            }
            gix_merge::blob::Resolution::Conflict => Ok(Err(format!(
                "both changed the same lines:\n{}",
                conflict_hunks(&out)
            ))),
        }
    }
}

/// `entry` when it is a regular file's.
fn file_entry(entry: Option<&Entry>) -> Option<&Entry> {
    entry.filter(|e| matches!(e.mode, Mode::File | Mode::Executable))
}

fn ws_path(path: &[u8]) -> Result<WsPath, GitError> {
    WsPath::from_bytes(path).map_err(|err| {
        GitError::Objects(format!(
            "the path `{}` cannot be merged: {err}",
            cordon_protocol::text::escape_line(&String::from_utf8_lossy(path))
        ))
    })
}

/// The bytes of the file or link at `path`, which must be `entry`'s content (the snapshot's):
/// anything else changed under the merge and refuses it.
fn read_checked(view: &View, path: &WsPath, entry: &Entry) -> Result<Vec<u8>, GitError> {
    let changed = || GitError::View(ViewError::Changed { path: path.shown() });
    let bytes = match entry.mode {
        Mode::Link => view.read_link(path)?.ok_or_else(changed)?,
        Mode::Gitlink => return Ok(Vec::new()),
        Mode::File | Mode::Executable => {
            let limit = usize::try_from(MAX_BLOB).unwrap_or(usize::MAX);
            let read = view
                .read(path, limit.saturating_add(1))?
                .ok_or_else(changed)?;
            read.bytes
        }
    };
    let id = gix_object::compute_hash(gix_hash::Kind::Sha1, gix_object::Kind::Blob, &bytes)
        .map_err(GitError::library("hash a file"))?;
    if id != entry.id {
        return Err(changed());
    }
    Ok(bytes)
}

/// The conflicting regions of a merged text (the lines from each `<<<<<<<` to its `>>>>>>>`),
/// or the start of the text when it has none.
fn conflict_hunks(merged: &[u8]) -> String {
    let text = String::from_utf8_lossy(merged);
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line.starts_with("<<<<<<<") {
            inside = true;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
        if line.starts_with(">>>>>>>") {
            inside = false;
        }
        if out.len() > MAX_CONFLICT_REPORT {
            break;
        }
    }
    out
}

/// The report of a merge that conflicted, bounded.
fn conflict_report(conflicts: Vec<(Vec<u8>, String)>) -> Merged {
    let paths: Vec<String> = conflicts
        .iter()
        .map(|(path, _)| String::from_utf8_lossy(path).into_owned())
        .collect();
    let mut report = String::new();
    for (path, why) in conflicts.iter().take(MAX_CONFLICT_PATHS) {
        report.push_str(&format!(
            "`{}`: {}\n",
            cordon_protocol::text::escape_line(&String::from_utf8_lossy(path)),
            cordon_protocol::text::escape_text(why)
        ));
        if report.len() > MAX_CONFLICT_REPORT {
            break;
        }
    }
    if report.len() > MAX_CONFLICT_REPORT {
        let mut cut = MAX_CONFLICT_REPORT;
        while !report.is_char_boundary(cut) {
            cut -= 1;
        }
        report.truncate(cut);
        report.push_str("\n[cordon: the conflict report is cut here]\n");
    }
    if conflicts.len() > MAX_CONFLICT_PATHS {
        report.push_str(&format!(
            "[cordon: and {} more conflicting paths]\n",
            conflicts.len() - MAX_CONFLICT_PATHS
        ));
    }
    Merged::Conflict { paths, report }
}
