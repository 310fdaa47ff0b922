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
    chain_depths(path, false, &mut 0).map(|_| ())
}

/// As [`refuse_deep_chains`], returning the delta depth of every object the index lists (0 for
/// a whole object). With `self_contained`, a delta whose base is not in this pack is refused
/// too: git keeps no thin pack on disk, and gitoxide would follow such bases across packs,
/// making chains of any length out of packs that each pass.
pub(crate) fn chain_depths(
    path: &Path,
    self_contained: bool,
    inflated: &mut u64,
) -> Result<HashMap<gix_hash::ObjectId, Chain>, GitError> {
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
    // The depth and work of every entry seen, so each is followed once however many chains
    // share it.
    let mut seen: HashMap<u64, Chain> = HashMap::new();
    let mut inflate = gix_zlib::Inflate::default();
    for entry in index.iter() {
        let mut chain = Vec::new();
        let mut offset = entry.pack_offset;
        let base = loop {
            if let Some(&known) = seen.get(&offset) {
                break known;
            }
            if chain.len() > MAX_CHAIN {
                return Err(refused(format!(
                    "has a delta chain deeper than {MAX_CHAIN} (git writes none)"
                )));
            }
            let found = pack
                .entry(offset)
                .map_err(|err| refused(format!("has an entry cordon cannot read ({err})")))?;
            let next = match found.header {
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
                        chain.push((offset, found));
                        break Chain::default();
                    }
                },
                Header::Commit | Header::Tree | Header::Blob | Header::Tag => {
                    let whole = Chain {
                        depth: 0,
                        work: found.decompressed_size,
                    };
                    seen.insert(offset, whole);
                    break whole;
                }
            };
            let header = found.header;
            chain.push((offset, found));
            match next {
                Some(next) if next < offset || matches!(header, Header::RefDelta { .. }) => {
                    offset = next;
                }
                _ => return Err(refused("has a delta pointing outside it".to_owned())),
            }
        };
        // A ref-delta loop runs into the chain bound above, never into this.
        let mut below = base;
        for (at, found) in chain.iter().rev() {
            // What resolving this delta produces: every intermediate result counts, since
            // gitoxide builds each one (a chain of large copies ending in a tiny object costs
            // the copies). Measured only for a session's packs, from each delta's own header.
            let produced = if self_contained {
                delta_result_size(&pack, found, &mut inflate, inflated).map_err(refused)?
            } else {
                0
            };
            below = Chain {
                depth: below.depth + 1,
                work: below.work.saturating_add(produced),
            };
            seen.insert(*at, below);
        }
        if below.depth > MAX_CHAIN {
            return Err(refused(format!(
                "has a delta chain deeper than {MAX_CHAIN} (git writes none)"
            )));
        }
    }
    Ok(index
        .iter()
        .map(|entry| {
            let at = seen.get(&entry.pack_offset).copied().unwrap_or_default();
            (entry.oid, at)
        })
        .collect())
}

/// An indexed object's delta chain: its length, and the bytes resolving it produces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Chain {
    pub depth: usize,
    pub work: u64,
}

/// The most bytes one delta's instructions may take (inflated), and all of an import's.
const MAX_DELTA_INSTRUCTIONS: u64 = 64 << 20;
const MAX_INFLATED: u64 = 4 << 30;

/// The size of the object a delta entry produces: the second number of its inflated header.
fn delta_result_size(
    pack: &gix_pack::data::File,
    entry: &gix_pack::data::Entry,
    inflate: &mut gix_zlib::Inflate,
    inflated: &mut u64,
) -> Result<u64, String> {
    let size = entry.decompressed_size;
    *inflated = inflated.saturating_add(size);
    if size > MAX_DELTA_INSTRUCTIONS || *inflated > MAX_INFLATED {
        return Err(format!(
            "has delta instructions larger than cordon reads ({size} bytes in one, at most \
             {MAX_DELTA_INSTRUCTIONS}; {MAX_INFLATED} in all)"
        ));
    }
    let mut out = vec![0u8; size as usize];
    pack.decompress_entry(entry, inflate, &mut out)
        .map_err(|err| format!("has a delta cordon cannot inflate ({err})"))?;
    let mut bytes = out.iter();
    let mut varint = || {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *bytes.next()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    };
    let _base = varint().ok_or("has a delta without a header")?;
    varint().ok_or_else(|| "has a delta without a header".to_owned())
}
