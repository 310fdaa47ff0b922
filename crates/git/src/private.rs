//! A session's private git directory: `allow_git_mutations` on an ordinary repository
//! (DESIGN §11) without the sandbox ever writing into the host's `.git`.
//!
//! The live way to let a sandbox change the git directory — mount it read-write and keep its
//! configuration entries read-only — needs each of those entries to exist, since a mount needs
//! something to cover; `git init` and `git clone` leave `commondir`, `config.worktree` and
//! `objects/info/alternates` absent, and creating them in the host's `.git` is exactly what must
//! not happen. So for an ordinary repository each session instead gets a git directory of its
//! own, made by cordon in the state directory and mounted where `.git` is:
//!
//! * `HEAD`, every ref (as one `packed-refs`, symbolic refs as loose files), the index and
//!   `shallow` are copies of the host's; `logs/` starts empty;
//! * `config`, `hooks/` and `info/` are the host's, mounted read-only over placeholders;
//! * new objects go to its own `objects/`, and `objects/info/alternates` names the host's object
//!   store, mounted read-only at [`OBJECTS_MOUNT`] inside it — nothing is copied at start.
//!
//! Whatever the sandbox creates there (a `commondir`, a hook, an alternates file of its own)
//! affects only the git inside that session. When the session has ended — every process in it is
//! gone, so nothing changes under the import — [`PrivateGit::import`] brings its work into the
//! host's repository, reading the private directory only through a [`View`] (no link followed,
//! every read bounded), in an order that never leaves the host inconsistent:
//!
//! 1. objects: each one the host lacks is read (sized from its header first), written to the
//!    host's store under the id gitoxide computes — a file stored under another object's name
//!    is refused — and every new commit, tree and tag must name only objects the host now has;
//! 2. refs: each ref (and `HEAD`) the session changed is moved with a compare-and-swap against the
//!    value the session started from, under git's own lock files; a ref the host moved meanwhile
//!    is left as the host has it, and the session's value is kept as
//!    `refs/cordon/rescued/<session>/…` instead;
//! 3. the index: replaced only when the host's is still the one the session started from, and
//!    never when it would add a submodule entry (which makes the host's git enter a directory
//!    the sandbox wrote).
//!
//! A session cordon could not import (killed, or interrupted before it ended) leaves its
//! directory and start record; the next session on the same repository imports it first. The
//! start record lives beside the directory, outside anything the sandbox could write.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::Write as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use cordon_workspace::{Kind, Removed, View, ViewError, WsPath};
use gix_hash::ObjectId;
use gix_object::bstr::BString;
use gix_object::{Exists as _, Find as _, FindHeader as _, Write as _};

use crate::GitError;
use crate::refs::{MAX_PACKED_REFS, MAX_REF, Target, parse_loose};

/// Where, inside the private git directory, the host's object store is mounted read-only (the
/// private `objects/info/alternates` names it).
pub const OBJECTS_MOUNT: &str = "cordon-objects";
/// The most refs a repository may have for a private git directory.
pub const MAX_REFS: usize = 100_000;
/// The deepest ref name (in directories below `refs/`) read.
const MAX_REF_DEPTH: usize = 32;
/// The largest index copied into, or imported from, a private git directory.
pub const MAX_INDEX: usize = 256 << 20;
/// The largest `shallow` file copied.
const MAX_SHALLOW: usize = 64 << 20;
/// The most objects one session may bring into the repository.
pub const MAX_IMPORT_OBJECTS: usize = 1_000_000;
/// The most object entries (new or not, duplicates included) read from one session's store.
const MAX_LISTED: usize = 4 * MAX_IMPORT_OBJECTS;
/// The most bytes (inflated) one session may bring into the repository.
pub const MAX_IMPORT_BYTES: u64 = 16 << 30;

/// The entries whose absence makes the live way impossible (see the module documentation).
const PROTECTED: [&str; 6] = [
    "config",
    "config.worktree",
    "commondir",
    "hooks",
    "info",
    "objects/info/alternates",
];

/// What [`prepare`] found.
#[derive(Debug, Default)]
pub struct Prepared {
    /// The session's private git directory; `None` when the repository is not an ordinary one
    /// that needs it (every protected entry exists, it is a linked worktree, or there is no
    /// `.git` directory): the sandbox then mounts the git directory itself, as before.
    pub private: Option<PrivateGit>,
    /// What importing earlier, interrupted sessions did (one line each, for the terminal).
    pub notes: Vec<String>,
}

/// A session's private git directory, from [`prepare`] until [`PrivateGit::import`].
#[derive(Debug)]
pub struct PrivateGit {
    /// The host's git directory (the workspace's `.git`).
    git_dir: PathBuf,
    /// The private directory, mounted at `git_dir` in the session.
    dir: PathBuf,
    /// The start record beside it.
    record: PathBuf,
    /// The lock file, held (`flock`) for as long as this lives.
    lock_path: PathBuf,
    _lock: File,
    id: String,
    start: Start,
}

