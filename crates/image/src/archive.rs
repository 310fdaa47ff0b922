//! The archive an image is imported from: a tar file (docker-archive or OCI layout tar), indexed
//! once so each blob is read by seeking to it, or an OCI layout directory, read through a
//! beneath-view (no link in it is followed).

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;

use cordon_workspace::{View, WsPath};

use crate::error::{ImageError, shown};

/// How many links between names of a tar archive are followed to reach a blob (a `docker save`
/// of an image sharing layers writes `<id>/layer.tar` as a link to another one).
const MAX_LINK_HOPS: usize = 8;

pub(crate) enum Archive {
    Tar(TarArchive),
    Dir(View),
}

pub(crate) struct TarArchive {
    file: File,
    /// Regular files: name → (offset of the data, size).
    files: HashMap<String, (u64, u64)>,
    /// Symbolic and hard links: name → the name they point to.
    links: HashMap<String, String>,
}

/// A blob being read: a bounded window of the tar file, or a file of the layout directory.
pub(crate) struct Blob<'a> {
    reader: Box<dyn Read + 'a>,
    pub(crate) size: u64,
}

impl Read for Blob<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.reader.read(buf)
    }
}

impl Archive {
    /// Opens `path`: a directory is an OCI layout; a file is indexed as a tar, with at most
    /// `max_entries` entries.
    pub(crate) fn open(path: &Path, max_entries: u64) -> Result<Archive, ImageError> {
        let meta = std::fs::metadata(path).map_err(ImageError::io("open", path))?;
        if meta.is_dir() {
            let view = View::open(path).map_err(ImageError::io("open", path))?;
            return Ok(Archive::Dir(view));
        }
        let file = File::open(path).map_err(ImageError::io("open", path))?;
        TarArchive::index(file, max_entries).map(Archive::Tar)
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        match self {
            Archive::Tar(tar) => tar.resolve(name).is_some(),
            Archive::Dir(view) => ws_path(name)
                .ok()
                .and_then(|p| view.meta(&p).ok().flatten())
                .is_some(),
        }
    }

    /// The blob `name`, or an error naming it as `what`.
    pub(crate) fn open_blob(&self, name: &str, what: &str) -> Result<Blob<'_>, ImageError> {
        let missing = || ImageError::malformed(what, format!("`{}` is missing", shown(name)));
        match self {
            Archive::Tar(tar) => {
                let (offset, size) = tar.resolve(name).ok_or_else(missing)?;
                Ok(Blob {
                    reader: Box::new(Window {
                        file: &tar.file,
                        at: offset,
                        end: offset + size,
                    }),
                    size,
                })
            }
            Archive::Dir(view) => {
                let path = ws_path(name).map_err(|_| missing())?;
                let open = view
                    .open_file(&path)
                    .map_err(|e| ImageError::malformed(what, e))?
                    .ok_or_else(missing)?;
                Ok(Blob {
                    size: open.meta.size,
                    reader: Box::new(open.file),
                })
            }
        }
    }

    /// The whole blob `name`, refused past `limit` bytes (the JSON documents).
    pub(crate) fn read_small(
        &self,
        name: &str,
        what: &str,
        limit: u64,
    ) -> Result<Vec<u8>, ImageError> {
        let blob = self.open_blob(name, what)?;
        if blob.size > limit {
            return Err(ImageError::malformed(
                what,
                format!(
                    "it is {} bytes, more than the {limit} cordon reads",
                    blob.size
                ),
            ));
        }
        let mut bytes = Vec::with_capacity(blob.size as usize);
        blob.take(limit)
            .read_to_end(&mut bytes)
            .map_err(|e| ImageError::malformed(what, e))?;
        Ok(bytes)
    }
}

impl TarArchive {
    fn index(file: File, max_entries: u64) -> Result<TarArchive, ImageError> {
        let bad = |e: io::Error| ImageError::malformed("tar", e);
        // A blob is read only within the file: an entry claiming more bytes than the file holds
        // (which would also inflate the compression-ratio bound its size sets) is refused.
        let length = file.metadata().map_err(bad)?.len();
        let mut files = HashMap::new();
        let mut links = HashMap::new();
        {
            let mut archive = tar::Archive::new(&file);
            let mut count = 0u64;
            let mut extensions = Extensions::default();
            for entry in archive.entries_with_seek().map_err(bad)?.raw(true) {
                let mut entry = entry.map_err(bad)?;
                count += 1;
                if count > max_entries {
                    return Err(ImageError::TooLarge {
                        what: format!("the archive has more than {max_entries} entries"),
                        layer: 0,
                    });
                }
                let Some((path, link)) = extensions.names(&mut entry, 0)? else {
                    continue;
                };
                let Some(name) = normal_name(&path) else {
                    continue;
                };
                let kind = entry.header().entry_type();
                if kind.is_file() {
                    let (offset, size) = (entry.raw_file_position(), entry.size());
                    if offset.checked_add(size).is_none_or(|end| end > length) {
                        return Err(ImageError::malformed(
                            "tar",
                            format!(
                                "`{}` claims {size} bytes, more than the archive holds",
                                shown(&name)
                            ),
                        ));
                    }
                    files.insert(name, (offset, size));
                } else if kind.is_symlink() || kind.is_hard_link() {
                    let Some(target) = link else {
                        continue;
                    };
                    // A symbolic link is relative to its directory; a hard link to the root.
                    let target = if kind.is_symlink() && !target.starts_with(b"/") {
                        let dir = name.rsplit_once('/').map_or("", |(dir, _)| dir);
                        let mut joined = dir.as_bytes().to_vec();
                        joined.push(b'/');
                        joined.extend_from_slice(&target);
                        joined
                    } else {
                        target.to_vec()
                    };
                    if let Some(target) = normal_name(&target) {
                        links.insert(name, target);
                    }
                }
            }
        }
        Ok(TarArchive { file, files, links })
    }

