//! The staging of arbitrary path names as one pure function, for the `commit_paths` fuzz target
//! (doc-hidden, not an API): every name a work tree can hold — newlines, control characters,
//! `..`-like components, very long names — goes into a tree and comes back out unchanged, and
//! its quoted form (what a patch or a status line shows) holds no control character.

use std::cell::RefCell;
use std::collections::HashMap;

use gix_hash::ObjectId;

use crate::tree::{self, Entry, Flat, Mode};

/// An object store in memory.
#[derive(Default)]
struct Memory(RefCell<HashMap<ObjectId, (gix_object::Kind, Vec<u8>)>>);

impl gix_object::Write for Memory {
    fn write_stream(
        &self,
        kind: gix_object::Kind,
        size: u64,
        from: &mut dyn std::io::Read,
    ) -> gix_error::Result<ObjectId> {
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        from.read_to_end(&mut bytes)
            .map_err(gix_error::Error::from_error)?;
        let id = gix_object::compute_hash(gix_hash::Kind::Sha1, kind, &bytes)?;
        self.0.borrow_mut().insert(id, (kind, bytes));
        Ok(id)
    }

    fn write_buf_with_known_id(
        &self,
        kind: gix_object::Kind,
        from: &[u8],
        _id: ObjectId,
    ) -> gix_error::Result<ObjectId> {
        self.write_buf(kind, from)
    }

    fn write_stream_with_known_id(
        &self,
        kind: gix_object::Kind,
        size: u64,
        from: &mut dyn std::io::Read,
        _id: ObjectId,
    ) -> gix_error::Result<ObjectId> {
        self.write_stream(kind, size, from)
    }
}

impl gix_object::FindHeader for Memory {
    fn try_header(&self, id: &gix_hash::oid) -> gix_error::Result<Option<gix_object::Header>> {
        Ok(self
            .0
            .borrow()
            .get(id)
            .map(|(kind, bytes)| gix_object::Header {
                kind: *kind,
                size: bytes.len() as u64,
            }))
    }
}

impl gix_object::Find for Memory {
    fn try_find<'a>(
        &self,
        id: &gix_hash::oid,
        buffer: &'a mut Vec<u8>,
    ) -> gix_error::Result<Option<gix_object::Data<'a>>> {
        let objects = self.0.borrow();
        let Some((kind, bytes)) = objects.get(id) else {
            return Ok(None);
        };
        buffer.clear();
        buffer.extend_from_slice(bytes);
        Ok(Some(gix_object::Data {
            kind: *kind,
            object_hash: gix_hash::Kind::Sha1,
            data: buffer,
        }))
    }
}

/// Stages `names` (each a path a work tree could hold; those the workspace view refuses are
/// left out, as the walk never yields them) as one tree, reads it back, and checks both the
/// round trip and the quoting. `false` is a bug.
#[doc(hidden)]
pub fn fuzz_stage(names: &[&[u8]]) -> bool {
    let blob = ObjectId::empty_blob(gix_hash::Kind::Sha1);
    let mut flat = Flat::new();
    for name in names {
        let Ok(path) = cordon_workspace::WsPath::from_bytes(name) else {
            continue;
        };
        // A path that is a file cannot also be a directory above another (the walk never
        // yields both).
        let bytes = path.as_bytes().to_vec();
        let clashes = flat.keys().any(|p: &Vec<u8>| {
            (p.len() < bytes.len() && bytes.starts_with(p) && bytes[p.len()] == b'/')
                || (bytes.len() < p.len() && p.starts_with(&bytes) && p[bytes.len()] == b'/')
        });
        if !clashes {
            flat.insert(
                bytes,
                Entry {
                    mode: Mode::File,
                    id: blob,
                },
            );
        }
    }
    let store = Memory::default();
    let Ok(top) = tree::write(&store, &flat) else {
        return false;
    };
    let Ok(back) = tree::flatten(&store, &top) else {
        return false;
    };
    if back != flat {
        return false;
    }
    flat.keys().all(|path| {
        let shown = crate::diff::quote(b"a/", path);
        !shown.chars().any(char::is_control)
    })
}
