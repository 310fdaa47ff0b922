//! The work tree as git would stage it with `git add -A`, read only through the workspace view:
//! every tracked path and every untracked path that is not ignored, as a flat tree. Regular files
//! are hashed as blobs (streamed), a symbolic link is recorded as a link (its target text, never
//! followed), a directory holding its own `.git` is left as HEAD has it, and anything else — a
//! FIFO, a socket, a device — is skipped and listed.

use std::collections::{BTreeMap, HashMap, HashSet};

use cordon_workspace::{Kind, Limits, Meta, View, ViewError, Visit, Visitor, WsPath};
use gix_object::FindExt;

use crate::GitError;
use crate::ignore::{MAX_MATCHING, MAX_RULES, Rules};
use crate::repo::Repo;
use crate::tree::{Entry, Flat, Mode};

/// Which ignore rules decide whether an untracked path is part of the snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ignoring {
    /// The work tree's own `.gitignore` files (what `git add -A` would do): the commit action,
    /// the dirty-worktree check.
    WorkTree,
    /// A path is left out only when both the work tree's rules and HEAD's rules ignore it: the
    /// step diff, so a `.gitignore` a step wrote cannot hide the files it made from review.
    WorkTreeAndHead,
}

/// Why a work-tree entry is not in the snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Neither a regular file nor a symbolic link.
    Kind(Kind),
    /// A directory with its own `.git` that HEAD does not hold as a submodule.
    Repository,
    /// Could not be read (named in the reason).
    Unreadable(String),
    /// Larger than [`MAX_BLOB`], or a sparse file larger than [`SPARSE_FROM`]: its size.
    TooLarge(u64),
    /// The snapshot already read [`MAX_READ`] bytes of files: its size.
    OverBudget(u64),
}

/// The largest file the host's git reads: a bigger one is skipped and listed, so a step cannot
/// make the host hash without end.
pub const MAX_BLOB: u64 = 1 << 30;
/// From this size on a sparse file (less than half of it allocated) is skipped and listed: its
/// holes would cost the host reading time the step never paid for in writing.
pub const SPARSE_FROM: u64 = 1 << 20;
/// The most bytes of files one snapshot reads: past it, files are skipped and listed. Every byte
/// read was written by the step (sparse files are skipped, hard links read once), so this bounds
/// what a step that filled its disk can make the host hash after each attempt.
pub const MAX_READ: u64 = 64 << 30;

/// Whether the host's git leaves this file out for its size.
fn too_large(meta: &Meta) -> bool {
    meta.size > MAX_BLOB || (meta.size > SPARSE_FROM && meta.allocated < meta.size / 2)
}

/// One skipped entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub path: String,
    pub why: Skip,
}

/// `.gitmodules`, `.gitattributes` or `.gitignore` in any letter case: files git reads from
/// the work tree, which must not be links.
fn is_git_control_file(name: &[u8]) -> bool {
    [&b".gitmodules"[..], b".gitattributes", b".gitignore"]
        .iter()
        .any(|control| name.eq_ignore_ascii_case(control))
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.why {
            Skip::Kind(kind) => write!(f, "{} ({kind})", self.path),
            Skip::Repository => write!(f, "{} (a repository of its own)", self.path),
            Skip::Unreadable(reason) => write!(f, "{} ({reason})", self.path),
            Skip::TooLarge(size) => write!(
                f,
                "{} ({size} bytes, sparse or larger than {MAX_BLOB}; not read)",
                self.path
            ),
            Skip::OverBudget(size) => write!(
                f,
                "{} ({size} bytes; the snapshot already read {MAX_READ} bytes; not read)",
                self.path
            ),
        }
    }
}

/// A snapshot entry and, when the file was read, the metadata it was read with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub entry: Entry,
    pub meta: Option<Meta>,
}

/// The work tree as a flat tree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub entries: BTreeMap<Vec<u8>, Seen>,
    pub skipped: Vec<Skipped>,
    /// Bytes of work-tree files read to build it: a file the stat cache or an earlier hard link
    /// answered is not read again.
    pub read: u64,
    /// Bytes of HEAD's `.gitignore` blobs read (a diff honours them as well as the work tree's).
    pub head_rules_read: u64,
}