/// What a session started from: written beside the private directory (where no sandbox can
/// reach) so an interrupted session can still be imported.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Start {
    /// Every ref and `HEAD`: a hex id, or `ref: <name>`.
    refs: BTreeMap<String, String>,
    /// The hex SHA-1 of the index's bytes; `None` without an index.
    index: Option<String>,
}

/// What one import did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Imported {
    pub objects: usize,
    pub refs: usize,
    pub index: bool,
    /// What was left as the host has it, and why (one line each).
    pub notes: Vec<String>,
}

/// Gets a private git directory ready for a session on `workspace` (canonical), in
/// `state_dir/git/`, when its repository needs one; imports the work of earlier sessions on it
/// that were interrupted first.
pub fn prepare(workspace: &Path, state_dir: &Path) -> Result<Prepared, GitError> {
    let git_dir = workspace.join(".git");
    match fs::symlink_metadata(&git_dir) {
        Ok(meta) if meta.is_dir() => {}
        _ => return Ok(Prepared::default()),
    }
    let present = |name: &str| fs::symlink_metadata(git_dir.join(name)).is_ok();
    // Every entry there: the live way works. A `commondir` or an alternates file of the host's
    // own: not an ordinary repository, and the sandbox's own checks decide (and refuse).
    if PROTECTED.iter().all(|name| present(name))
        || present("commondir")
        || present("objects/info/alternates")
    {
        return Ok(Prepared::default());
    }
    let refuse = |problem: &str| GitError::PrivateGit {
        git_dir: git_dir.clone(),
        problem: problem.to_owned(),
    };
    if present("modules") {
        return Err(refuse(
            "holds submodule git directories (`modules/`), which a private copy cannot carry",
        ));
    }
    if present("worktrees") {
        return Err(refuse(
            "has linked worktrees (`worktrees/`), which a private copy cannot carry",
        ));
    }
    let host = View::open(&git_dir).map_err(GitError::io("open", &git_dir))?;
    let top = host.list(None, MAX_REFS)?;
    if top
        .entries
        .iter()
        .any(|e| e.name.starts_with(b"sharedindex."))
    {
        return Err(refuse(
            "has a split index (`sharedindex.*`); run `git update-index --no-split-index` first",
        ));
    }

    let base = state_dir.join("git").join(key(&git_dir));
    fs::create_dir_all(&base).map_err(GitError::io("create", &base))?;
    let owner = fs::metadata(workspace).map_err(GitError::io("inspect", workspace))?;
    let owner = (owner.uid(), owner.gid());
    let notes = import_leftovers(&git_dir, &base)?;

    let id = session_id();
    let lock_path = base.join(format!("{id}.lock"));
    let lock = File::create(&lock_path).map_err(GitError::io("create", &lock_path))?;
    lock.try_lock()
        .map_err(|err| GitError::io("lock", &lock_path)(std::io::Error::other(err.to_string())))?;
    let dir = base.join(&id);
    let record = base.join(format!("{id}.json"));
    let start = build(&host, &git_dir, &dir, owner).inspect_err(|_| {
        let _ = remove_tree(&dir);
        let _ = fs::remove_file(&lock_path);
    })?;
    write_atomically(&record, &serde_json::to_vec(&start).unwrap_or_default())?;
    Ok(Prepared {
        private: Some(PrivateGit {
            git_dir,
            dir,
            record,
            lock_path,
            _lock: lock,
            id,
            start,
        }),
        notes,
    })
}

impl PrivateGit {
    /// The host's git directory, where the session sees the private one.
    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    /// The private directory to mount at [`PrivateGit::git_dir`].
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the host's object store is to be mounted read-only in the session.
    pub fn objects_mount(&self) -> PathBuf {
        self.git_dir.join(OBJECTS_MOUNT)
    }

    /// Brings the session's work into the host's repository (see the module documentation),
    /// then removes the private directory. Call only once every process of the session is gone.
    /// On an error nothing of the session's refs or index was imported.
    pub fn import(self) -> Result<Imported, GitError> {
        let result = import(&self.git_dir, &self.dir, &self.id, &self.start);
        let _ = remove_tree(&self.dir);
        let _ = fs::remove_file(&self.record);
        let _ = fs::remove_file(&self.lock_path);
        result
    }
}

