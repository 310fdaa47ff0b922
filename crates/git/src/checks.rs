//! What the run checks against HEAD before it starts and when it resumes: tooling files tracked
//! and unmodified, a clean worktree when the pipeline commits, the changes a resumed run keeps —
//! and the step diff, all from HEAD's tree and a snapshot of the work tree.

use cordon_workspace::{Kind, View, WsPath};

use crate::GitError;
use crate::diff::{self, Change, PatchLimits};
use crate::repo::{Expect, Repo};
use crate::tree::{self, Flat, Mode};
use crate::worktree::{Ignoring, Skipped, StatCache};

/// The most bytes of `.git/index` cordon reads.
const MAX_INDEX: u64 = 1 << 30;

/// The work tree's changes against HEAD.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkDiff {
    /// The work tree as a flat tree (equal flats mean nothing changed).
    pub flat: Flat,
    pub changes: Vec<(Vec<u8>, Change)>,
    /// The patch, with the skipped entries listed at its end; empty without changes.
    pub patch: Vec<u8>,
    pub skipped: Vec<Skipped>,
}

impl Repo {
    /// HEAD's tree as a flat map.
    pub fn head_flat(&self) -> Result<Flat, GitError> {
        let head = self.head()?;
        let (tree, _) = self.commit_parts(&head)?;
        tree::flatten(&self.objects, &tree)
    }

    /// The work tree's changes against HEAD as the step diff shows them: untracked files are
    /// left out only when both the work tree's and HEAD's rules ignore them.
    pub fn diff(
        &self,
        workspace: &View,
        cache: &mut StatCache,
        limits: PatchLimits,
    ) -> Result<WorkDiff, GitError> {
        let head = self.head_flat()?;
        let snapshot = self.snapshot(workspace, &head, Ignoring::WorkTreeAndHead, cache)?;
        let flat = snapshot.flat();
        let changes = diff::changes(&head, &flat);
        let mut patch = if changes.is_empty() {
            Vec::new()
        } else {
            self.patch(workspace, &changes, limits)?
        };
        for skipped in &snapshot.skipped {
            patch.extend_from_slice(
                format!(
                    "# cordon: not recorded: {}\n",
                    diff::quote(b"", skipped.to_string().as_bytes())
                )
                .as_bytes(),
            );
        }
        Ok(WorkDiff {
            flat,
            changes,
            patch,
            skipped: snapshot.skipped,
        })
    }

    /// The work tree's changes against HEAD in `git status --short` form (what a resumed run
    /// keeps).
    pub fn status_short(
        &self,
        workspace: &View,
        cache: &mut StatCache,
    ) -> Result<String, GitError> {
        let head = self.head_flat()?;
        let snapshot = self.snapshot(workspace, &head, Ignoring::WorkTree, cache)?;
        Ok(diff::status(&diff::changes(&head, &snapshot.flat())))
    }

    /// Refuses unless every tooling path is committed in HEAD as a regular file, unchanged in the
    /// index and holding the same content in the work tree.
    pub fn check_tooling(&self, workspace: &View, paths: &[WsPath]) -> Result<(), GitError> {
        let head = self.head_flat()?;
        let index = self.index_entries()?;
        for path in paths {
            let shown = path.shown();
            let Some(entry) = head.get(path.as_bytes()) else {
                return Err(GitError::Untracked(shown));
            };
            if entry.mode == Mode::Link {
                return Err(GitError::ToolingNotAFile {
                    path: shown,
                    kind: Kind::Symlink,
                });
            }
            if !matches!(entry.mode, Mode::File | Mode::Executable) {
                return Err(GitError::Untracked(shown));
            }
            if index
                .as_ref()
                .is_some_and(|i| i.get(path.as_bytes()) != Some(entry))
            {
                return Err(GitError::Modified(shown));
            }
            let meta = match workspace.meta(path)? {
                None => return Err(GitError::Modified(shown)),
                Some(meta) if meta.kind != Kind::File => {
                    return Err(GitError::ToolingNotAFile {
                        path: shown,
                        kind: meta.kind,
                    });
                }
                Some(meta) => meta,
            };
            let mut hasher = gix_hash::hasher(gix_hash::Kind::Sha1);
            hasher.update(&gix_object::encode::loose_header(
                gix_object::Kind::Blob,
                meta.size,
            ));
            workspace.stream(path, &mut |piece| hasher.update(piece))?;
            let id = hasher
                .try_finalize()
                .map_err(GitError::library("hash a tooling file"))?;
            if id != entry.id {
                return Err(GitError::Modified(shown));
            }
        }
        Ok(())
    }

    /// Every path that differs between HEAD and the index or the work tree, or is untracked and
    /// not ignored (for the dirty-worktree refusal).
    pub fn dirty_paths(
        &self,
        workspace: &View,
        cache: &mut StatCache,
    ) -> Result<Vec<String>, GitError> {
        let head = self.head_flat()?;
        let snapshot = self.snapshot(workspace, &head, Ignoring::WorkTree, cache)?;
        let mut paths: Vec<Vec<u8>> = diff::changes(&head, &snapshot.flat())
            .into_iter()
            .map(|(path, _)| path)
            .collect();
        if let Some(index) = self.index_entries()? {
            paths.extend(
                diff::changes(&head, &index)
                    .into_iter()
                    .map(|(path, _)| path),
            );
        }
        paths.sort();
        paths.dedup();
        Ok(paths
            .into_iter()
            .map(|p| String::from_utf8_lossy(&p).into_owned())
            .collect())
    }

    /// The index's stage-0 entries as a flat tree; `None` without an index.
    fn index_entries(&self) -> Result<Option<Flat>, GitError> {
        self.refuse_links(false, "index", Expect::File)?;
        let Some(meta) = self
            .git_view
            .meta(&WsPath::name(b"index").expect("a plain name"))?
        else {
            return Ok(None);
        };
        if meta.size > MAX_INDEX {
            return Err(GitError::Objects(format!(
                "the index is larger than {MAX_INDEX} bytes"
            )));
        }
        let options = gix_index::decode::Options {
            alloc_limit_bytes: Some(MAX_INDEX as usize),
            ..Default::default()
        };
        let file = gix_index::File::at(
            self.dirs.git_dir.join("index"),
            gix_hash::Kind::Sha1,
            false,
            options,
        )
        .map_err(GitError::library("read the index"))?;
        let mut flat = Flat::new();
        for entry in file.entries() {
            if entry.stage_raw() != 0 {
                continue;
            }
            let mode = match entry.mode {
                m if m == gix_index::entry::Mode::FILE_EXECUTABLE => Mode::Executable,
                m if m == gix_index::entry::Mode::SYMLINK => Mode::Link,
                m if m == gix_index::entry::Mode::COMMIT => Mode::Gitlink,
                _ => Mode::File,
            };
            flat.insert(
                entry.path(&file).to_vec(),
                tree::Entry { mode, id: entry.id },
            );
        }
        Ok(Some(flat))
    }
}
