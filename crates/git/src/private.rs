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
//! 1. objects: only those a moved ref or the imported index reaches are read (garbage stays in
//!    the session's store and goes with it); each is sized from its header first, re-hashed (a
//!    file stored under another object's name is refused), checked as `git fsck --strict` checks
//!    it (tree entries sorted and unique, only the modes git writes, no name a checkout refuses,
//!    a tag's type that of its target) and must name only objects of the right kind that are new
//!    or the host's; packs must be self-contained and the delta work of resolving them bounded
//!    ([`MAX_DELTA_WORK`]); a new commit whose tree has a submodule entry where the starting HEAD
//!    has none is refused (a later checkout would put it in the index, and the host's git would
//!    enter a directory the sandbox wrote). Nothing is written before all of this passed;
//! 2. refs: each ref (and `HEAD`) the session changed is moved with a compare-and-swap against the
//!    value the session started from, under git's own lock files; a ref the host moved meanwhile
//!    is left as the host has it, and the session's value is kept as
//!    `refs/cordon/rescued/<session>/…` instead;
//! 3. the index: replaced only when the host's is still the one the session started from (checked
//!    again under `index.lock`), never when it would add a submodule entry or a path git refuses,
//!    written anew without optional extensions, and with the host's stat data and assume-valid /
//!    skip-worktree flags only on entries the host had unchanged — so the host's git reads again
//!    whatever the session staged.
//!
//! As root, what the import creates in a user's `.git` is given to the git directory's owner.
//! A session cordon could not import (killed, or interrupted before it ended) leaves its
//! directory and start record; the next session on the same repository imports it first. The
//! start record lives beside the directory, outside anything the sandbox could write.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fs::{self, File};
use std::io::Write as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::rc::Rc;

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
/// The most bytes (inflated) one session may bring into the repository.
pub const MAX_IMPORT_BYTES: u64 = 4 << 30;

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
        let mut result = import(&self.git_dir, &self.dir, &self.id, &self.start);
        // The record goes first: an imported session is never imported again.
        let _ = fs::remove_file(&self.record);
        if let Err(err) = remove_tree(&self.dir) {
            // The next session on this repository tries again (a directory without a record).
            if let Ok(imported) = result.as_mut() {
                imported.notes.push(format!(
                    "the session's private git directory {} could not be removed yet ({err})",
                    self.dir.display()
                ));
            }
        }
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
/// documentation). Nothing is written into the host's git directory before every check passed.
fn import(git_dir: &Path, dir: &Path, id: &str, start: &Start) -> Result<Imported, GitError> {
    // The sandbox may have taken the directory's own permissions away (`chmod 000 .git`); it is
    // cordon's directory, given back to it first.
    reclaim(dir);
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
    let mut depths = HashMap::new();
    // One budget of inflated delta instructions for all the session's packs (review 3).
    let mut inflated = 0u64;
    for (pack, _, _) in packs {
        depths.extend(crate::pack::chain_depths(
            &dir.join(pack.shown()),
            true,
            &mut inflated,
        )?);
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

    let end = read_refs(&view, dir)?;
    let begun: BTreeMap<String, Target> = start
        .refs
        .iter()
        .filter_map(|(name, text)| decode(text).map(|t| (name.clone(), t)))
        .collect();
    let names: BTreeSet<&String> = begun.keys().chain(end.keys()).collect();
    let mut changed: Vec<&String> = Vec::new();
    for name in names {
        if begun.get(name) == end.get(name) {
            continue;
        }
        // Only branches, tags, the stash and HEAD come back: a replace ref would make the host's
        // git read other objects in place of the ones it names (review 2, finding A1), a
        // remote-tracking ref would forge what the remote holds (A5).
        if !importable(name) {
            imported.notes.push(format!(
                "`{name}` was not imported: only HEAD, branches, tags and the stash are"
            ));
            continue;
        }
        if let Some(Target::Symbolic(_)) = end.get(name)
            && (peel_symbolic(&end, name).is_none() || !symbolic_hops_importable(&end, name))
        {
            imported.notes.push(format!(
                "`{name}` was not imported: it is a symbolic ref that names no commit (a loop, \
                 or a ref that does not exist) or names a ref that does not come back"
            ));
            continue;
        }
        changed.push(name);
    }
    let index = plan_index(git_dir, &view, start, &mut imported)?;
    // Only what a moved ref or the imported index reaches is brought in: objects nothing names
    // stay in the session's store (and are removed with it).
    let mut roots: Vec<ObjectId> = changed
        .iter()
        .filter_map(|name| match end.get(*name) {
            Some(Target::Object(target)) => Some(*target),
            _ => None,
        })
        .collect();
    if let Some(index) = &index {
        roots.extend(index.blobs.iter().copied());
    }
    let plan = plan_objects(&theirs, &ours, &roots, &depths)?;
    // Every new commit, and what every moved ref names in the end (a commit the host already
    // had included: moving a branch back to an old commit with a submodule entry is the same
    // hole, review 2 finding A2).
    let mut checked = plan.commits.clone();
    for name in &changed {
        match end.get(*name) {
            Some(Target::Object(id)) => checked.push(*id),
            // A symbolic ref ends at the session's value of its target when that moves, at the
            // host's when it does not (or its move fails): both are checked (review 3).
            Some(Target::Symbolic(_)) => {
                checked.extend(peel_symbolic(&end, name));
                checked.extend(peel_through(&end, &begun, name));
            }
            None => {}
        }
    }
    refuse_new_gitlinks(&theirs, &ours, &begun, &checked)?;
    for id in &plan.objects {
        let mut buffer = Vec::new();
        let object = theirs
            .try_find(id, &mut buffer)
            .map_err(GitError::library("read a session object"))?
            .ok_or_else(|| GitError::Objects(format!("the session's object {id} went away")))?;
        let written = ours
            .write_buf(object.kind, object.data)
            .map_err(GitError::library("write an object"))?;
        if written != *id {
            return Err(GitError::Objects(format!(
                "the session's object {id} changed while it was imported"
            )));
        }
    }
    imported.objects = plan.objects.len();
    let mut touched: Vec<String> = plan
        .objects
        .iter()
        .map(|id| {
            let hex = id.to_string();
            format!("objects/{}/{}", &hex[..2], &hex[2..])
        })
        .collect();

    let store = gix_ref::file::Store::at(git_dir.to_path_buf(), gix_hash::Kind::Sha1);
    // `HEAD` last: a new branch exists before HEAD names it.
    let ordered = changed
        .iter()
        .filter(|n| n.as_str() != "HEAD")
        .chain(changed.iter().filter(|n| n.as_str() == "HEAD"));
    for name in ordered {
        let (old, new) = (begun.get(*name), end.get(*name));
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
                // A deleted ref's commit stays reachable (its reflog went with it).
                if let (Some(Target::Object(was)), None) = (old, new)
                    && name.as_str() != "HEAD"
                    && let Ok(rescued) = rescue(&store, id, name, *was)
                {
                    touched.extend([rescued.clone(), format!("logs/{rescued}")]);
                    imported.notes.push(format!(
                        "`{name}` was deleted as the session deleted it; it named {was}, kept as \
                         `{rescued}`"
                    ));
                }
            }
            Err(err) => {
                let kept = match new {
                    Some(Target::Object(target)) => match rescue(&store, id, name, *target) {
                        Ok(rescued) => {
                            touched.extend([rescued.clone(), format!("logs/{rescued}")]);
                            format!("; the session's {target} is kept as `{rescued}`")
                        }
                        Err(_) => String::new(),
                    },
                    _ => String::new(),
                };
                imported.notes.push(format!(
                    "`{name}` was left as the host has it ({err}){kept}"
                ));
            }
        }
    }
    // A ref deletion or a pack of refs rewrites `packed-refs`.
    touched.push("packed-refs".to_owned());

    if let Some(index) = index
        && write_index(git_dir, start, index, &mut imported)?
    {
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

/// The most delta work (bytes produced, each object's size times the length of its delta chain)
/// one import may take: gitoxide resolves every object through its whole chain.
pub const MAX_DELTA_WORK: u64 = 32 << 30;

/// What the import will write: every new object a root reaches, checked.
struct Plan {
    objects: Vec<ObjectId>,
    commits: Vec<ObjectId>,
}

/// Walks the session's new objects from `roots` (stopping at objects the host has): each is
/// sized from its header before it is read, re-hashed (one stored under another id refuses the
/// import), checked as `git fsck` would check it, and everything it names must be a new object
/// of the right kind or one the host has. Bounded in objects, bytes and delta work.
fn plan_objects(
    theirs: &gix_odb::Handle,
    ours: &gix_odb::Handle,
    roots: &[ObjectId],
    depths: &HashMap<ObjectId, crate::pack::Chain>,
) -> Result<Plan, GitError> {
    let refused = |why: String| {
        GitError::Objects(format!(
            "the session's objects {why}; nothing of its git work was imported"
        ))
    };
    let mut plan = Plan {
        objects: Vec::new(),
        commits: Vec::new(),
    };
    let mut kinds: HashMap<ObjectId, gix_object::Kind> = HashMap::new();
    let mut expected: Vec<(ObjectId, ObjectId, gix_object::Kind)> = Vec::new();
    let mut queue: VecDeque<ObjectId> = roots.iter().copied().collect();
    let mut seen: HashSet<ObjectId> = HashSet::new();
    let (mut bytes, mut work) = (0u64, 0u64);
    let mut buffer = Vec::new();
    while let Some(id) = queue.pop_front() {
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
            .ok_or_else(|| {
                refused(format!(
                    "name {id}, which neither the session nor the repository holds"
                ))
            })?;
        if header.size > crate::MAX_BLOB {
            return Err(refused(format!(
                "hold {id} of {} bytes, more than {} (cordon's largest)",
                header.size,
                crate::MAX_BLOB
            )));
        }
        bytes += header.size;
        // A loose object costs its size; a packed one every result along its delta chain.
        let resolving = depths
            .get(&id)
            .map_or(header.size, |chain| chain.work.max(header.size));
        work = work.saturating_add(resolving);
        if bytes > MAX_IMPORT_BYTES {
            return Err(refused(format!(
                "add up to more than {MAX_IMPORT_BYTES} bytes; commit less in one step"
            )));
        }
        if work > MAX_DELTA_WORK {
            return Err(refused(format!(
                "take more than {MAX_DELTA_WORK} bytes of delta resolution to read (deep delta \
                 chains of large objects); repack them with `git repack -adf --depth=50`"
            )));
        }
        let object = theirs
            .try_find(&id, &mut buffer)
            .map_err(|err| refused(format!("hold {id}, which cannot be read ({err})")))?
            .ok_or_else(|| refused(format!("list {id} but do not hold it")))?;
        let computed = gix_object::compute_hash(gix_hash::Kind::Sha1, object.kind, object.data)
            .map_err(GitError::library("hash an object"))?;
        if computed != id {
            return Err(refused(format!(
                "hold an object stored under {id} whose content is {computed}"
            )));
        }
        for (named, kind) in names_of(id, object.kind, object.data).map_err(refused)? {
            expected.push((id, named, kind));
            queue.push_back(named);
        }
        kinds.insert(id, object.kind);
        plan.objects.push(id);
        if object.kind == gix_object::Kind::Commit {
            plan.commits.push(id);
        }
    }
    for (by, named, kind) in expected {
        let actual = match kinds.get(&named) {
            Some(kind) => Some(*kind),
            None => ours
                .try_header(&named)
                .map_err(GitError::library("read an object's header"))?
                .map(|h| h.kind),
        };
        match actual {
            Some(actual) if actual == kind => {}
            Some(actual) => {
                return Err(refused(format!(
                    "hold {by}, which names {named} as a {kind} though it is a {actual}"
                )));
            }
            None => {
                return Err(refused(format!(
                    "hold {by}, which names {named}, which neither the session nor the \
                     repository holds"
                )));
            }
        }
    }
    Ok(plan)
}

/// The objects `data` (of `kind`, id `id`) names and the kind each must be, after checking it as
/// `git fsck --strict` checks it: a tree's entries sorted as git sorts them, each name once, no
/// name git refuses to check out, only the modes git writes; a tag's type that of its target.
fn names_of(
    id: ObjectId,
    kind: gix_object::Kind,
    data: &[u8],
) -> Result<Vec<(ObjectId, gix_object::Kind)>, String> {
    use gix_object::Kind;
    let broken = |why: &str| format!("hold {id}, a malformed {kind} ({why})");
    Ok(match kind {
        Kind::Blob => Vec::new(),
        Kind::Commit => {
            let commit = gix_object::CommitRef::from_bytes(data, gix_hash::Kind::Sha1)
                .map_err(|_| broken("it does not parse"))?;
            std::iter::once((commit.tree(), Kind::Tree))
                .chain(commit.parents().map(|p| (p, Kind::Commit)))
                .collect()
        }
        Kind::Tag => {
            let tag = gix_object::TagRef::from_bytes(data, gix_hash::Kind::Sha1)
                .map_err(|_| broken("it does not parse"))?;
            vec![(tag.target(), tag.target_kind)]
        }
        Kind::Tree => {
            let tree = gix_object::TreeRef::from_bytes(data, gix_hash::Kind::Sha1)
                .map_err(|_| broken("it does not parse"))?;
            let mut names = HashSet::new();
            let mut previous: Option<Vec<u8>> = None;
            let mut named = Vec::new();
            for entry in &tree.entries {
                let name: &[u8] = entry.filename;
                if forbidden(name, entry.mode) {
                    return Err(format!(
                        "hold the tree {id} with the entry `{}`, which git must never check out",
                        crate::quote(b"", name)
                    ));
                }
                if !ALLOWED_MODES.contains(&entry.mode.value()) {
                    return Err(broken(&format!("mode {:o}", entry.mode.value())));
                }
                // git sorts a directory as if its name ended in `/`.
                let mut key = name.to_vec();
                if entry.mode.is_tree() {
                    key.push(b'/');
                }
                if !names.insert(name.to_vec()) || previous.as_ref().is_some_and(|p| *p >= key) {
                    return Err(broken("entries out of order or named twice"));
                }
                previous = Some(key);
                let expected = if entry.mode.is_tree() {
                    Kind::Tree
                } else if entry.mode.is_commit() {
                    // A submodule's commit lives in the submodule's own repository.
                    continue;
                } else {
                    Kind::Blob
                };
                named.push((entry.oid.to_owned(), expected));
            }
            named
        }
    })
}

/// The tree entry modes git writes (`fsck` calls every other one `badFilemode`).
const ALLOWED_MODES: [u16; 5] = [0o040000, 0o100644, 0o100755, 0o120000, 0o160000];

/// The most distinct trees [`refuse_new_gitlinks`] reads, and gitlinks it keeps per tree.
const MAX_GITLINK_TREES: usize = 1_000_000;
const MAX_GITLINKS: usize = 10_000;

/// Refuses the import when a new commit's tree has a submodule entry at a path where the
/// session's starting HEAD has none: after the user's `git reset --hard` or `git checkout` that
/// entry is in the index, and the host's `git status` would enter a directory the sandbox wrote
/// (its `.git` configuration, `core.fsmonitor` included, runs on the host). Paths are compared
/// whole: a tree the host already had, placed at a new path, counts.
fn refuse_new_gitlinks(
    theirs: &gix_odb::Handle,
    ours: &gix_odb::Handle,
    begun: &BTreeMap<String, Target>,
    commits: &[ObjectId],
) -> Result<(), GitError> {
    if commits.is_empty() {
        return Ok(());
    }
    let mut gitlinks = Gitlinks {
        theirs,
        ours,
        memo: HashMap::new(),
    };
    // The tree an object stands for: a commit's, a tree itself, a tag's target peeled (a few
    // levels); `None` for a blob.
    let tree_of =
        |gitlinks: &mut Gitlinks<'_>, id: &ObjectId| -> Result<Option<ObjectId>, GitError> {
            let mut at = *id;
            for _ in 0..MAX_PEEL {
                let (kind, data) = gitlinks.read(&at)?;
                let broken = || GitError::Objects(format!("the object {at} does not parse"));
                match kind {
                    gix_object::Kind::Commit => {
                        return gix_object::CommitRef::from_bytes(&data, gix_hash::Kind::Sha1)
                            .map(|c| Some(c.tree()))
                            .map_err(|_| broken());
                    }
                    gix_object::Kind::Tree => return Ok(Some(at)),
                    gix_object::Kind::Tag => {
                        at = gix_object::TagRef::from_bytes(&data, gix_hash::Kind::Sha1)
                            .map_err(|_| broken())?
                            .target();
                    }
                    gix_object::Kind::Blob => return Ok(None),
                }
            }
            Err(GitError::Objects(format!(
                "the tag {id} names tags more than {MAX_PEEL} deep; nothing of the session's git \
             work was imported"
            )))
        };
    let start = match head_commit(begun) {
        Some(head) => match tree_of(&mut gitlinks, &head)? {
            Some(tree) => gitlinks.paths(tree)?,
            None => Rc::new(Vec::new()),
        },
        None => Rc::new(Vec::new()),
    };
    let start: HashSet<&Vec<u8>> = start.iter().collect();
    for commit in commits {
        let Some(tree) = tree_of(&mut gitlinks, commit)? else {
            continue;
        };
        let paths = gitlinks.paths(tree)?;
        if let Some(path) = paths.iter().find(|p| !start.contains(p)) {
            return Err(GitError::Objects(format!(
                "the session's {commit} (a new commit, or what a moved ref names) has the \
                 submodule entry `{}` where the session's starting HEAD has none, which would \
                 make the host's git enter a directory the sandbox wrote once it is checked out; \
                 nothing of the session's git work was imported (do this on the host yourself if \
                 it is meant)",
                crate::quote(b"", path)
            )));
        }
    }
    Ok(())
}

