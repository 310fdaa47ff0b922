//! Reading the gitlinks (submodule paths, mode 160000) out of a git index file (`.git/index`,
//! versions 2, 3 and 4), as hostile input.
//!
//! The index is the authoritative list of a work tree's submodules: `.gitmodules` is an ordinary
//! work-tree file the sandbox can rewrite, the index lives in the git directory, which is read-only
//! inside the sandbox (unless `allow_git_mutations`, see `git::submodules`). It is still parsed as
//! if hostile: every read is bounds-checked, no count or length from the file is trusted to size
//! an allocation, nothing panics, and anything that does not parse exactly is an error rather
//! than a best guess — a misparse could hide a gitlink, so the caller fails closed on it.
//!
//! What is checked, after git's own reader (`read-cache.c`): the `DIRC` signature, the version,
//! each entry's layout (the name length in the flags against the NUL-terminated name in versions
//! 2 and 3, NUL padding to 8 bytes, the extended-flags bit only from version 3), version 4's
//! prefix compression (never stripping more than the previous name holds), the extension headers,
//! and that exactly one trailing hash follows them. The trailing checksum itself is not verified
//! (that would need a SHA-1 and SHA-256 implementation for no security gain: a forger can compute
//! it). SHA-1 and SHA-256 repositories differ in the hash length inside each entry, which the file
//! does not state; [`parse`] tries SHA-1 first and SHA-256 when SHA-1 does not parse exactly —
//! with the checks above, one index cannot parse both ways by accident.
//!
//! Sparse indexes (`sdir`) hold directory entries (mode 040000) besides files; those are not
//! gitlinks and are skipped, like every other non-gitlink entry. A split index (`link`) holds only
//! changes against a shared index: [`Parsed::shared`] names it, and the caller reads that too and
//! takes the union of both lists (an entry the split part deleted is then still protected, which
//! errs on the safe side). An entry the split part *replaces* (a submodule whose commit changed)
//! is written with an empty name, its name being that of the shared entry at the position the
//! `link` extension's replace bitmap gives (`ewah.rs`): [`Shared::replaced`] lists those
//! positions for replaced gitlinks, and [`parse_at`] reads their names from the shared index —
//! the same merge git's `merge_base_index` does.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

mod ewah;

/// The most gitlinks one index may hold. A forged index must not make the host collect (and then
/// stat and mount) millions of paths; past this, parsing stops with an error.
pub const MAX_GITLINKS: usize = 4096;
/// The longest entry name accepted (`PATH_MAX`). Version 4's prefix compression lets a few
/// bytes of file rebuild a name as long as every name before it, so without a cap a small forged
/// index (one long name, then thousands of entries each appending a byte) would make the host
/// hold gigabytes of gitlink paths. No path longer than this can be checked out (the kernel
/// refuses it), so git never writes one; with [`MAX_GITLINKS`] it bounds the gitlink bytes kept
/// to 16 MiB.
pub const MAX_NAME: usize = 4096;
/// The file type bits of a gitlink entry's mode (`S_IFGITLINK`, 0160000).
const GITLINK: u32 = 0o160000;
/// The mask of the file type bits in an entry's mode.
const TYPE_MASK: u32 = 0o170000;
/// Bytes of the cached stat data before the object name: ctime, mtime, dev, ino, mode, uid, gid,
/// size (ten 32-bit fields).
const STAT: usize = 40;
/// Where the mode lies in an entry.
const MODE_AT: usize = 24;
/// The header: signature, version, entry count.
const HEADER: usize = 12;
/// The flags bit saying an extended 16-bit flags field follows (version 3 and later).
const EXTENDED: u16 = 0x4000;
/// The name-length part of the flags; `0xFFF` means "this long or longer".
const NAME_MASK: u16 = 0x0FFF;