/// Imports (then removes) every session in `base` whose lock no process holds: one that was
/// killed or interrupted before cordon could import it.
fn import_leftovers(git_dir: &Path, base: &Path) -> Result<Vec<String>, GitError> {
    let mut notes = Vec::new();
    let entries = fs::read_dir(base).map_err(GitError::io("list", base))?;
    let mut ids = BTreeSet::new();
    for entry in entries.flatten().take(MAX_LEFTOVERS) {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let id = name.split('.').next().unwrap_or_default().to_owned();
        if !id.is_empty() {
            ids.insert(id);
        }
    }
    for id in ids {
        let lock_path = base.join(format!("{id}.lock"));
        let lock = match File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
        {
            Ok(lock) => lock,
            Err(_) => continue,
        };
        // A live session's: leave it.
        if lock.try_lock().is_err() {
            continue;
        }
        let dir = base.join(&id);
        let record = base.join(format!("{id}.json"));
        let start = fs::read(&record)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Start>(&bytes).ok());
        if let Some(start) = start
            && dir.is_dir()
        {
            match import(git_dir, &dir, &id, &start) {
                Ok(imported) => {
                    notes.push(format!(
                        "imported the git work of an interrupted session ({} objects, {} refs{})",
                        imported.objects,
                        imported.refs,
                        if imported.index { ", the index" } else { "" }
                    ));
                    notes.extend(imported.notes);
                }
                Err(err) => notes.push(format!(
                    "the git work of an interrupted session could not be imported and was \
                     removed: {err}"
                )),
            }
        }
        let _ = remove_tree(&dir);
        let _ = fs::remove_file(&record);
        let _ = fs::remove_file(&lock_path);
    }
    Ok(notes)
}

/// The most entries of a repository's `git/<key>/` directory looked at for leftovers.
const MAX_LEFTOVERS: usize = 10_000;

/// Builds the private directory `dir` from the host's git directory (read through `host`);
/// returns what it started from.
fn build(host: &View, git_dir: &Path, dir: &Path, owner: (u32, u32)) -> Result<Start, GitError> {
    let refs = read_refs(host, git_dir)?;
    let mkdir = |relative: &str| -> Result<(), GitError> {
        let path = dir.join(relative);
        fs::create_dir(&path).map_err(GitError::io("create", &path))
    };
    let write = |relative: &str, bytes: &[u8]| -> Result<(), GitError> {
        let path = dir.join(relative);
        fs::write(&path, bytes).map_err(GitError::io("write", &path))
    };
    fs::create_dir(dir).map_err(GitError::io("create", dir))?;
    for relative in [
        "refs",
        "refs/heads",
        "refs/tags",
        "objects",
        "objects/info",
        "objects/pack",
        "logs",
        "hooks",
        "info",
        OBJECTS_MOUNT,
    ] {
        mkdir(relative)?;
    }
    // Placeholders for the host's own, mounted over them read-only.
    write("config", b"")?;
    write(
        "objects/info/alternates",
        format!("{}\n", git_dir.join(OBJECTS_MOUNT).display()).as_bytes(),
    )?;
    let mut packed = String::from("# pack-refs with: sorted\n");
    for (name, target) in &refs {
        match target {
            Target::Object(id) if name != "HEAD" => packed.push_str(&format!("{id} {name}\n")),
            Target::Object(id) => write("HEAD", format!("{id}\n").as_bytes())?,
            Target::Symbolic(to) => {
                // A loose file for each symbolic ref (`packed-refs` holds only ids).
                let path = dir.join(name);
                if let Some(parent) = path.parent() {
                    fs::create_dir_all(parent).map_err(GitError::io("create", parent))?;
                }
                fs::write(&path, format!("ref: {to}\n")).map_err(GitError::io("write", &path))?;
            }
        }
    }
    write("packed-refs", packed.as_bytes())?;
    let index = read_bounded(host, "index", MAX_INDEX, git_dir)?;
    if let Some(bytes) = &index {
        write("index", bytes)?;
    }
    if let Some(bytes) = read_bounded(host, "shallow", MAX_SHALLOW, git_dir)? {
        write("shallow", &bytes)?;
    }
    chown_tree(dir, owner)?;
    Ok(Start {
        refs: refs
            .into_iter()
            .map(|(name, target)| (name, encode(&target)))
            .collect(),
        index: index.as_deref().map(digest),
    })
}

