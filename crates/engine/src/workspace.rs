//! `HostWorkspace`: the workspace as the host `cordon` process sees it — its one view
//! ([`cordon_workspace::View`]) and, for runs, its repository ([`cordon_git::Repo`]). Every engine
//! access to workspace content goes through it: reading `produces`/`artifact` files for feedback,
//! deleting them, checking that they were produced, naming the root `.env*` files to mask,
//! hashing lockfiles for setup stamps, the step diff and the commit action.
//!
//! **Invariant:** nothing in the engine joins a workspace path and hands it to the kernel's
//! normal lookup — because a step controls every entry of the work tree, and one followed link is
//! enough to read, send or delete a host file for it.

use std::path::{Path, PathBuf};

use cordon_git::Repo;
use cordon_workspace::{Kind, Removed, View, ViewError, WsPath};
use sha2::{Digest, Sha256};

/// The most of one `produces`/`artifact` file that goes into feedback.
pub const FEEDBACK_LIMIT: usize = 64 << 10;
/// The most root entries listed to find `.env*` files and lockfiles.
const ROOT_ENTRIES: usize = 100_000;
/// The most lockfiles hashed, and the largest one: past either, a lockfile counts by its name
/// and size (a step could name a thousand files `*.lock`, or make one sparse and huge).
const MAX_LOCKFILES: usize = 64;
const MAX_LOCKFILE: u64 = 64 << 20;

/// The workspace of a run (or of an engine test): its view and its repository.
pub struct HostWorkspace {
    view: View,
    git: Option<Repo>,
}

/// Why a declared output cannot be used.
#[derive(Debug, PartialEq, Eq)]
pub enum Missing {
    Absent,
    /// Present, but not a regular file, or not reachable without following a link: the text
    /// says which.
    Unusable(String),
}

impl HostWorkspace {
    pub fn new(view: View, git: Option<Repo>) -> HostWorkspace {
        HostWorkspace { view, git }
    }

    /// The workspace's host path (the same inside the sandbox). For messages and session
    /// configuration; never joined and opened by the host.
    pub fn path(&self) -> &Path {
        self.view.path()
    }

    pub fn view(&self) -> &View {
        &self.view
    }

    pub fn git(&self) -> Option<&Repo> {
        self.git.as_ref()
    }

    /// Whether `path` is masked in every sandbox (a root secret `.env*` file, an
    /// `isolation.hide` path or below one): the host never reads or deletes it for a step.
    pub fn masked(&self, path: &WsPath) -> bool {
        match &self.git {
            Some(git) => git.guard().masks(path.as_bytes()),
            None => cordon_git::Guard::default().masks(path.as_bytes()),
        }
    }

    fn masked_note(path: &WsPath) -> String {
        format!(
            "`{}` is masked in every sandbox (a root `.env*` file or an `isolation.hide` path): no step can write it and cordon never reads it; declare another path",
            cordon_protocol::text::escape_line(&path.to_string_lossy())
        )
    }

    /// The feedback text of the output `path`: at most [`FEEDBACK_LIMIT`] bytes and a marker
    /// saying how much was left out; for anything but a regular file, a line saying what it is
    /// (it is not read). `None` when it does not exist.
    pub fn feedback(&self, path: &WsPath) -> Option<String> {
        if self.masked(path) {
            return Some(format!("[cordon: not read: {}]\n", Self::masked_note(path)));
        }
        match self.view.read(path, FEEDBACK_LIMIT) {
            Ok(None) => None,
            // Binary content is no feedback, and NUL bytes cost six times their size in JSON.
            Ok(Some(read)) if read.bytes.contains(&0) => Some(format!(
                "[cordon: a binary file of {} bytes, not shown]\n",
                read.size
            )),
            Ok(Some(read)) => {
                let mut text = String::from_utf8_lossy(&read.bytes).into_owned();
                if read.omitted() > 0 {
                    if !text.ends_with('\n') {
                        text.push('\n');
                    }
                    text.push_str(&format!(
                        "[cordon: {} more bytes of this file not shown]\n",
                        read.omitted()
                    ));
                }
                Some(text)
            }
            Err(err) => Some(format!("[cordon: not read: {err}]\n")),
        }
    }

