//! Trees as flat maps: every path (bytes, `/`-separated) of a tree to its mode and object id.
//! [`flatten`] reads a tree from the object store, bounded; [`write`] writes nested tree objects
//! for a flat map and returns the top one.

use std::collections::BTreeMap;

use gix_hash::ObjectId;
use gix_object::bstr::{BStr, BString};
use gix_object::tree::{EntryKind, EntryMode};
use gix_object::{FindExt, TreeRefIter};

use crate::GitError;

/// What a tree entry other than a subtree is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// `100644`
    File,
    /// `100755`
    Executable,
    /// `120000`: the blob holds the link's target text.
    Link,
    /// `160000`: a submodule's commit, never entered.
    Gitlink,
}

impl Mode {
    pub fn octal(self) -> &'static str {
        match self {
            Mode::File => "100644",
            Mode::Executable => "100755",
            Mode::Link => "120000",
            Mode::Gitlink => "160000",
        }
    }

    pub(crate) fn kind(self) -> EntryKind {
        match self {
            Mode::File => EntryKind::Blob,
            Mode::Executable => EntryKind::BlobExecutable,
            Mode::Link => EntryKind::Link,
            Mode::Gitlink => EntryKind::Commit,
        }
    }

    /// `None` for a subtree.
    fn of(mode: EntryMode) -> Option<Mode> {
        match mode.kind() {
            EntryKind::Tree => None,
            EntryKind::Blob => Some(Mode::File),
            EntryKind::BlobExecutable => Some(Mode::Executable),
            EntryKind::Link => Some(Mode::Link),
            EntryKind::Commit => Some(Mode::Gitlink),
        }
    }
}

/// A tree entry that is not a subtree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    pub mode: Mode,
    pub id: ObjectId,
}

/// Every non-tree entry of a tree by its full path.
pub type Flat = BTreeMap<Vec<u8>, Entry>;

/// The most entries [`flatten`] reads, and how deep it follows subtrees.
pub const MAX_ENTRIES: usize = 1_000_000;
pub const MAX_DEPTH: usize = 256;
/// The most bytes of one path, and of all paths together, [`flatten`] builds: subtrees can be
/// shared, so a small forged tree could otherwise name a million paths of 64 KiB each.
pub const MAX_PATH_BYTES: usize = cordon_workspace::MAX_PATH;
pub const MAX_TOTAL_PATH_BYTES: usize = 256 << 20;
/// The largest tree object read (a tree of 64 MiB lists about a million entries).
pub const MAX_TREE: u64 = 64 << 20;

/// The tree `id` as a flat map, reading subtrees from `objects`.
pub fn flatten(
    objects: &(impl gix_object::Find + gix_object::FindHeader),
    id: &gix_hash::oid,
) -> Result<Flat, GitError> {
    let mut flat = Flat::new();
    let mut stack: Vec<(Vec<u8>, ObjectId, usize)> = vec![(Vec::new(), id.to_owned(), 0)];
    let mut buffer = Vec::new();
    let mut seen = 0usize;
    let mut total = 0usize;
    while let Some((prefix, tree, depth)) = stack.pop() {
        if depth > MAX_DEPTH {
            return Err(GitError::TreeTooLarge { limit: MAX_ENTRIES });
        }
        // Sized from its header before it is inflated: a step with `allow_git_mutations` can
        // write a loose tree of a few megabytes that inflates to a gigabyte.
        if let Ok(Some(header)) = objects.try_header(&tree)
            && header.size > MAX_TREE
        {
            return Err(GitError::ForgedTree(format!(
                "a tree object of {} bytes (more than {MAX_TREE})",
                header.size
            )));
        }
        let iter: TreeRefIter<'_> = objects
            .find_tree_iter(&tree, &mut buffer)
            .map_err(GitError::library("read a tree of HEAD"))?;
        for entry in iter {
            let entry = entry.map_err(|err| GitError::Objects(err.to_string()))?;
            seen += 1;
            if seen > MAX_ENTRIES {
                return Err(GitError::TreeTooLarge { limit: MAX_ENTRIES });
            }
            refuse_forged_name(entry.filename)?;
            if prefix.len() + 1 + entry.filename.len() > MAX_PATH_BYTES {
                return Err(GitError::ForgedTree(format!(
                    "a path longer than {MAX_PATH_BYTES} bytes"
                )));
            }
            total += prefix.len() + 1 + entry.filename.len();
            if total > MAX_TOTAL_PATH_BYTES {
                return Err(GitError::ForgedTree(format!(
                    "more than {MAX_TOTAL_PATH_BYTES} bytes of paths"
                )));
            }
            let mut path = prefix.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(entry.filename);
            match Mode::of(entry.mode) {
                None => stack.push((path, entry.oid.to_owned(), depth + 1)),
                Some(mode) => {
                    flat.insert(
                        path,
                        Entry {
                            mode,
                            id: entry.oid.to_owned(),
                        },
                    );
                }
            }
        }
    }
    Ok(flat)
}

/// Refuses a tree entry name git never writes: empty, `.`, `..`, or holding `/` or NUL. (A
/// `.git` component is git's to refuse; cordon keeps such an entry as HEAD has it, never
/// reaching it through the work tree.)
fn refuse_forged_name(name: &[u8]) -> Result<(), GitError> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(GitError::ForgedTree(format!(
            "an entry named {:?}",
            String::from_utf8_lossy(name)
        )));
    }
    Ok(())
}

/// Writes the nested trees of `flat` into `objects` and returns the top tree's id.
pub fn write(objects: &dyn gix_object::Write, flat: &Flat) -> Result<ObjectId, GitError> {
    let entries: Vec<(&[u8], Entry)> = flat.iter().map(|(p, e)| (p.as_slice(), *e)).collect();
    write_level(objects, &entries)
}

fn write_level(
    objects: &dyn gix_object::Write,
    entries: &[(&[u8], Entry)],
) -> Result<ObjectId, GitError> {
    let mut tree = gix_object::Tree::empty();
    let mut i = 0;
    while i < entries.len() {
        let (path, entry) = entries[i];
        match path.iter().position(|&b| b == b'/') {
            None => {
                tree.entries.push(gix_object::tree::Entry {
                    mode: entry.mode.kind().into(),
                    filename: BString::from(path),
                    oid: entry.id,
                });
                i += 1;
            }
            Some(slash) => {
                let dir = &path[..slash];
                // Paths below `dir/` are contiguous in byte order.
                let end = entries[i..]
                    .iter()
                    .position(|(p, _)| !(p.starts_with(dir) && p.get(slash) == Some(&b'/')))
                    .map_or(entries.len(), |n| i + n);
                let below: Vec<(&[u8], Entry)> = entries[i..end]
                    .iter()
                    .map(|(p, e)| (&p[slash + 1..], *e))
                    .collect();
                let id = write_level(objects, &below)?;
                tree.entries.push(gix_object::tree::Entry {
                    mode: EntryKind::Tree.into(),
                    filename: BString::from(dir),
                    oid: id,
                });
                i = end;
            }
        }
    }
    tree.entries.sort();
    if let Some(pair) = tree
        .entries
        .windows(2)
        .find(|w| w[0].filename == w[1].filename)
    {
        return Err(GitError::Objects(format!(
            "the tree would hold two entries named `{}`",
            BStr::new(&pair[0].filename)
        )));
    }
    objects
        .write(&tree)
        .map_err(GitError::library("write a tree"))
}