/// How many tags deep a ref's target is peeled.
const MAX_PEEL: usize = 8;

/// Whether a ref the session changed may come back to the host: HEAD, branches, tags, the
/// stash.
fn importable(name: &str) -> bool {
    name == "HEAD"
        || name == "refs/stash"
        || name.starts_with("refs/heads/")
        || name.starts_with("refs/tags/")
}

/// The object the symbolic ref `name` ends at in `refs` (a few levels); `None` for a loop or a
/// ref that does not exist.
fn peel_symbolic(refs: &BTreeMap<String, Target>, name: &str) -> Option<ObjectId> {
    let mut at = name;
    for _ in 0..MAX_PEEL {
        match refs.get(at)? {
            Target::Object(id) => return Some(*id),
            Target::Symbolic(next) => at = next,
        }
    }
    None
}

/// Whether every ref the symbolic ref `name` passes through in `refs` may come back.
fn symbolic_hops_importable(refs: &BTreeMap<String, Target>, name: &str) -> bool {
    let mut at = name;
    for _ in 0..MAX_PEEL {
        if !importable(at) {
            return false;
        }
        match refs.get(at) {
            Some(Target::Symbolic(next)) => at = next,
            _ => return true,
        }
    }
    false
}

/// The object the session's symbolic ref `name` ends at when its final target keeps the host's
/// starting value (`begun`).
fn peel_through(
    end: &BTreeMap<String, Target>,
    begun: &BTreeMap<String, Target>,
    name: &str,
) -> Option<ObjectId> {
    let mut at = name;
    for _ in 0..MAX_PEEL {
        match end.get(at)? {
            Target::Symbolic(next) => at = next,
            Target::Object(_) => {
                return match begun.get(at)? {
                    Target::Object(id) => Some(*id),
                    Target::Symbolic(_) => peel_symbolic(begun, at),
                };
            }
        }
    }
    None
}