    fn resolve(&self, name: &str) -> Option<(u64, u64)> {
        let mut name = normal_name(name.as_bytes())?;
        for _ in 0..=MAX_LINK_HOPS {
            if let Some(found) = self.files.get(&name) {
                return Some(*found);
            }
            name = self.links.get(&name)?.clone();
        }
        None
    }
}

/// The largest GNU long-name or PAX extension header read (a path is at most 4095 bytes).
const MAX_EXTENSION: u64 = 64 << 10;

/// An entry's path and, for a link, its target, as raw bytes.
pub(crate) type Named = (Vec<u8>, Option<Vec<u8>>);

/// The GNU long names and PAX records read so far for the next entry of a tar read raw. The
/// `tar` crate, reading entries processed, loads such a header whole into memory whatever size
/// it claims (a few megabytes of archive asked for gigabytes); read raw, each is read here,
/// bounded by [`MAX_EXTENSION`], and its `path` and `linkpath` applied to the entry it describes.
#[derive(Default)]
pub(crate) struct Extensions {
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
    pax: Option<Vec<u8>>,
}

impl Extensions {
    /// The path and link target of `entry` (`layer` names it in errors), or `None` when it is an
    /// extension header itself, now read.
    pub(crate) fn names(
        &mut self,
        entry: &mut tar::Entry<'_, impl Read>,
        layer: usize,
    ) -> Result<Option<Named>, ImageError> {
        use tar::EntryType as T;
        let slot = match entry.header().entry_type() {
            T::GNULongName => Some(&mut self.long_name),
            T::GNULongLink => Some(&mut self.long_link),
            T::XHeader => Some(&mut self.pax),
            // Global PAX records set defaults cordon does not use: read past, bounded.
            T::XGlobalHeader => None,
            _ => {
                let pax = self.pax.take();
                let path = record(pax.as_deref(), "path")
                    .or_else(|| self.long_name.take().map(trim_nul))
                    .unwrap_or_else(|| entry.path_bytes().into_owned());
                let link = record(pax.as_deref(), "linkpath")
                    .or_else(|| self.long_link.take().map(trim_nul))
                    .or_else(|| entry.link_name_bytes().map(|l| l.into_owned()));
                (self.long_name, self.long_link) = (None, None);
                return Ok(Some((path, link)));
            }
        };
        if entry.size() > MAX_EXTENSION {
            return Err(ImageError::Refused {
                layer,
                entry: crate::error::shown_bytes(&entry.path_bytes()),
                problem: "is a long-name or PAX header larger than 64 KiB",
            });
        }
        let mut bytes = Vec::new();
        entry
            .take(MAX_EXTENSION)
            .read_to_end(&mut bytes)
            .map_err(|e| ImageError::malformed(format!("layer {layer}"), e))?;
        if let Some(slot) = slot {
            *slot = Some(bytes);
        }
        Ok(None)
    }
}

/// The value of the PAX record `key` in `records`, if it has one.
fn record(records: Option<&[u8]>, key: &str) -> Option<Vec<u8>> {
    tar::PaxExtensions::new(records?)
        .filter_map(Result::ok)
        .filter(|record| record.key_bytes() == key.as_bytes())
        .last()
        .map(|record| record.value_bytes().to_vec())
}

/// A GNU long name without the NUL that ends it.
fn trim_nul(mut bytes: Vec<u8>) -> Vec<u8> {
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    bytes
}

/// A name of the outer archive as a plain relative path (`./` and `/` prefixes and `.` parts
/// dropped); `None` when it climbs with `..` or is empty — such entries are never blobs.
fn normal_name(raw: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(raw).ok()?;
    let mut parts = Vec::new();
    for part in text.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            part => parts.push(part),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

fn ws_path(name: &str) -> Result<WsPath, cordon_workspace::PathError> {
    WsPath::new(&normal_name(name.as_bytes()).unwrap_or_default())
}

/// Bytes `at..end` of the archive file, read with `pread` (no shared cursor).
struct Window<'a> {
    file: &'a File,
    at: u64,
    end: u64,
}

impl Read for Window<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let room = self.end.saturating_sub(self.at);
        let len = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if len == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..len], self.at)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the archive ends inside a blob",
            ));
        }
        self.at += n as u64;
        Ok(n)
    }
}