/// Imports the session in `dir` into the repository at `git_dir` (see the module
/// documentation).
fn import(git_dir: &Path, dir: &Path, id: &str, start: &Start) -> Result<Imported, GitError> {
    let view = View::open(dir).map_err(GitError::io("open", dir))?;
    let mut imported = Imported::default();
    let planted = |what: &str| {
        GitError::Objects(format!(
            "the session's git directory holds {what} (the sandbox planted it); nothing of it \
             was imported"
        ))
    };
    // The session's own alternates file names a path of the session's, never read here.
    let alternates = WsPath::new("objects/info/alternates").expect("a plain path");
    match view.remove(&alternates) {
        Ok(Removed::KeptDirectory) => return Err(planted("a directory as its alternates file")),
        Ok(_) => {}
        Err(_) => return Err(planted("a link in its object store")),
    }
    let packs = crate::repo::store_packs(&view, dir, None)?;
    if packs.iter().map(|(_, size, _)| size).sum::<u64>() > MAX_IMPORT_BYTES {
        return Err(GitError::Objects(format!(
            "the session's packs add up to more than {MAX_IMPORT_BYTES} bytes; nothing of it was \
             imported"
        )));
    }
    for (pack, _, _) in packs {
        crate::pack::refuse_deep_chains(&dir.join(pack.shown()))?;
    }
    let options = gix_odb::store::init::Options {
        alloc_limit_bytes: usize::try_from(crate::MAX_BLOB + (1 << 10)).ok(),
        ..Default::default()
    };
    let open = |path: PathBuf, options: gix_odb::store::init::Options| {
        gix_odb::at_opts(&path, gix_hash::Kind::Sha1, None, options)
            .map_err(GitError::io("open the object store", path))
    };
    // The session's own multi-pack index is not read: its packs are found one by one.
    let private = gix_odb::store::init::Options {
        use_multi_pack_index: false,
        ..options.clone()
    };
    let theirs = open(dir.join("objects"), private)?;
    let ours = open(git_dir.join("objects"), options)?;
    let new = copy_objects(&theirs, &ours)?;
    check_connected(&ours, &new)?;
    imported.objects = new.len();
    let mut touched: Vec<String> = new
        .iter()
        .map(|id| {
            let hex = id.to_string();
            format!("objects/{}/{}", &hex[..2], &hex[2..])
        })
        .collect();

    let end = read_refs(&view, dir)?;
    let begun: BTreeMap<String, Target> = start
        .refs
        .iter()
        .filter_map(|(name, text)| decode(text).map(|t| (name.clone(), t)))
        .collect();
    let store = gix_ref::file::Store::at(git_dir.to_path_buf(), gix_hash::Kind::Sha1);
    let names: BTreeSet<&String> = begun.keys().chain(end.keys()).collect();
    // `HEAD` last: a new branch exists before HEAD names it.
    let ordered = names
        .iter()
        .filter(|n| n.as_str() != "HEAD")
        .chain(names.iter().filter(|n| n.as_str() == "HEAD"));
    for name in ordered {
        let (old, new) = (begun.get(*name), end.get(*name));
        if old == new {
            continue;
        }
        if let Some(Target::Object(target)) = new
            && !ours.exists(target)
        {
            imported.notes.push(format!(
                "`{name}` was left as it was: the session set it to {target}, an object it never \
                 wrote"
            ));
            continue;
        }
        match move_ref(&store, name, old, new) {
            Ok(()) => {
                imported.refs += 1;
                touched.extend([name.to_string(), format!("logs/{name}")]);
            }
            Err(err) => {
                let kept = match new {
                    Some(Target::Object(target)) => rescue(&store, id, name, *target)
                        .map(|rescued| format!("; the session's {target} is kept as `{rescued}`"))
                        .unwrap_or_default(),
                    _ => String::new(),
                };
                imported.notes.push(format!(
                    "`{name}` was left as the host has it ({err}){kept}"
                ));
            }
        }
    }

    import_index(git_dir, &view, start, &mut imported)?;
    if imported.index {
        touched.push("index".to_owned());
    }
    give_back(git_dir, dir, &touched);
    Ok(imported)
}

/// As root, what the import created in the host's git directory is root's; each such entry on
/// the way to each of `touched` (relative to `git_dir`) is given to the git directory's owner,
/// so the user's own git can go on writing there. Nothing to do when cordon is that owner.
fn give_back(git_dir: &Path, private: &Path, touched: &[String]) {
    // The directory cordon made for the session's repository is cordon's own.
    let Some(me) = private
        .parent()
        .and_then(|base| fs::metadata(base).ok())
        .map(|m| m.uid())
    else {
        return;
    };
    let Ok(owner) = fs::metadata(git_dir) else {
        return;
    };
    if owner.uid() == me {
        return;
    }
    let mut done = BTreeSet::new();
    for relative in touched {
        let mut path = git_dir.to_path_buf();
        for component in Path::new(relative).components() {
            path.push(component);
            if !done.insert(path.clone()) {
                continue;
            }
            if fs::symlink_metadata(&path).is_ok_and(|m| m.uid() == me) {
                let _ = std::os::unix::fs::lchown(&path, Some(owner.uid()), Some(owner.gid()));
            }
        }
    }
}

/// Copies every object of `theirs` that `ours` lacks; returns their ids.
fn copy_objects(
    theirs: &gix_odb::Handle,
    ours: &gix_odb::Handle,
) -> Result<Vec<ObjectId>, GitError> {
    let mut new = Vec::new();
    let mut seen = BTreeSet::new();
    let mut listed = 0usize;
    let mut bytes = 0u64;
    let mut buffer = Vec::new();
    let refused = |why: String| GitError::Objects(format!("the session's objects {why}"));
    for id in theirs
        .iter()
        .map_err(GitError::library("list the session's objects"))?
    {
        let id = id.map_err(|err| refused(format!("cannot be listed ({err})")))?;
        listed += 1;
        if listed > MAX_LISTED {
            return Err(refused(format!(
                "list more than {MAX_LISTED} entries; commit less in one step"
            )));
        }
        if ours.exists(&id) || !seen.insert(id) {
            continue;
        }
        if seen.len() > MAX_IMPORT_OBJECTS {
            return Err(refused(format!(
                "number more than {MAX_IMPORT_OBJECTS}; commit less in one step"
            )));
        }
        let header = theirs
            .try_header(&id)
            .map_err(|err| refused(format!("hold {id}, which cannot be read ({err})")))?
            .ok_or_else(|| refused(format!("list {id} but do not hold it")))?;
        if header.size > crate::MAX_BLOB {
            return Err(refused(format!(
                "hold {id} of {} bytes, more than {} (cordon's largest)",
                header.size,
                crate::MAX_BLOB
            )));
        }
        bytes += header.size;
        if bytes > MAX_IMPORT_BYTES {
            return Err(refused(format!(
                "add up to more than {MAX_IMPORT_BYTES} bytes; commit less in one step"
            )));
        }
        let object = theirs
            .try_find(&id, &mut buffer)
            .map_err(|err| refused(format!("hold {id}, which cannot be read ({err})")))?
            .ok_or_else(|| refused(format!("list {id} but do not hold it")))?;
        let written = ours
            .write_buf(object.kind, object.data)
            .map_err(GitError::library("write an object"))?;
        if written != id {
            return Err(refused(format!(
                "hold an object stored under {id} whose content is {written}"
            )));
        }
        new.push(id);
    }
    Ok(new)
}