/// The commit `HEAD` named at the start (through one symbolic ref).
fn head_commit(refs: &BTreeMap<String, Target>) -> Option<ObjectId> {
    match refs.get("HEAD")? {
        Target::Object(id) => Some(*id),
        Target::Symbolic(name) => match refs.get(name)? {
            Target::Object(id) => Some(*id),
            Target::Symbolic(_) => None,
        },
    }
}

/// The gitlink paths below each tree, each tree read once.
struct Gitlinks<'a> {
    theirs: &'a gix_odb::Handle,
    ours: &'a gix_odb::Handle,
    memo: HashMap<ObjectId, Rc<Vec<Vec<u8>>>>,
}

impl Gitlinks<'_> {
    fn read(&self, id: &ObjectId) -> Result<(gix_object::Kind, Vec<u8>), GitError> {
        let mut buffer = Vec::new();
        for store in [self.ours, self.theirs] {
            if let Some(object) = store
                .try_find(id, &mut buffer)
                .map_err(GitError::library("read an object"))?
            {
                return Ok((object.kind, object.data.to_vec()));
            }
        }
        Err(GitError::Objects(format!("the object {id} is missing")))
    }

    /// The gitlink paths below `tree`, relative to it.
    fn paths(&mut self, tree: ObjectId) -> Result<Rc<Vec<Vec<u8>>>, GitError> {
        if let Some(known) = self.memo.get(&tree) {
            return Ok(Rc::clone(known));
        }
        // Depth first without recursion: each tree's children are done before it.
        let mut stack = vec![(tree, false)];
        while let Some((at, expanded)) = stack.pop() {
            if self.memo.contains_key(&at) {
                continue;
            }
            if self.memo.len() >= MAX_GITLINK_TREES {
                return Err(GitError::Objects(format!(
                    "the session's commits reach more than {MAX_GITLINK_TREES} trees, more than \
                     cordon checks for submodule entries; nothing of its git work was imported"
                )));
            }
            let (_, data) = self.read(&at)?;
            let parsed = gix_object::TreeRef::from_bytes(&data, gix_hash::Kind::Sha1)
                .map_err(|_| GitError::Objects(format!("the tree {at} does not parse")))?;
            let subtrees: Vec<ObjectId> = parsed
                .entries
                .iter()
                .filter(|e| e.mode.is_tree())
                .map(|e| e.oid.to_owned())
                .collect();
            if !expanded && subtrees.iter().any(|t| !self.memo.contains_key(t)) {
                stack.push((at, true));
                stack.extend(subtrees.into_iter().map(|t| (t, false)));
                continue;
            }
            let mut paths = Vec::new();
            for entry in &parsed.entries {
                if entry.mode.is_commit() {
                    paths.push(entry.filename.to_vec());
                } else if entry.mode.is_tree() {
                    let below = self
                        .memo
                        .get(&entry.oid.to_owned())
                        .cloned()
                        .unwrap_or_default();
                    for path in below.iter() {
                        let mut full = entry.filename.to_vec();
                        full.push(b'/');
                        full.extend_from_slice(path);
                        paths.push(full);
                    }
                }
                if paths.len() > MAX_GITLINKS {
                    return Err(GitError::Objects(format!(
                        "the session's commits hold more than {MAX_GITLINKS} submodule entries \
                         below one tree, more than cordon checks; nothing of its git work was \
                         imported"
                    )));
                }
            }
            self.memo.insert(at, Rc::new(paths));
        }
        Ok(self.memo.get(&tree).cloned().unwrap_or_default())
    }
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