impl Snapshot {
    pub fn flat(&self) -> Flat {
        self.entries
            .iter()
            .map(|(path, seen)| (path.clone(), seen.entry))
            .collect()
    }
}

/// Blob ids of files already hashed, by path and the metadata they had: a file whose `lstat`
/// (device, inode, size, mode, mtime, ctime — ctime cannot be set back by a process) is
/// unchanged is not read again.
#[derive(Debug, Default)]
pub struct StatCache {
    ids: HashMap<Vec<u8>, (Meta, Entry)>,
}

impl StatCache {
    fn get(&self, path: &[u8], meta: &Meta) -> Option<Entry> {
        self.ids
            .get(path)
            .filter(|(cached, _)| cached == meta)
            .map(|(_, entry)| *entry)
    }
}

impl Repo {
    /// The work tree of `workspace` as a snapshot against HEAD's tree `head`.
    pub fn snapshot(
        &self,
        workspace: &View,
        head: &Flat,
        ignoring: Ignoring,
        cache: &mut StatCache,
    ) -> Result<Snapshot, GitError> {
        self.check_pinned()?;
        let mut work_rules = Rules::default();
        let exclude = self.info_exclude();
        if work_rules.add_global(&exclude).is_err() && ignoring == Ignoring::WorkTree {
            return Err(GitError::IgnoreTooLarge {
                path: "info/exclude".to_owned(),
            });
        }
        let (head_rules, head_rules_read) = match ignoring {
            Ignoring::WorkTree => (None, 0),
            Ignoring::WorkTreeAndHead => {
                let (rules, read) = self.head_rules(head, &exclude);
                (Some(rules), read)
            }
        };
        let mut scan = Scan {
            view: workspace,
            head,
            work_rules,
            head_rules,
            ignoring,
            cache,
            guard: &self.guard,
            inodes: HashMap::new(),
            read: 0,
            snapshot: Snapshot::default(),
            ignored_dirs: HashSet::new(),
            matched: 0,
            matching_spent: false,
            path_bytes: 0,
            failure: None,
        };
        scan.load_rules(None)?;
        let walked = workspace.walk(&Limits::default(), &mut scan);
        if let Some(failure) = scan.failure.take() {
            return Err(failure);
        }
        walked?;
        let mut snapshot = scan.snapshot;
        snapshot.read = scan.read;
        snapshot.head_rules_read = head_rules_read;
        // What HEAD holds that the work tree cannot address (a name the view refuses, such as a
        // component `.git` in a forged tree), and every masked path, is kept as HEAD has it.
        for (path, entry) in head {
            if WsPath::from_bytes(path).is_err() || self.guard.masks(path) {
                snapshot.entries.insert(
                    path.clone(),
                    Seen {
                        entry: *entry,
                        meta: None,
                    },
                );
            }
        }
        Ok(snapshot)
    }

    /// HEAD's `.gitignore` rules, parents before children, and the bytes of rule blobs read.
    fn head_rules(&self, head: &Flat, exclude: &[u8]) -> (Rules, u64) {
        use gix_object::FindHeader as _;
        // Past the budget the diff shows more, never less: rules that do not fit are left out.
        let mut rules = Rules::default();
        let _ = rules.add_global(exclude);
        let mut files: Vec<(&[u8], &Entry)> = head
            .iter()
            .filter(|(path, entry)| {
                entry.mode == Mode::File
                    && (path.as_slice() == b".gitignore" || path.ends_with(b"/.gitignore"))
            })
            .map(|(path, entry)| (path.as_slice(), entry))
            .collect();
        files.sort_by_key(|(path, _)| (path.iter().filter(|&&b| b == b'/').count(), *path));
        let mut buffer = Vec::new();
        let mut read = 0u64;
        for (path, entry) in files {
            // The header first: a blob is inflated only when it fits, so a `.gitignore` of a
            // gigabyte committed by a step (`allow_git_mutations`) costs a lookup.
            match self.objects.try_header(&entry.id) {
                Ok(Some(header)) if header.size <= MAX_RULES as u64 => {}
                _ => continue,
            }
            let Ok(blob) = self.objects.find_blob(&entry.id, &mut buffer) else {
                continue;
            };
            read += blob.data.len() as u64;
            let dir = &path[..path.len() - b".gitignore".len()];
            let dir = dir.strip_suffix(b"/").unwrap_or(dir);
            if rules.add(dir, blob.data).is_err() {
                break;
            }
        }
        (rules, read)
    }
}