/// Refuses when an object of `new` names one that `ours` lacks (a submodule's commit aside).
fn check_connected(ours: &gix_odb::Handle, new: &[ObjectId]) -> Result<(), GitError> {
    let mut buffer = Vec::new();
    for id in new {
        let object = ours
            .try_find(id, &mut buffer)
            .map_err(GitError::library("read an imported object"))?
            .ok_or_else(|| GitError::Objects(format!("the imported object {id} is missing")))?;
        let broken = || GitError::Objects(format!("the session's object {id} is malformed"));
        let named: Vec<ObjectId> = match object.kind {
            gix_object::Kind::Commit => {
                let commit = gix_object::CommitRef::from_bytes(object.data, gix_hash::Kind::Sha1)
                    .map_err(|_| broken())?;
                std::iter::once(commit.tree())
                    .chain(commit.parents())
                    .collect()
            }
            gix_object::Kind::Tree => {
                let tree = gix_object::TreeRef::from_bytes(object.data, gix_hash::Kind::Sha1)
                    .map_err(|_| broken())?;
                if let Some(entry) = tree.entries.iter().find(|e| forbidden(e.filename, e.mode)) {
                    return Err(GitError::Objects(format!(
                        "the session's tree {id} holds the entry `{}`, which git must never check \
                         out; nothing of the session's refs or index was imported",
                        crate::quote(b"", entry.filename)
                    )));
                }
                tree.entries
                    .iter()
                    .filter(|e| !e.mode.is_commit())
                    .map(|e| e.oid.to_owned())
                    .collect()
            }
            gix_object::Kind::Tag => {
                let tag = gix_object::TagRef::from_bytes(object.data, gix_hash::Kind::Sha1)
                    .map_err(|_| broken())?;
                vec![tag.target()]
            }
            gix_object::Kind::Blob => Vec::new(),
        };
        if let Some(missing) = named.iter().find(|n| !ours.exists(n)) {
            return Err(GitError::Objects(format!(
                "the session's object {id} names {missing}, which neither the session nor the \
                 repository holds; nothing of the session's refs or index was imported"
            )));
        }
    }
    Ok(())
}

/// A tree entry `git fsck` refuses and a checkout must never write: an empty name, `.`, `..`, one
/// with a `/` or NUL, `.git` in any letter case (or with the trailing dots and spaces NTFS drops),
/// and a `.gitmodules` that is a symbolic link.
fn forbidden(name: &[u8], mode: gix_object::tree::EntryMode) -> bool {
    let trimmed = {
        let mut end = name.len();
        while end > 0 && matches!(name[end - 1], b'.' | b' ') {
            end -= 1;
        }
        &name[..end]
    };
    name.is_empty()
        || name == b"."
        || name == b".."
        || name.contains(&b'/')
        || name.contains(&0)
        || trimmed.eq_ignore_ascii_case(b".git")
        || (mode.is_link() && trimmed.eq_ignore_ascii_case(b".gitmodules"))
}

/// Moves `name` on the host from `old` (what the session started from) to `new`, failing when the
/// host's is no longer `old`.
fn move_ref(
    store: &gix_ref::file::Store,
    name: &str,
    old: Option<&Target>,
    new: Option<&Target>,
) -> Result<(), GitError> {
    use gix_ref::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
    let expected = match old {
        Some(old) => PreviousValue::MustExistAndMatch(library_target(old)?),
        None => PreviousValue::MustNotExist,
    };
    let change = match new {
        Some(new) => Change::Update {
            log: LogChange {
                mode: RefLog::AndReference,
                force_create_reflog: false,
                message: BString::from("cordon: from a sandbox session"),
            },
            expected,
            new: library_target(new)?,
        },
        None => Change::Delete {
            expected,
            log: RefLog::AndReference,
        },
    };
    let edit = RefEdit {
        change,
        name: name
            .try_into()
            .map_err(|_| GitError::Objects(format!("`{name}` is not a ref name")))?,
        deref: false,
    };
    let signature = gix_actor::Signature {
        name: BString::from("cordon"),
        email: BString::from("cordon@localhost"),
        time: gix_date::Time::now_utc(),
    };
    let mut time = gix_date::parse::TimeBuf::default();
    store
        .transaction()
        .prepare(
            [edit],
            gix_lock::acquire::Fail::Immediately,
            gix_lock::acquire::Fail::Immediately,
        )
        .map_err(GitError::library("lock a ref"))?
        .commit(Some(signature.to_ref(&mut time)))
        .map_err(GitError::library("move a ref"))?;
    Ok(())
}