/// The session's index, as it will be written: its entries re-encoded, and the blobs it names
/// that the host lacks (imported with the objects).
struct IndexPlan {
    bytes: Vec<u8>,
    blobs: Vec<ObjectId>,
}

/// Decides whether the session's index replaces the host's: only when the host's is still the
/// one the session started from, it parses whole (not split or sparse), names no path git must
/// never write and adds no submodule entry. Its entries keep the host's stat data and
/// assume-valid / skip-worktree flags where they are the host's entries unchanged, and have
/// neither elsewhere — so the host's git reads again every file the session staged, and nothing
/// the session marked is hidden from it. `None` (with a note) when it stays as the host has it.
fn plan_index(
    git_dir: &Path,
    view: &View,
    start: &Start,
    imported: &mut Imported,
) -> Result<Option<IndexPlan>, GitError> {
    let theirs = match view.read(
        &WsPath::name(b"index").expect("a plain name"),
        MAX_INDEX + 1,
    ) {
        Ok(read) => read.map(|read| read.bytes),
        Err(ViewError::NotAFile { .. }) | Err(ViewError::Blocked { .. }) => {
            imported
                .notes
                .push("the session's index is not a file; the host's was kept".to_owned());
            return Ok(None);
        }
        Err(err) => return Err(err.into()),
    };
    let Some(theirs) = theirs else {
        if start.index.is_some() {
            imported
                .notes
                .push("the session removed its index; the host's was kept".to_owned());
        }
        return Ok(None);
    };
    if start.index.as_deref() == Some(digest(&theirs).as_str()) {
        return Ok(None);
    }
    let mut kept = |why: &str| {
        imported
            .notes
            .push(format!("the session's index was not imported: {why}"));
        Ok(None)
    };
    if theirs.len() > MAX_INDEX {
        return kept(&format!("it is larger than {MAX_INDEX} bytes"));
    }
    let host = View::open(git_dir).map_err(GitError::io("open", git_dir))?;
    let ours = read_bounded(&host, "index", MAX_INDEX, git_dir)?;
    if ours.as_deref().map(digest) != start.index {
        return kept("the host's index changed during the session, and was kept");
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
    let Some(mut state) = parse(&theirs).filter(|s| s.link().is_none() && !s.is_sparse()) else {
        return kept("git cannot read it as a whole index (it is damaged, split or sparse)");
    };
    // A path git would refuse to check out (`.git` in any case or with NTFS's trailing dots
    // and spaces, `..`, an absolute path) is refused before a host git meets it.
    let unusable = |path: &[u8]| {
        WsPath::from_bytes(path).is_err()
            || path
                .split(|&b| b == b'/')
                .any(|name| forbidden(name, gix_object::tree::EntryKind::Blob.into()))
    };
    if let Some(entry) = state.entries().iter().find(|e| unusable(e.path(&state))) {
        let path = crate::quote(b"", entry.path(&state));
        return kept(&format!(
            "it names the path `{path}`, which git must never write"
        ));
    }
    // What git's own `verify_cache` checks: entries sorted by path and stage, each once, a
    // path not both merged and in conflict, no path both a file and a directory — else the
    // host's next `git commit` writes trees `git fsck` refuses (review 2, finding A4).
    if let Some(why) = unsorted(&state) {
        return kept(&why);
    }
    let host_state = ours.as_deref().and_then(parse);
    let host_entries: HashMap<Vec<u8>, &gix_index::Entry> = host_state
        .iter()
        .flat_map(|s| s.entries().iter().map(move |e| (e.path(s).to_vec(), e)))
        .collect();
    let gitlink = |e: &gix_index::Entry| e.mode == gix_index::entry::Mode::COMMIT;
    if let Some(entry) = state
        .entries()
        .iter()
        .find(|e| gitlink(e) && !host_entries.get(e.path(&state)).is_some_and(|h| gitlink(h)))
    {
        let path = crate::quote(b"", entry.path(&state));
        return kept(&format!(
            "it adds the submodule entry `{path}`, which would make the host's git enter a \
             directory the sandbox wrote; add it on the host yourself if it is meant"
        ));
    }
    use gix_index::entry::{Flags, Stat};
    let hiding = Flags::ASSUME_VALID | Flags::SKIP_WORKTREE;
    let mut blobs = Vec::new();
    let (entries, paths) = state.entries_mut_and_pathbacking();
    for entry in entries.iter_mut() {
        let path = entry.path_in(paths).to_vec();
        let same = host_entries
            .get(&path)
            .filter(|h| h.id == entry.id && h.mode == entry.mode);
        entry.flags.remove(hiding);
        match same {
            Some(host) => {
                entry.stat = host.stat;
                entry.flags.insert(host.flags & hiding);
            }
            None => {
                entry.stat = Stat::default();
                if !gitlink(entry) {
                    blobs.push(entry.id);
                }
            }
        }
    }
    // Written anew from its entries, without the optional extensions: a forged cache tree would
    // make the user's next commit on the host record trees the index does not show, and a forged
    // untracked cache would hide files from `git status`.
    let mut bytes = Vec::new();
    gix_index::File::from_state(state, git_dir.join("index"))
        .write_to(
            &mut bytes,
            gix_index::write::Options {
                extensions: gix_index::write::Extensions::None,
                skip_hash: false,
            },
        )
        .map_err(GitError::library("write the index"))?;
    Ok(Some(IndexPlan { bytes, blobs }))
}

/// Why `state`'s entries are not an index git would write, if they are not.
fn unsorted(state: &gix_index::State) -> Option<String> {
    let mut paths: HashSet<&[u8]> = HashSet::new();
    let mut previous: Option<(&[u8], u32)> = None;
    for entry in state.entries() {
        let path: &[u8] = entry.path(state);
        let stage = entry.stage_raw();
        let shown = || crate::quote(b"", path);
        if let Some((last, last_stage)) = previous {
            if (last, last_stage) >= (path, stage) {
                return Some(format!(
                    "its entries are out of order or repeated at `{}`",
                    shown()
                ));
            }
            if last == path && (last_stage == 0 || stage == 0) {
                return Some(format!("`{}` is both merged and in conflict", shown()));
            }
        }
        previous = Some((path, stage));
        paths.insert(path);
    }
    for path in &paths {
        for (at, _) in path.iter().enumerate().filter(|(_, b)| **b == b'/') {
            if paths.contains(&path[..at]) {
                return Some(format!(
                    "`{}` is both a file and a directory",
                    crate::quote(b"", &path[..at])
                ));
            }
        }
    }
    None
}

/// Writes the planned index with git's own protocol: `index.lock` created exclusively (a git on
/// the host holds it the same way), the host's index checked once more under it, written, renamed
/// over the index. `false` (with a note) when it was kept as the host has it.
fn write_index(
    git_dir: &Path,
    start: &Start,
    index: IndexPlan,
    imported: &mut Imported,
) -> Result<bool, GitError> {
    let path = git_dir.join("index");
    let lock = git_dir.join("index.lock");
    let kept = |imported: &mut Imported, why: &str| {
        imported
            .notes
            .push(format!("the session's index was not imported: {why}"));
        Ok(false)
    };
    let mut file = match File::options().write(true).create_new(true).open(&lock) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            return kept(
                imported,
                "a git on the host holds `index.lock`; the host's was kept",
            );
        }
        Err(err) => return Err(GitError::io("create", &lock)(err)),
    };
    let host = View::open(git_dir).map_err(GitError::io("open", git_dir))?;
    let ours = read_bounded(&host, "index", MAX_INDEX, git_dir);
    if ours.as_ref().ok().map(|o| o.as_deref().map(digest)) != Some(start.index.clone()) {
        let _ = fs::remove_file(&lock);
        return kept(
            imported,
            "the host's index changed during the import, and was kept",
        );
    }
    let written = file
        .write_all(&index.bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| fs::rename(&lock, &path));
    if let Err(err) = written {
        let _ = fs::remove_file(&lock);
        return Err(GitError::io("write", &path)(err));
    }
    imported.index = true;
    Ok(true)
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

/// Makes the private directory's top readable and writable by cordon again (an unprivileged
/// sandbox runs as cordon's own user and may have changed its mode).
fn reclaim(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
        let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
    }
}

/// Removes the private directory `dir` without following anything the sandbox planted in it.
fn remove_tree(dir: &Path) -> std::io::Result<()> {
    reclaim(dir);
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
