//! Applying layers to the image's root directory, through the beneath-view (DESIGN §18): every
//! entry's path is resolved with no link followed, so a layer cannot write through a link an
//! earlier entry planted; paths with `..` and hard links to anything but a file already unpacked
//! here refuse the import; device nodes refuse it; setuid, setgid and group/other write bits are
//! dropped; extended attributes, owners and FIFOs are not applied. Whiteouts (`.wh.<name>`) and
//! opaque directories (`.wh..wh..opq`) remove what lower layers put there, never what this layer
//! did.

use std::collections::{HashMap, HashSet};
use std::io::{self, BufRead, BufReader, Read};

use cordon_workspace::{Kind, View, ViewError, WsPath, is_git_name};
use flate2::read::MultiGzDecoder;

use crate::archive::Extensions;
use crate::digest::{Digest, Exceeded, Hashing};
use crate::error::{ImageError, shown_bytes};
use crate::manifest::mismatch;
use crate::store::Limits;

/// Layers smaller than this unpacked are not held to the compression ratio: a tar's padding
/// alone compresses more than 100:1.
pub(crate) const RATIO_FLOOR: u64 = 1 << 20;
/// The largest zstd window accepted (zstd's own default limit): a frame may not make the decoder
/// hold more than this.
const MAX_ZSTD_WINDOW: u64 = 128 << 20;

const OPAQUE: &[u8] = b".wh..wh..opq";
const WHITEOUT: &[u8] = b".wh.";

/// What an import left out, reported by `cordon image import`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Skipped {
    /// Entries named `.git` (or a name git takes for it), and what lies below them: the host
    /// handles no git directory it did not make.
    pub git: u64,
    /// FIFOs and sockets.
    pub special: u64,
    /// Files whose setuid or setgid bit was dropped.
    pub setuid: u64,
}

/// One import's unpacking state across its layers.
pub(crate) struct Unpacker<'a> {
    view: &'a View,
    limits: &'a Limits,
    pub(crate) entries: u64,
    pub(crate) unpacked: u64,
    /// Final modes and times of directories, applied once every layer is in (until then each
    /// directory stays writable for its owner, so a later layer can fill a read-only one).
    dirs: HashMap<WsPath, (u32, i64)>,
    /// What the current layer made: its whiteouts do not apply to these.
    this_layer: HashSet<WsPath>,
    /// The parent directory last checked, so a run of entries in one directory checks it once.
    checked: Option<WsPath>,
    pub(crate) skipped: Skipped,
}