/// Keeps `target` as `refs/cordon/rescued/<session>/<name without refs/>`; returns that name.
fn rescue(
    store: &gix_ref::file::Store,
    session: &str,
    name: &str,
    target: ObjectId,
) -> Result<String, GitError> {
    let rest = name.strip_prefix("refs/").unwrap_or(name);
    let rescued = format!("refs/cordon/rescued/{session}/{rest}");
    move_ref(store, &rescued, None, Some(&Target::Object(target)))?;
    Ok(rescued)
}

fn library_target(target: &Target) -> Result<gix_ref::Target, GitError> {
    Ok(match target {
        Target::Object(id) => gix_ref::Target::Object(*id),
        Target::Symbolic(name) => gix_ref::Target::Symbolic(
            name.as_str()
                .try_into()
                .map_err(|_| GitError::Objects(format!("`{name}` is not a ref name")))?,
        ),
    })
}

/// Replaces the host's index with the session's when the host's is still the one the session
/// started from and the session's adds no submodule entry.
fn import_index(
    git_dir: &Path,
    view: &View,
    start: &Start,
    imported: &mut Imported,
) -> Result<(), GitError> {
    let theirs = match view.read(
        &WsPath::name(b"index").expect("a plain name"),
        MAX_INDEX + 1,
    ) {
        Ok(read) => read.map(|read| read.bytes),
        Err(ViewError::NotAFile { .. }) | Err(ViewError::Blocked { .. }) => {
            imported
                .notes
                .push("the session's index is not a file; the host's was kept".to_owned());
            return Ok(());
        }
        Err(err) => return Err(err.into()),
    };
    let Some(theirs) = theirs else {
        if start.index.is_some() {
            imported
                .notes
                .push("the session removed its index; the host's was kept".to_owned());
        }
        return Ok(());
    };
    if start.index.as_deref() == Some(digest(&theirs).as_str()) {
        return Ok(());
    }
    let kept = |why: &str| format!("the session's index was not imported: {why}");
    if theirs.len() > MAX_INDEX {
        imported
            .notes
            .push(kept(&format!("it is larger than {MAX_INDEX} bytes")));
        return Ok(());
    }
    let host = View::open(git_dir).map_err(GitError::io("open", git_dir))?;
    let ours = read_bounded(&host, "index", MAX_INDEX, git_dir)?;
    if ours.as_deref().map(digest) != start.index {
        imported.notes.push(kept(
            "the host's index changed during the session, and was kept",
        ));
        return Ok(());
    }
    let options = gix_index::decode::Options {
        alloc_limit_bytes: Some(MAX_INDEX),
        ..Default::default()
    };
    let parse = |bytes: &[u8]| {
        gix_index::State::from_bytes(
            bytes,
            filetime::FileTime::now(),
            gix_hash::Kind::Sha1,
            options,
        )
        .ok()
        .map(|(state, _)| state)
    };
    let gitlinks = |state: &gix_index::State| -> BTreeSet<Vec<u8>> {
        state
            .entries()
            .iter()
            .filter(|e| e.mode == gix_index::entry::Mode::COMMIT)
            .map(|e| e.path(state).to_vec())
            .collect()
    };
    let Some(state) = parse(&theirs).filter(|s| s.link().is_none() && !s.is_sparse()) else {
        imported.notes.push(kept(
            "git cannot read it as a whole index (it is damaged, split or sparse)",
        ));
        return Ok(());
    };
    // A path git would refuse to check out (`.git` in any case, `..`, an absolute path) is
    // refused here before a host git meets it.
    if let Some(entry) = state
        .entries()
        .iter()
        .find(|e| WsPath::from_bytes(e.path(&state)).is_err())
    {
        imported.notes.push(kept(&format!(
            "it names the path `{}`, which git must never write",
            crate::quote(b"", entry.path(&state))
        )));
        return Ok(());
    }
    let before = ours
        .as_deref()
        .and_then(parse)
        .map(|s| gitlinks(&s))
        .unwrap_or_default();
    if let Some(path) = gitlinks(&state).difference(&before).next() {
        imported.notes.push(kept(&format!(
            "it adds the submodule entry `{}`, which would make the host's git enter a directory \
             the sandbox wrote; add it on the host yourself if it is meant",
            crate::quote(b"", path)
        )));
        return Ok(());
    }
    // Written anew from its entries, without the optional extensions: a forged cache tree would
    // make the user's next commit on the host record trees the index does not show, and a forged
    // untracked cache would hide files from `git status`.
    let mut theirs = Vec::new();
    gix_index::File::from_state(state, git_dir.join("index"))
        .write_to(
            &mut theirs,
            gix_index::write::Options {
                extensions: gix_index::write::Extensions::None,
                skip_hash: false,
            },
        )
        .map_err(GitError::library("write the index"))?;
    // git's own protocol: `index.lock` created exclusively (a git running on the host holds it
    // the same way), written, then renamed over the index.
    let path = git_dir.join("index");
    let lock = git_dir.join("index.lock");
    let mut file = match File::options().write(true).create_new(true).open(&lock) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            imported.notes.push(kept(
                "a git on the host holds `index.lock`; the host's index was kept",
            ));
            return Ok(());
        }
        Err(err) => return Err(GitError::io("create", &lock)(err)),
    };
    let written = file
        .write_all(&theirs)
        .and_then(|()| file.sync_all())
        .and_then(|()| fs::rename(&lock, &path));
    if let Err(err) = written {
        let _ = fs::remove_file(&lock);
        return Err(GitError::io("write", &path)(err));
    }
    imported.index = true;
    Ok(())
}

