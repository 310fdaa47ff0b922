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

    /// The feedback text of the output `path`: at most [`FEEDBACK_LIMIT`] bytes and a marker
    /// saying how much was left out; for anything but a regular file, a line saying what it is
    /// (it is not read). `None` when it does not exist.
    pub fn feedback(&self, path: &WsPath) -> Option<String> {
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
        let Ok(listing) = self.view.list(None, ROOT_ENTRIES) else {
            return Vec::new();
        };
        listing
            .entries
            .into_iter()
            .filter_map(|entry| String::from_utf8(entry.name).ok())
            .filter(|name| {
                name.starts_with(".env")
                    && ![".env.example", ".env.template", ".env.sample"].contains(&name.as_str())
            })
            .map(PathBuf::from)
            .collect()
    }

    /// `(name, SHA-256 of its content)` of every regular lockfile at the root (sorted by name),
    /// streamed. A lockfile that cannot be read counts by its name only.
    pub fn lockfiles(&self, is_lockfile: impl Fn(&str) -> bool) -> Vec<(String, Vec<u8>)> {
        let Ok(listing) = self.view.list(None, ROOT_ENTRIES) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for entry in listing.entries {
            let Ok(name) = String::from_utf8(entry.name) else {
                continue;
            };
            if entry.meta.kind != Kind::File || !is_lockfile(&name) {
                continue;
            }
            let Ok(path) = WsPath::name(name.as_bytes()) else {
                continue;
            };
            let mut hash = Sha256::new();
            let digest = match self.view.stream(&path, &mut |piece| hash.update(piece)) {
                Ok(Some(_)) => hash.finalize().to_vec(),
                Ok(None) | Err(_) => Vec::new(),
            };
            found.push((name, digest));
        }
        found.sort();
        found
    }
}