impl<'a> Unpacker<'a> {
    pub(crate) fn new(view: &'a View, limits: &'a Limits) -> Unpacker<'a> {
        Unpacker {
            view,
            limits,
            entries: 0,
            unpacked: 0,
            dirs: HashMap::new(),
            this_layer: HashSet::new(),
            checked: None,
            skipped: Skipped::default(),
        }
    }

    /// Unpacks layer `index` (counted from 1) from `blob` (gzip, zstd or plain tar, told by its
    /// first bytes), then checks the blob against `blob_digest` and the unpacked tar against
    /// `diff_id`.
    pub(crate) fn layer(
        &mut self,
        index: usize,
        blob: impl Read,
        packed_size: u64,
        diff_id: &Digest,
        blob_digest: Option<&Digest>,
    ) -> Result<(), ImageError> {
        self.this_layer.clear();
        self.checked = None;
        let total_left = self.limits.unpacked.saturating_sub(self.unpacked);
        let ratio_cap = packed_size
            .saturating_mul(self.limits.ratio)
            .max(RATIO_FLOOR);
        let limit = total_left.min(ratio_cap);
        let too_large = || ImageError::TooLarge {
            what: if ratio_cap < total_left {
                format!(
                    "it unpacks to more than {}:1 its compressed size",
                    self.limits.ratio
                )
            } else {
                format!("more than {} bytes unpacked", self.limits.unpacked)
            },
            layer: index,
        };
        let mut packed = Hashing::new(blob, u64::MAX);
        let (unpacked_digest, unpacked_count) = {
            let mut buffered = BufReader::with_capacity(64 << 10, &mut packed);
            let head = buffered
                .fill_buf()
                .map_err(|e| ImageError::malformed(format!("layer {index}"), e))?
                .to_vec();
            let decoded: Box<dyn Read + '_> = if head.starts_with(&[0x1f, 0x8b]) {
                Box::new(MultiGzDecoder::new(buffered))
            } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
                Box::new(Zstd::new(buffered, index))
            } else {
                Box::new(buffered)
            };
            let mut unpacked = Hashing::new(decoded, limit);
            let result = self.entries_of(index, &mut unpacked).and_then(|()| {
                // The tar's end marker and padding are part of the digest.
                io::copy(&mut unpacked, &mut io::sink())
                    .map(drop)
                    .map_err(|e| layer_error(index, e))
            });
            match result {
                Err(ImageError::Malformed { .. }) if unpacked.count() >= limit => {
                    return Err(too_large());
                }
                Err(err) => return Err(err),
                Ok(()) => {}
            }
            let count = unpacked.count();
            (unpacked.digest(), count)
        };
        self.unpacked += unpacked_count;
        if &unpacked_digest != diff_id {
            return Err(mismatch(
                &format!("layer {index} (unpacked)"),
                diff_id,
                &unpacked_digest,
            ));
        }
        if let Some(expected) = blob_digest {
            let found = packed.digest();
            if &found != expected {
                return Err(mismatch(&format!("layer {index}"), expected, &found));
            }
        }
        Ok(())
    }

    /// The layer's entries, read raw, their long names and PAX paths applied by
    /// [`Extensions`] (bounded, unlike the `tar` crate's own reading of them).
    fn entries_of(&mut self, index: usize, tar: &mut dyn Read) -> Result<(), ImageError> {
        let mut archive = tar::Archive::new(tar);
        let mut extensions = Extensions::default();
        let entries = archive.entries().map_err(|e| layer_error(index, e))?;
        for entry in entries.raw(true) {
            let mut entry = entry.map_err(|e| layer_error(index, e))?;
            let Some((path, link)) = extensions.names(&mut entry, index)? else {
                continue;
            };
            self.entry(index, entry, path, link)?;
        }
        Ok(())
    }

    fn entry(
        &mut self,
        layer: usize,
        mut entry: tar::Entry<'_, impl Read>,
        raw: Vec<u8>,
        link: Option<Vec<u8>>,
    ) -> Result<(), ImageError> {
        self.entries += 1;
        if self.entries > self.limits.entries {
            return Err(ImageError::TooLarge {
                what: format!("more than {} entries", self.limits.entries),
                layer,
            });
        }
        let refuse = |problem: &'static str| ImageError::Refused {
            layer,
            entry: shown_bytes(&raw),
            problem,
        };
        let Some(path) = normalize(&raw).map_err(|()| refuse("escapes the image root"))? else {
            return Ok(()); // the root itself
        };
        let Some(path) = path else {
            self.skipped.git += 1;
            return Ok(());
        };
        let path = WsPath::from_bytes(&path).map_err(|_| refuse("is too long a path"))?;
        let name = path.file_name().to_vec();
        if let Some(hidden) = name.strip_prefix(WHITEOUT) {
            return self.whiteout(layer, &raw, &path, hidden);
        }
        self.parents(layer, &raw, &path)?;
        let header = entry.header();
        let kind = header.entry_type();
        let mode = header.mode().map_err(|e| layer_error(layer, e))? & 0o7777;
        let mtime = header
            .mtime()
            .ok()
            .and_then(|t| i64::try_from(t).ok())
            .unwrap_or(0);
        let io = |e: ViewError| ImageError::malformed(format!("layer {layer}"), e);
        use tar::EntryType as T;
        match kind {
            T::Directory => {
                match self.view.meta(&path).map_err(io)? {
                    Some(meta) if meta.kind == Kind::Directory => {}
                    Some(_) => {
                        self.clear(&path).map_err(io)?;
                        self.view.create_dir(&path, 0o700).map_err(io)?;
                    }
                    None => {
                        self.view.create_dir(&path, 0o700).map_err(io)?;
                    }
                }
                self.dirs.insert(path.clone(), (mode & 0o1755, mtime));
            }
            T::Regular | T::Continuous => {
                self.clear(&path).map_err(io)?;
                if mode & 0o6000 != 0 {
                    self.skipped.setuid += 1;
                }
                self.view
                    .create_from(&path, mode & 0o755, &mut entry)
                    .map_err(|e| match e {
                        ViewError::Io { source, .. } if Exceeded::is(&source) => {
                            layer_error(layer, source)
                        }
                        other => io(other),
                    })?;
                self.view.set_mtime(&path, mtime).map_err(io)?;
            }
            T::Symlink => {
                let target = link.ok_or_else(|| refuse("is a link without a target"))?;
                self.clear(&path).map_err(io)?;
                self.view.symlink(&path, &target).map_err(io)?;
                self.view.set_mtime(&path, mtime).map_err(io)?;
            }
            T::Link => {
                let target = link.ok_or_else(|| refuse("is a hard link without a target"))?;
                let not_earlier = "is a hard link to something that is not a file unpacked \
                                   earlier in this image";
                let target = match normalize(&target) {
                    Err(()) => return Err(refuse("is a hard link that escapes the image root")),
                    Ok(None) | Ok(Some(None)) => return Err(refuse(not_earlier)),
                    Ok(Some(Some(t))) => WsPath::from_bytes(&t).map_err(|_| refuse(not_earlier))?,
                };
                match self.view.meta(&target) {
                    Ok(Some(meta)) if meta.kind == Kind::File => {}
                    _ => return Err(refuse(not_earlier)),
                }
                if target != path {
                    self.clear(&path).map_err(io)?;
                    self.view.hard_link(&target, &path).map_err(io)?;
                }
            }
            T::Char | T::Block => {
                return Err(refuse(
                    "is a device node; images with device nodes are refused (the sandbox makes \
                     its own /dev)",
                ));
            }
            T::Fifo => {
                self.skipped.special += 1;
                return Ok(());
            }
            T::GNUSparse => {
                return Err(refuse(
                    "is a sparse file, which cordon does not unpack; save the image again \
                     without sparse files",
                ));
            }
            _ => return Err(refuse("has an entry type cordon does not unpack")),
        }
        self.this_layer.insert(path);
        Ok(())
    }

    /// A whiteout: `.wh..wh..opq` empties its directory of what lower layers put there;
    /// `.wh.<name>` removes `<name>` unless this layer made it.
    fn whiteout(
        &mut self,
        layer: usize,
        raw: &[u8],
        path: &WsPath,
        hidden: &[u8],
    ) -> Result<(), ImageError> {
        let io = |e: ViewError| ImageError::malformed(format!("layer {layer}"), e);
        let (parent, _) = path.split();
        let parent = match parent {
            Some(dir) => Some(WsPath::from_bytes(dir).map_err(|_| ImageError::Refused {
                layer,
                entry: shown_bytes(raw),
                problem: "is not a valid path",
            })?),
            None => None,
        };
        self.checked = None;
        if path.file_name() == OPAQUE {
            let listing = match self.view.list(
                parent.as_ref(),
                usize::try_from(self.limit()).unwrap_or(usize::MAX),
            ) {
                Ok(listing) => listing,
                // Nothing there yet: nothing to hide.
                Err(ViewError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                    return Ok(());
                }
                Err(e) => return Err(io(e)),
            };
            for child in listing.entries {
                let child = WsPath::child(parent.as_ref(), &child.name).map_err(|_| {
                    ImageError::malformed(format!("layer {layer}"), "a name is not a valid path")
                })?;
                if !self.this_layer.contains(&child) {
                    self.view.remove_all(&child, self.limit()).map_err(io)?;
                }
            }
            return Ok(());
        }
        if is_git_name(hidden) {
            self.skipped.git += 1;
            return Ok(());
        }
        let target = WsPath::child(parent.as_ref(), hidden).map_err(|_| ImageError::Refused {
            layer,
            entry: shown_bytes(raw),
            problem: "whites out a name that is not a valid path",
        })?;
        if !self.this_layer.contains(&target) {
            match self.view.remove_all(&target, self.limit()) {
                Ok(_) | Err(ViewError::Blocked { .. }) => {}
                Err(e) => return Err(io(e)),
            }
        }
        Ok(())
    }

    /// Makes the missing directories above `path`; a link or a file among them refuses the
    /// entry (nothing is unpacked through a link).
    fn parents(&mut self, layer: usize, raw: &[u8], path: &WsPath) -> Result<(), ImageError> {
        let (Some(parent), _) = path.split() else {
            return Ok(());
        };
        if self
            .checked
            .as_ref()
            .is_some_and(|c| c.as_bytes() == parent)
        {
            return Ok(());
        }
        let io = |e: ViewError| ImageError::malformed(format!("layer {layer}"), e);
        let mut done: Option<WsPath> = None;
        for name in parent.split(|&b| b == b'/') {
            let here = WsPath::child(done.as_ref(), name)
                .map_err(|_| ImageError::malformed(format!("layer {layer}"), "bad path"))?;
            match self.view.meta(&here) {
                Ok(Some(meta)) if meta.kind == Kind::Directory => {}
                Ok(Some(_)) | Err(ViewError::Blocked { .. }) => {
                    return Err(ImageError::Refused {
                        layer,
                        entry: shown_bytes(raw),
                        problem: "lies below a symbolic link or a file, and cordon unpacks \
                                  nothing through a link",
                    });
                }
                Ok(None) => {
                    self.view.create_dir(&here, 0o700).map_err(io)?;
                    self.dirs.entry(here.clone()).or_insert((0o755, 0));
                    self.this_layer.insert(here.clone());
                }
                Err(e) => return Err(io(e)),
            }
            done = Some(here);
        }
        self.checked = done;
        Ok(())
    }

    /// Removes whatever is at `path` unless it is a directory and `path` stays one: a file, link
    /// or directory replaced by an entry of another kind.
    fn clear(&mut self, path: &WsPath) -> Result<(), ViewError> {
        self.dirs.remove(path);
        if self.view.meta(path)?.is_some() {
            self.view.remove_all(path, self.limit())?;
            self.checked = None;
        }
        Ok(())
    }

    fn limit(&self) -> u64 {
        self.limits.entries
    }

    /// Once every layer is in: the root entries the sandbox mounts over made plain (a
    /// non-file `/etc/passwd` or `/etc/group` removed, cordon's scratch name `/.cordon` removed),
    /// then the directories' own modes and times, deepest first.
    pub(crate) fn finish(self) -> Result<Skipped, ImageError> {
        let io = |e: ViewError| ImageError::malformed("image", e);
        for name in ["etc/passwd", "etc/group"] {
            let path = WsPath::new(name).expect("a valid path");
            match self.view.meta(&path) {
                Ok(Some(meta)) if meta.kind != Kind::File => {
                    self.view.remove_all(&path, self.limit()).map_err(io)?;
                }
                Ok(_) | Err(ViewError::Blocked { .. }) => {}
                Err(e) => return Err(io(e)),
            }
        }
        let scratch = WsPath::new(".cordon").expect("a valid path");
        self.view.remove_all(&scratch, self.limit()).map_err(io)?;
        let mut dirs: Vec<(WsPath, (u32, i64))> = self.dirs.into_iter().collect();
        dirs.sort_by_key(|(path, _)| std::cmp::Reverse(path.components().count()));
        for (path, (mode, mtime)) in dirs {
            // Gone, or no longer a directory (whited out or replaced by a later layer, or below
            // one that was): nothing to set.
            match self.view.meta(&path) {
                Ok(Some(meta)) if meta.kind == Kind::Directory => {}
                Ok(_) | Err(ViewError::Blocked { .. }) => continue,
                Err(e) => return Err(io(e)),
            }
            self.view.set_mtime(&path, mtime).map_err(io)?;
            self.view.set_dir_mode(Some(&path), mode).map_err(io)?;
        }
        self.view.set_dir_mode(None, 0o755).map_err(io)?;
        Ok(self.skipped)
    }
}