/// Every ref and `HEAD` of the git directory seen through `view`: loose refs over `packed-refs`.
/// A ref file that is not one git writes (a link, a FIFO, a forged line) is left out — it is no
/// ref — and a tree past [`MAX_REFS`] entries is refused.
fn read_refs(view: &View, base: &Path) -> Result<BTreeMap<String, Target>, GitError> {
    let mut refs = BTreeMap::new();
    match view.read(
        &WsPath::name(b"packed-refs").expect("a plain name"),
        MAX_PACKED_REFS + 1,
    ) {
        Ok(Some(read)) if read.bytes.len() > MAX_PACKED_REFS => {
            return Err(GitError::Objects(format!(
                "`packed-refs` is larger than {MAX_PACKED_REFS} bytes"
            )));
        }
        Ok(Some(read)) => {
            for (name, id) in parse_packed(&read.bytes) {
                if refs.len() >= MAX_REFS {
                    return Err(too_many_refs());
                }
                refs.insert(name, Target::Object(id));
            }
        }
        Ok(None) | Err(_) => {}
    }
    let mut pending = vec![(WsPath::name(b"refs").expect("a plain name"), 0usize)];
    let mut seen = 0usize;
    while let Some((dir, depth)) = pending.pop() {
        let Ok(listing) = view.list(Some(&dir), MAX_REFS) else {
            continue;
        };
        seen += listing.entries.len();
        if seen > MAX_REFS {
            return Err(too_many_refs());
        }
        for entry in listing.entries {
            let Ok(path) = dir.join(&entry.name) else {
                continue;
            };
            match entry.meta.kind {
                Kind::Directory if depth < MAX_REF_DEPTH => pending.push((path, depth + 1)),
                Kind::File => {
                    if let Some(target) = read_loose(view, &path)
                        && let Ok(name) = String::from_utf8(path.as_bytes().to_vec())
                        && gix_ref::FullName::try_from(name.as_str()).is_ok()
                    {
                        refs.insert(name, target);
                    }
                }
                _ => {}
            }
        }
    }
    let head = WsPath::name(b"HEAD").expect("a plain name");
    match read_loose(view, &head) {
        Some(target) => {
            refs.insert("HEAD".to_owned(), target);
        }
        None => {
            return Err(GitError::LinkedGitDir(base.join("HEAD")));
        }
    }
    Ok(refs)
}

fn too_many_refs() -> GitError {
    GitError::Objects(format!(
        "the repository has more than {MAX_REFS} refs, more than a private git directory holds; \
         prune some (`git tag -d`, `git remote prune`)"
    ))
}

fn read_loose(view: &View, path: &WsPath) -> Option<Target> {
    let read = view.read(path, MAX_REF + 1).ok()??;
    (read.bytes.len() <= MAX_REF)
        .then(|| parse_loose(&read.bytes))
        .flatten()
}

/// The `<id> <name>` lines of a `packed-refs` file with a valid id and ref name; comments and
/// peeled (`^`) lines skipped.
fn parse_packed(bytes: &[u8]) -> Vec<(String, ObjectId)> {
    bytes
        .split(|&b| b == b'\n')
        .filter(|line| !line.starts_with(b"#") && !line.starts_with(b"^"))
        .filter_map(|line| {
            let (hex, rest) = line.split_at_checked(40)?;
            let name = std::str::from_utf8(rest.strip_prefix(b" ")?).ok()?;
            let id = ObjectId::from_hex(hex).ok()?;
            let valid = name.starts_with("refs/")
                && gix_ref::FullName::try_from(name).is_ok()
                && !name.chars().any(|c| c.is_whitespace() || c.is_control());
            valid.then(|| (name.to_owned(), id))
        })
        .collect()
}