/// Why an index does not parse. Every variant is a reason to refuse, not to guess.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error("it does not start with the `DIRC` signature")]
    Signature,
    #[error("its version {0} is not one cordon reads (2, 3 or 4)")]
    Version(u32),
    #[error("it ends in the middle of entry {0}")]
    Truncated(u32),
    #[error("entry {0} is malformed")]
    Entry(u32),
    #[error("entry {0} names an invalid gitlink path")]
    Path(u32),
    #[error("entry {0} has a name longer than {MAX_NAME} bytes")]
    NameTooLong(u32),
    #[error("its extensions are malformed")]
    Extensions,
    #[error("its split-index entries do not match its shared index")]
    Split,
    #[error("it holds more than {MAX_GITLINKS} gitlinks")]
    TooManyGitlinks,
}

/// What an index says about submodules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The paths of gitlink entries, relative to the work tree, each once, in index order.
    pub gitlinks: Vec<PathBuf>,
    /// The shared index this split index extends, when it is one.
    pub shared: Option<Shared>,
    /// The names of the entries at the positions [`parse_at`] was asked for, as gitlink paths.
    pub at: Vec<PathBuf>,
}

/// What a split index says about its shared index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shared {
    /// Its hex object name (`sharedindex.<hex>` in the git directory).
    pub name: String,
    /// The positions of the shared entries this index replaces with gitlinks, ascending.
    pub replaced: Vec<u64>,
}

/// Parses `bytes` as an index of a SHA-1 repository, else of a SHA-256 one (see the module
/// documentation). The error is the SHA-1 attempt's when neither parses.
pub fn parse(bytes: &[u8]) -> Result<Parsed, IndexError> {
    parse_at(bytes, &[], b"")
}

/// [`parse`], also returning in [`Parsed::at`] the names of the entries at `wanted` (ascending
/// positions, from a split index's [`Shared::replaced`]), each required to be a valid gitlink
/// path, and all required to exist. Only gitlinks at `within` or below it (a path relative to the
/// work tree, without a trailing `/`; empty for all) are kept in [`Parsed::gitlinks`] and count
/// towards [`MAX_GITLINKS`]: an index of a repository above the workspace may list any number of
/// gitlinks elsewhere, which cordon need not protect and must not refuse the session for.
pub fn parse_at(bytes: &[u8], wanted: &[u64], within: &[u8]) -> Result<Parsed, IndexError> {
    parse_with(bytes, 20, wanted, within)
        .or_else(|sha1| parse_with(bytes, 32, wanted, within).map_err(|_| sha1))
}

/// Whether the entry `name` is `within` or lies below it (see [`parse_at`]).
pub(super) fn is_within(name: &[u8], within: &[u8]) -> bool {
    within.is_empty()
        || name
            .strip_prefix(within)
            .is_some_and(|rest| rest.is_empty() || rest[0] == b'/')
}