/// A layer entry's path made relative (`/` and `./` prefixes and `.` parts dropped): `Err` when
/// it climbs with `..`; `Ok(None)` for the root itself; `Ok(Some(None))` when a part is a git
/// name (skipped).
#[allow(clippy::type_complexity)]
fn normalize(raw: &[u8]) -> Result<Option<Option<Vec<u8>>>, ()> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for part in raw.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return Err(()),
            part => parts.push(part),
        }
    }
    if parts.is_empty() {
        return Ok(None);
    }
    if parts.iter().any(|p| is_git_name(p)) {
        return Ok(Some(None));
    }
    Ok(Some(Some(parts.join(&b'/'))))
}

fn layer_error(layer: usize, err: io::Error) -> ImageError {
    ImageError::malformed(format!("layer {layer}"), err)
}

/// A zstd stream of one or more frames, each decoded with `ruzstd`; a frame whose window exceeds
/// [`MAX_ZSTD_WINDOW`] is refused before it is decoded.
struct Zstd<R: BufRead> {
    source: Option<R>,
    frame: Option<ruzstd::decoding::StreamingDecoder<R, ruzstd::decoding::FrameDecoder>>,
    layer: usize,
}

impl<R: BufRead> Zstd<R> {
    fn new(source: R, layer: usize) -> Zstd<R> {
        Zstd {
            source: Some(source),
            frame: None,
            layer,
        }
    }
}