fn encode(target: &Target) -> String {
    match target {
        Target::Object(id) => id.to_string(),
        Target::Symbolic(name) => format!("ref: {name}"),
    }
}

fn decode(text: &str) -> Option<Target> {
    parse_loose(text.as_bytes())
}

/// At most `limit` bytes of the regular file `name` in the git directory seen through `view`;
/// refused when it is larger, or not a regular file reached without a link.
fn read_bounded(
    view: &View,
    name: &str,
    limit: usize,
    base: &Path,
) -> Result<Option<Vec<u8>>, GitError> {
    let path = WsPath::new(name).expect("a plain name");
    match view.read(&path, limit + 1) {
        Ok(Some(read)) if read.bytes.len() > limit => Err(GitError::Objects(format!(
            "`{name}` is larger than {limit} bytes, more than a private git directory copies"
        ))),
        Ok(read) => Ok(read.map(|read| read.bytes)),
        Err(_) => Err(GitError::LinkedGitDir(base.join(name))),
    }
}

/// The hex SHA-1 of `bytes`.
fn digest(bytes: &[u8]) -> String {
    let mut hasher = gix_hash::hasher(gix_hash::Kind::Sha1);
    hasher.update(bytes);
    hasher
        .try_finalize()
        .map(|id| id.to_string())
        .unwrap_or_default()
}

/// The name of a repository's directory under `git/`: the SHA-1 of its git directory's path.
fn key(git_dir: &Path) -> String {
    digest(git_dir.as_os_str().as_encoded_bytes())
}

/// A session name no other session of this machine has: the process, the time, a counter.
fn session_id() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Gives `dir` and everything cordon made in it to the workspace's owner (as root the sandbox
/// writes there through the workspace's idmapping); nothing to do when cordon is that owner.
fn chown_tree(dir: &Path, (uid, gid): (u32, u32)) -> Result<(), GitError> {
    let mine = fs::metadata(dir).map_err(GitError::io("inspect", dir))?;
    if (mine.uid(), mine.gid()) == (uid, gid) {
        return Ok(());
    }
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        std::os::unix::fs::lchown(&path, Some(uid), Some(gid))
            .map_err(GitError::io("give to the workspace owner", &path))?;
        if fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            for entry in fs::read_dir(&path).map_err(GitError::io("list", &path))? {
                pending.push(entry.map_err(GitError::io("list", &path))?.path());
            }
        }
    }
    Ok(())
}

/// Removes the private directory `dir` without following anything the sandbox planted in it.
fn remove_tree(dir: &Path) -> std::io::Result<()> {
    let handle = match File::open(dir) {
        Ok(handle) => handle,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
    };
    use std::os::fd::AsFd as _;
    cordon_workspace::tree::empty(handle.as_fd()).map_err(std::io::Error::other)?;
    fs::remove_dir(dir)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), GitError> {
    let temporary = path.with_extension("json.new");
    let mut file = File::create(&temporary).map_err(GitError::io("create", &temporary))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(GitError::io("write", &temporary))?;
    fs::rename(&temporary, path).map_err(GitError::io("rename", &temporary))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_refs_lines_name_valid_refs_and_ids_or_are_skipped() {
        let id = "0123456789abcdef0123456789abcdef01234567";
        let text = format!(
            "# pack-refs with: peeled sorted\n{id} refs/heads/main\n^{id}\n{id} refs/tags/v1\n\
             {id} HEAD\n{id} refs/heads/a b\n{id} refs/heads/../x\n{id}refs/heads/glued\n\
             zz{} refs/heads/bad\n{id} refs/heads/cr\r\n",
            &id[2..]
        );
        let names: Vec<String> = parse_packed(text.as_bytes())
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(names, ["refs/heads/main", "refs/tags/v1"]);
    }

    #[test]
    fn tree_entries_git_must_never_check_out_are_forbidden() {
        use gix_object::tree::EntryKind;
        let (file, link) = (EntryKind::Blob.into(), EntryKind::Link.into());
        for (name, mode, refused) in [
            (&b"src"[..], file, false),
            (b".gitignore", file, false),
            (b".gitmodules", file, false),
            (b".github", file, false),
            (b".git", file, true),
            (b".GIT", file, true),
            (b".Git. ", file, true),
            (b".gitmodules", link, true),
            (b".GITMODULES.", link, true),
            (b"", file, true),
            (b".", file, true),
            (b"..", file, true),
            (b"a/b", file, true),
        ] {
            assert_eq!(
                forbidden(name, mode),
                refused,
                "{:?}",
                String::from_utf8_lossy(name)
            );
        }
        assert!(forbidden(&[b'a', 0, b'b'], file), "a NUL");
    }

    #[test]
    fn a_start_record_round_trips_its_refs() {
        for text in [
            "0123456789abcdef0123456789abcdef01234567",
            "ref: refs/heads/main",
        ] {
            let target = decode(text).expect("decodes");
            assert_eq!(encode(&target), text);
        }
        assert_eq!(decode("ref: /etc/passwd"), None);
    }
}