/// A file's identity and state: device, inode, size, mtime, ctime.
type Inode = (u64, u64, u64, (i64, u32), (i64, u32));

fn inode(meta: &Meta) -> Inode {
    (meta.dev, meta.ino, meta.size, meta.mtime, meta.ctime)
}

struct Scan<'a> {
    view: &'a View,
    head: &'a Flat,
    work_rules: Rules,
    head_rules: Option<Rules>,
    ignoring: Ignoring,
    cache: &'a mut StatCache,
    guard: &'a crate::Guard,
    /// Blob ids by the identity and state of the file read (device, inode, size, mtime, ctime):
    /// a file with a thousand hard links is read once.
    inodes: HashMap<Inode, gix_hash::ObjectId>,
    /// Bytes of files read so far, against [`MAX_READ`].
    read: u64,
    snapshot: Snapshot,
    /// Ignored directories the walk still enters because HEAD tracks paths below them: their
    /// untracked entries stay ignored (git does not re-include below an excluded directory).
    ignored_dirs: HashSet<Vec<u8>>,
    /// Matching work spent, against [`MAX_MATCHING`]; once it is spent, a diff ignores nothing
    /// more.
    matched: u64,
    matching_spent: bool,
    /// Bytes of the paths visited, against `tree::MAX_TOTAL_PATH_BYTES`.
    path_bytes: usize,
    /// The first error, which ends the walk (a visitor cannot return one).
    failure: Option<GitError>,
}