    /// Deletes the output `path` before a step runs again (hygiene). A link is removed itself; a
    /// directory is left alone; a path below a link is not touched. `Some(note)` says what was
    /// left and why.
    pub fn remove_output(&self, path: &WsPath) -> Result<Option<String>, ViewError> {
        if self.masked(path) {
            return Ok(Some(Self::masked_note(path)));
        }
        match self.view.remove(path) {
            Ok(Removed::Removed(_) | Removed::Absent) => Ok(None),
            Ok(Removed::KeptDirectory) => Ok(Some(format!(
                "`{}` is a directory, not a regular file; it was left in place",
                path.to_string_lossy()
            ))),
            Err(err @ ViewError::Blocked { .. }) => Ok(Some(err.to_string())),
            Err(err) => Err(err),
        }
    }

    /// Whether the declared output `path` is a regular file reached without following a link.
    pub fn produced(&self, path: &WsPath) -> Result<(), Missing> {
        if self.masked(path) {
            return Err(Missing::Unusable(Self::masked_note(path)));
        }
        match self.view.meta(path) {
            Ok(None) => Err(Missing::Absent),
            Ok(Some(meta)) if meta.kind == Kind::File => Ok(()),
            Ok(Some(meta)) => Err(Missing::Unusable(format!(
                "{} is {}, not a regular file",
                path.to_string_lossy(),
                meta.kind
            ))),
            Err(err) => Err(Missing::Unusable(err.to_string())),
        }
    }

    /// The `.env*` entries at the workspace root, except the documented examples: masked in
    /// every sandbox, never read.
    pub fn env_files(&self) -> Vec<PathBuf> {
        use std::os::unix::ffi::OsStringExt;
        let Ok(listing) = self.view.list(None, ROOT_ENTRIES) else {
            return Vec::new();
        };
        listing
            .entries
            .into_iter()
            .filter(|entry| cordon_workspace::is_env_secret(&entry.name))
            .map(|entry| PathBuf::from(std::ffi::OsString::from_vec(entry.name)))
            .collect()
    }

    /// `(name, SHA-256 of its content)` of every regular lockfile at the root (sorted by name),
    /// streamed. A lockfile that cannot be read counts by its name only; one past
    /// [`MAX_LOCKFILES`], larger than [`MAX_LOCKFILE`] or sparse, by its name and size.
    pub fn lockfiles(&self, is_lockfile: impl Fn(&str) -> bool) -> Vec<(String, Vec<u8>)> {
        let Ok(listing) = self.view.list(None, ROOT_ENTRIES) else {
            return Vec::new();
        };
        let mut candidates: Vec<(String, cordon_workspace::Meta)> = listing
            .entries
            .into_iter()
            .filter(|entry| entry.meta.kind == Kind::File)
            .filter_map(|entry| Some((String::from_utf8(entry.name).ok()?, entry.meta)))
            .filter(|(name, _)| is_lockfile(name))
            .collect();
        candidates.sort_by(|a, b| a.0.cmp(&b.0));
        let mut found = Vec::new();
        for (index, (name, meta)) in candidates.into_iter().enumerate() {
            let sparse = meta.size > 1 << 20 && meta.allocated < meta.size / 2;
            let Ok(path) = WsPath::name(name.as_bytes()) else {
                continue;
            };
            if index >= MAX_LOCKFILES || meta.size > MAX_LOCKFILE || sparse {
                found.push((name, format!("size {}", meta.size).into_bytes()));
                continue;
            }
            let mut hash = Sha256::new();
            let digest = match self.view.stream(&path, &mut |piece| hash.update(piece)) {
                Ok(Some(_)) => hash.finalize().to_vec(),
                Ok(None) | Err(_) => Vec::new(),
            };
            found.push((name, digest));
        }
        found
    }
}