/// A cursor over the index bytes whose reads fail instead of panicking.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let slice = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(slice)
    }

    fn u16(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Option<u32> {
        let b = self.take(4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Bytes up to (not including) the next NUL, which is consumed.
    fn until_nul(&mut self) -> Option<&'a [u8]> {
        let rest = self.bytes.get(self.at..)?;
        let len = rest.iter().position(|b| *b == 0)?;
        let name = self.take(len)?;
        self.take(1)?;
        Some(name)
    }

    /// Git's offset varint (`varint.c`): 7 bits a byte, high bit "more", plus one per
    /// continuation. `None` on overflow.
    fn varint(&mut self) -> Option<usize> {
        let mut byte = *self.take(1)?.first()?;
        let mut value = usize::from(byte & 0x7f);
        while byte & 0x80 != 0 {
            byte = *self.take(1)?.first()?;
            value = value
                .checked_add(1)?
                .checked_mul(128)?
                .checked_add(usize::from(byte & 0x7f))?;
        }
        Some(value)
    }
}

fn parse_with(
    bytes: &[u8],
    hash_len: usize,
    wanted: &[u64],
    within: &[u8],
) -> Result<Parsed, IndexError> {
    // The trailing hash is not part of the entries or extensions; cut it off first so nothing
    // below can read into it.
    let body_len = bytes
        .len()
        .checked_sub(hash_len)
        .filter(|len| *len >= HEADER)
        .ok_or(IndexError::Truncated(0))?;
    let mut r = Reader {
        bytes: &bytes[..body_len],
        at: 0,
    };
    if r.take(4) != Some(b"DIRC".as_slice()) {
        return Err(IndexError::Signature);
    }
    let version = r.u32().ok_or(IndexError::Truncated(0))?;
    if !(2..=4).contains(&version) {
        return Err(IndexError::Version(version));
    }
    // The count is not used to size anything: a forged huge count just runs out of bytes.
    let count = r.u32().ok_or(IndexError::Truncated(0))?;
    let mut parsed = Parsed::default();
    let mut name: Vec<u8> = Vec::new();
    // Whether each of the leading entries with an empty name (a split index's replacements) is
    // a gitlink.
    let mut stripped: Vec<bool> = Vec::new();
    let mut replaced_gitlinks = 0usize;
    let mut wanted = wanted.iter().peekable();
    for n in 0..count {
        let start = r.at;
        let fixed = r.take(STAT + hash_len).ok_or(IndexError::Truncated(n))?;
        let mode = u32::from_be_bytes([
            fixed[MODE_AT],
            fixed[MODE_AT + 1],
            fixed[MODE_AT + 2],
            fixed[MODE_AT + 3],
        ]);
        let flags = r.u16().ok_or(IndexError::Truncated(n))?;
        if flags & EXTENDED != 0 {
            if version < 3 {
                return Err(IndexError::Entry(n));
            }
            r.u16().ok_or(IndexError::Truncated(n))?;
        }
        // The name, in `name` (one buffer reused for every entry: no allocation per entry).
        if version == 4 {
            // Prefix compression: drop `strip` bytes from the end of the previous name, then
            // append the NUL-terminated suffix. No padding in version 4.
            let strip = r.varint().ok_or(IndexError::Truncated(n))?;
            let keep = name.len().checked_sub(strip).ok_or(IndexError::Entry(n))?;
            let suffix = r.until_nul().ok_or(IndexError::Truncated(n))?;
            // Checked before the buffer grows: the rebuilt name never exceeds MAX_NAME.
            if keep.saturating_add(suffix.len()) > MAX_NAME {
                return Err(IndexError::NameTooLong(n));
            }
            name.truncate(keep);
            name.extend_from_slice(suffix);
        } else {
            let read = r.until_nul().ok_or(IndexError::Truncated(n))?;
            // The same cap in every version, so one rule describes what cordon accepts (a
            // version 2 name costs its own bytes in the file, so here it only keeps the rule one).
            if read.len() > MAX_NAME {
                return Err(IndexError::NameTooLong(n));
            }
            let stated = usize::from(flags & NAME_MASK);
            if (stated < usize::from(NAME_MASK) && stated != read.len())
                || (stated == usize::from(NAME_MASK) && read.len() < stated)
            {
                return Err(IndexError::Entry(n));
            }
            // Entries are padded with 1 to 8 NULs to a multiple of 8 bytes; the NUL ending the
            // name (consumed above) is the first of them.
            let unpadded = r.at - start;
            let padded = (r.at - start - 1 + 8) & !7;
            let padding = r.take(padded - unpadded).ok_or(IndexError::Truncated(n))?;
            if padding.iter().any(|b| *b != 0) {
                return Err(IndexError::Entry(n));
            }
            name.clear();
            name.extend_from_slice(read);
        }
        let is_gitlink = mode & TYPE_MASK == GITLINK;
        if wanted.peek() == Some(&&u64::from(n)) {
            wanted.next();
            parsed
                .at
                .push(gitlink_path(&name).ok_or(IndexError::Path(n))?);
        }
        if name.is_empty() {
            // Only a split index's replacements have no name, and they come first (git's
            // `merge_base_index` takes them in order); anything else is no index git wrote.
            if stripped.len() != n as usize {
                return Err(IndexError::Entry(n));
            }
            // Replaced gitlinks become paths too (read from the shared index): they count.
            if is_gitlink {
                if replaced_gitlinks == MAX_GITLINKS {
                    return Err(IndexError::TooManyGitlinks);
                }
                replaced_gitlinks += 1;
            }
            stripped.push(is_gitlink);
            continue;
        }
        if is_gitlink {
            let path = gitlink_path(&name).ok_or(IndexError::Path(n))?;
            if !is_within(&name, within) {
                continue;
            }
            // Git sorts the index by name (then stage), so the conflict stages of one path are
            // adjacent; comparing with the last one keeps this linear. A forged, unsorted index
            // may repeat a path, which costs a duplicate mount, nothing more.
            if parsed.gitlinks.last() != Some(&path) {
                if parsed.gitlinks.len() == MAX_GITLINKS {
                    return Err(IndexError::TooManyGitlinks);
                }
                parsed.gitlinks.push(path);
            }
        }
    }
    // Extensions: a 4-byte signature and a 32-bit length each, up to exactly the trailing hash.
    while r.at < body_len {
        let signature = r.take(4).ok_or(IndexError::Extensions)?;
        let len = r.u32().ok_or(IndexError::Extensions)?;
        let len = usize::try_from(len).map_err(|_| IndexError::Extensions)?;
        let data = r.take(len).ok_or(IndexError::Extensions)?;
        if signature == b"link" {
            // The shared index's object name, then the delete bitmap (an entry the split part
            // deleted stays protected, so it is only skipped), then the replace bitmap: one set
            // bit per replacement, in the order the replacements come.
            let name = data.get(..hash_len).ok_or(IndexError::Extensions)?;
            let rest = data.get(hash_len..).ok_or(IndexError::Extensions)?;
            let mut replaced = Vec::new();
            if !rest.is_empty() {
                let deletions = ewah::size(rest).ok_or(IndexError::Extensions)?;
                let rest = rest.get(deletions..).ok_or(IndexError::Extensions)?;
                let (positions, used) =
                    ewah::set_bits(rest, stripped.len()).ok_or(IndexError::Split)?;
                if used != rest.len() {
                    return Err(IndexError::Extensions);
                }
                if positions.len() != stripped.len() {
                    return Err(IndexError::Split);
                }
                replaced = positions
                    .into_iter()
                    .zip(&stripped)
                    .filter(|(_, is_gitlink)| **is_gitlink)
                    .map(|(position, _)| position)
                    .collect();
            }
            parsed.shared = Some(Shared {
                name: name.iter().map(|b| format!("{b:02x}")).collect(),
                replaced,
            });
        }
    }
    // Replacements without a `link` extension to say what they replace, or positions asked for
    // that the index does not have: not an index git would read either.
    if (!stripped.is_empty() && parsed.shared.is_none()) || wanted.next().is_some() {
        return Err(IndexError::Split);
    }
    Ok(parsed)
}

/// A gitlink name as a relative path, when git itself would accept it (`verify_path`): not
/// empty, no leading or doubled `/`, no `.`, `..` or `.git` component (any case). Anything else
/// would land outside the work tree or inside a git directory.
fn gitlink_path(name: &[u8]) -> Option<PathBuf> {
    if name.is_empty() {
        return None;
    }
    for part in name.split(|b| *b == b'/') {
        if part.is_empty() || part == b"." || part == b".." || part.eq_ignore_ascii_case(b".git") {
            return None;
        }
    }
    Some(PathBuf::from(OsStr::from_bytes(name)))
}

#[cfg(test)]
mod tests;