impl Scan<'_> {
    /// Whether `path` is ignored, within [`MAX_MATCHING`]: past it a commit refuses, and a diff
    /// ignores nothing more (it shows more, never less).
    fn ignored(&mut self, path: &[u8], is_dir: bool) -> Result<bool, GitError> {
        let parent_ignored = path
            .iter()
            .enumerate()
            .filter(|&(_, &b)| b == b'/')
            .any(|(at, _)| self.ignored_dirs.contains(&path[..at]));
        if parent_ignored {
            return Ok(true);
        }
        let cost = self
            .work_rules
            .cost(path)
            .saturating_add(self.head_rules.as_ref().map_or(0, |rules| rules.cost(path)));
        if self.matching_spent || self.matched.saturating_add(cost) > MAX_MATCHING {
            return match self.ignoring {
                Ignoring::WorkTree => Err(GitError::IgnoreTooSlow),
                Ignoring::WorkTreeAndHead => {
                    self.matching_spent = true;
                    Ok(false)
                }
            };
        }
        self.matched += cost;
        Ok(self.work_rules.ignored(path, is_dir)
            && self
                .head_rules
                .as_ref()
                .is_none_or(|rules| rules.ignored(path, is_dir)))
    }

    fn tracked_below(&self, dir: &[u8]) -> bool {
        let mut prefix = dir.to_vec();
        prefix.push(b'/');
        self.head
            .range(prefix.clone()..)
            .next()
            .is_some_and(|(path, _)| path.starts_with(&prefix))
    }

    /// Reads `dir/.gitignore` (the top's for `None`) into the work tree's rules.
    fn load_rules(&mut self, dir: Option<&WsPath>) -> Result<(), GitError> {
        let path = WsPath::child(dir, b".gitignore").map_err(|_| {
            GitError::from(cordon_workspace::WalkError::TooDeep {
                path: dir.map_or_else(String::new, WsPath::shown),
                limit: cordon_workspace::MAX_PATH,
            })
        })?;
        match self.view.read(&path, MAX_RULES + 1) {
            Ok(Some(read)) => {
                let added = self
                    .work_rules
                    .add(dir.map_or(&b""[..], WsPath::as_bytes), &read.bytes);
                match (added, self.ignoring) {
                    (Ok(()), _) => Ok(()),
                    // The diff shows more rather than fail on rule files a step inflated.
                    (Err(_), Ignoring::WorkTreeAndHead) => Ok(()),
                    (Err(_), Ignoring::WorkTree) => {
                        Err(GitError::IgnoreTooLarge { path: path.shown() })
                    }
                }
            }
            // Absent, or not a regular file: git reads no rules from a linked `.gitignore`
            // either.
            Ok(None) | Err(ViewError::NotAFile { .. }) => Ok(()),
            Err(err) => Err(err.into()),
        }
    }

    fn keep_head(&mut self, path: &[u8]) {
        if let Some(entry) = self.head.get(path) {
            self.snapshot.entries.insert(
                path.to_vec(),
                Seen {
                    entry: *entry,
                    meta: None,
                },
            );
        }
    }

    /// Keeps every HEAD entry at or below `dir`.
    fn keep_head_below(&mut self, dir: &[u8]) {
        let mut prefix = dir.to_vec();
        prefix.push(b'/');
        let below: Vec<(Vec<u8>, Entry)> = self
            .head
            .range(prefix.clone()..)
            .take_while(|(path, _)| path.starts_with(&prefix))
            .map(|(path, entry)| (path.clone(), *entry))
            .collect();
        for (path, entry) in below {
            self.snapshot
                .entries
                .insert(path, Seen { entry, meta: None });
        }
        self.keep_head(dir);
    }

    fn skip(&mut self, path: &WsPath, why: Skip) {
        self.snapshot.skipped.push(Skipped {
            path: path.shown(),
            why,
        });
    }

    /// The blob entry of the regular file or link at `path`.
    fn read(&mut self, path: &WsPath, meta: &Meta) -> Result<Option<Entry>, GitError> {
        if let Some(entry) = self.cache.get(path.as_bytes(), meta) {
            return Ok(Some(entry));
        }
        let entry = match meta.kind {
            Kind::Symlink => {
                let Some(target) = self.view.read_link(path)? else {
                    return Ok(None);
                };
                Entry {
                    mode: Mode::Link,
                    id: gix_object::compute_hash(
                        gix_hash::Kind::Sha1,
                        gix_object::Kind::Blob,
                        &target,
                    )
                    .map_err(GitError::library("hash a link"))?,
                }
            }
            _ => {
                let inode = inode(meta);
                let mode = if meta.executable() {
                    Mode::Executable
                } else {
                    Mode::File
                };
                if let Some(id) = self.inodes.get(&inode) {
                    return Ok(Some(Entry { mode, id: *id }));
                }
                let mut hasher = gix_hash::hasher(gix_hash::Kind::Sha1);
                hasher.update(&gix_object::encode::loose_header(
                    gix_object::Kind::Blob,
                    meta.size,
                ));
                let mut length = 0u64;
                let opened = self.view.stream(path, &mut |piece| {
                    length += piece.len() as u64;
                    hasher.update(piece);
                })?;
                let Some(opened) = opened else {
                    return Ok(None);
                };
                if length != meta.size || opened.size != meta.size {
                    return Err(ViewError::Changed { path: path.shown() }.into());
                }
                let id = hasher
                    .try_finalize()
                    .map_err(GitError::library("hash a file"))?;
                self.inodes.insert(inode, id);
                Entry { mode, id }
            }
        };
        self.cache
            .ids
            .insert(path.as_bytes().to_vec(), (*meta, entry));
        Ok(Some(entry))
    }

    fn visit(&mut self, path: &WsPath, meta: &Meta) -> Result<Visit, GitError> {
        let bytes = path.as_bytes();
        // Every path is held in the snapshot (and copied by the diff): bounded in all, as HEAD's
        // tree is, since deep directories make each name kilobytes long.
        self.path_bytes = self.path_bytes.saturating_add(bytes.len());
        if self.path_bytes > crate::tree::MAX_TOTAL_PATH_BYTES {
            return Err(GitError::WorkTreeTooLarge {
                limit: crate::tree::MAX_TOTAL_PATH_BYTES,
            });
        }
        // Masked in every sandbox, so nothing a step did is there to record, and what is there
        // (a secret) is never the host's to read. HEAD's entries are kept after the walk.
        if self.guard.masks(bytes) {
            return Ok(Visit::Skip);
        }
        let tracked = self.head.get(bytes);
        match meta.kind {
            Kind::Directory => {
                if tracked.is_some_and(|e| e.mode == Mode::Gitlink) {
                    self.keep_head(bytes);
                    return Ok(Visit::Skip);
                }
                if self.ignored(bytes, true)? {
                    if !self.tracked_below(bytes) {
                        return Ok(Visit::Skip);
                    }
                    self.ignored_dirs.insert(bytes.to_vec());
                }
                self.load_rules(Some(path))?;
                Ok(Visit::Descend)
            }
            Kind::File | Kind::Symlink => {
                if tracked.is_none() && self.ignored(bytes, false)? {
                    return Ok(Visit::Skip);
                }
                if meta.kind == Kind::File && too_large(meta) {
                    self.keep_head(bytes);
                    self.skip(path, Skip::TooLarge(meta.size));
                    return Ok(Visit::Skip);
                }
                // git refuses these as links (fsck's `gitmodulesSymlink` is an error, and a
                // checkout would read through them): kept as HEAD has them, and named.
                if meta.kind == Kind::Symlink && is_git_control_file(path.file_name()) {
                    self.keep_head(bytes);
                    self.skip(path, Skip::Kind(Kind::Symlink));
                    return Ok(Visit::Skip);
                }
                if meta.kind == Kind::File
                    && self.cache.get(bytes, meta).is_none()
                    && !self.inodes.contains_key(&inode(meta))
                {
                    if self.read.saturating_add(meta.size) > MAX_READ {
                        self.keep_head(bytes);
                        self.skip(path, Skip::OverBudget(meta.size));
                        return Ok(Visit::Skip);
                    }
                    self.read += meta.size;
                }
                match self.read(path, meta) {
                    Ok(Some(entry)) => {
                        self.snapshot.entries.insert(
                            bytes.to_vec(),
                            Seen {
                                entry,
                                meta: Some(*meta),
                            },
                        );
                    }
                    // Gone since the listing: as if it were never there.
                    Ok(None) => {}
                    Err(GitError::View(err)) => {
                        self.keep_head(bytes);
                        self.skip(path, Skip::Unreadable(err.to_string()));
                    }
                    Err(err) => return Err(err),
                }
                Ok(Visit::Skip)
            }
            kind => {
                if tracked.is_some() || !self.ignored(bytes, false)? {
                    self.keep_head(bytes);
                    self.skip(path, Skip::Kind(kind));
                }
                Ok(Visit::Skip)
            }
        }
    }
}

impl Visitor for Scan<'_> {
    fn entry(&mut self, path: &WsPath, meta: &Meta) -> Visit {
        if self.failure.is_some() {
            return Visit::Skip;
        }
        match self.visit(path, meta) {
            Ok(visit) => visit,
            Err(err) => {
                self.failure = Some(err);
                Visit::Skip
            }
        }
    }

    fn repository(&mut self, path: &WsPath) {
        let bytes = path.as_bytes();
        if self
            .head
            .get(bytes)
            .is_some_and(|e| e.mode == Mode::Gitlink)
        {
            self.keep_head(bytes);
        } else {
            // What HEAD tracks below it stays as it is: cordon does not read another
            // repository's work tree.
            self.keep_head_below(bytes);
            match self.ignored(bytes, true) {
                Ok(true) => {}
                Ok(false) => self.skip(path, Skip::Repository),
                Err(err) => {
                    self.failure.get_or_insert(err);
                }
            }
        }
    }
}