impl<R: BufRead> Read for Zstd<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if let Some(frame) = &mut self.frame {
                let n = frame.read(buf)?;
                if n > 0 || buf.is_empty() {
                    return Ok(n);
                }
                let frame = self.frame.take().expect("a frame");
                self.source = Some(frame.into_inner());
            }
            let mut source = self.source.take().expect("a source between frames");
            let head = source.fill_buf()?;
            if head.is_empty() {
                self.source = Some(source);
                return Ok(0);
            }
            // Frame header: magic (4 bytes), descriptor (bit 5: single segment), then the
            // window descriptor when not single-segment.
            let single = head.get(4).is_some_and(|d| d & 0x20 != 0);
            if !single && let Some(&window) = head.get(5) {
                let exponent = u64::from(window >> 3);
                let base = 1u64 << (10 + exponent);
                let size = base + (base / 8) * u64::from(window & 7);
                if size > MAX_ZSTD_WINDOW {
                    return Err(io::Error::other(format!(
                        "layer {}: a zstd frame needs a {size}-byte window, more than the \
                         {MAX_ZSTD_WINDOW} cordon decodes",
                        self.layer
                    )));
                }
            }
            let decoder = ruzstd::decoding::StreamingDecoder::new(source)
                .map_err(|e| io::Error::other(e.to_string()))?;
            if single && decoder.decoder.content_size() > MAX_ZSTD_WINDOW {
                return Err(io::Error::other(format!(
                    "layer {}: a single-segment zstd frame larger than {MAX_ZSTD_WINDOW} bytes",
                    self.layer
                )));
            }
            self.frame = Some(decoder);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_paths_are_made_relative_and_climbing_ones_refused() {
        for (raw, expected) in [
            (&b"./usr/bin/x"[..], Ok(Some(Some(b"usr/bin/x".to_vec())))),
            (b"/etc//passwd", Ok(Some(Some(b"etc/passwd".to_vec())))),
            (b"./", Ok(None)),
            (b"a/../../b", Err(())),
            (b"../x", Err(())),
            (b"app/.git/config", Ok(Some(None))),
            (b"app/.GIT", Ok(Some(None))),
        ] {
            assert_eq!(normalize(raw), expected, "{}", shown_bytes(raw));
        }
    }
}
