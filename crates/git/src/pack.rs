//! Delta chains of packs in a writable git directory (`allow_git_mutations`). gitoxide resolves
//! an object at the end of a chain by applying every delta in it, with no bound on the chain's
//! length: a step can write a pack of a few hundred kilobytes whose 20,000-long chain of full
//! copies of a 4 MiB blob costs the host tens of seconds per read. Before gitoxide reads through
//! a pack, its chains are measured from the entry headers alone (nothing is inflated), and a pack
//! with a chain deeper than git itself writes is refused.

use std::collections::HashMap;
use std::path::Path;

use gix_pack::data::entry::Header;

use crate::GitError;

/// The deepest delta chain accepted: git's own maximum (`pack.depth` is capped at 4095).
pub const MAX_CHAIN: usize = 4095;

/// Refuses the pack at `path` (its `.idx` beside it) when a delta chain in it is deeper than
/// [`MAX_CHAIN`], loops, or points outside the pack file. A pack without its index is not
/// read by gitoxide either and is left alone.
pub(crate) fn refuse_deep_chains(path: &Path) -> Result<(), GitError> {
    chain_depths(path, false).map(|_| ())
}

/// As [`refuse_deep_chains`], returning the delta depth of every object the index lists (0 for
/// a whole object). With `self_contained`, a delta whose base is not in this pack is refused
/// too: git keeps no thin pack on disk, and gitoxide would follow such bases across packs,
/// making chains of any length out of packs that each pass.
pub(crate) fn chain_depths(
    path: &Path,
    self_contained: bool,
) -> Result<HashMap<gix_hash::ObjectId, usize>, GitError> {
    let index_path = path.with_extension("idx");
    if !index_path.is_file() {
        return Ok(HashMap::new());
    }
    let shown = path.display().to_string();
    let refused = |why: String| {
        GitError::Objects(format!(
            "the pack {shown} {why}; a step wrote it — remove it, or run without \
             `allow_git_mutations`"
        ))
    };
    let index = gix_pack::index::File::at(&index_path, gix_hash::Kind::Sha1)
        .map_err(|err| refused(format!("has an index cordon cannot read ({err})")))?;
    let pack = gix_pack::data::File::at(path, gix_hash::Kind::Sha1)
        .map_err(|err| refused(format!("cannot be read ({err})")))?;
    // The depth of every entry seen, so each is followed once however many chains share it.
    let mut depth: HashMap<u64, usize> = HashMap::new();
    for entry in index.iter() {
        let mut chain = Vec::new();
        let mut offset = entry.pack_offset;
        let base = loop {
            if let Some(&known) = depth.get(&offset) {
                break known;
            }
            if chain.len() > MAX_CHAIN {
                return Err(refused(format!(
                    "has a delta chain deeper than {MAX_CHAIN} (git writes none)"
                )));
            }
            let header = pack
                .entry(offset)
                .map_err(|err| refused(format!("has an entry cordon cannot read ({err})")))?
                .header;
            let next = match header {
                Header::OfsDelta { base_distance } => offset.checked_sub(base_distance),
                Header::RefDelta { base_id } => match index.lookup(base_id) {
                    Some(at) => Some(index.pack_offset_at_index(at)),
                    None if self_contained => {
                        return Err(refused(
                            "has a delta whose base is in no other place of it (a thin pack, \
                             which git never leaves on disk)"
                                .to_owned(),
                        ));
                    }
                    // A base outside this pack (a thin pack's): found elsewhere, depth 0 here.
                    None => {
                        chain.push(offset);
                        break 0;
                    }
                },
                Header::Commit | Header::Tree | Header::Blob | Header::Tag => {
                    depth.insert(offset, 0);
                    break 0;
                }
            };
            chain.push(offset);
            match next {
                Some(next) if next < offset || matches!(header, Header::RefDelta { .. }) => {
                    offset = next;
                }
                _ => return Err(refused("has a delta pointing outside it".to_owned())),
            }
        };
        // A ref-delta loop runs into the chain bound above, never into this.
        for (i, at) in chain.iter().rev().enumerate() {
            depth.insert(*at, base + i + 1);
        }
        if base + chain.len() > MAX_CHAIN {
            return Err(refused(format!(
                "has a delta chain deeper than {MAX_CHAIN} (git writes none)"
            )));
        }
    }
    Ok(index
        .iter()
        .map(|entry| {
            let at = depth.get(&entry.pack_offset).copied().unwrap_or(0);
            (entry.oid, at)
        })
        .collect())
}
