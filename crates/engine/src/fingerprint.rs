//! `Fingerprint`: a digest of every workspace entry's path, type, size, mode, inode and
//! modification time (the `.git` directory excluded). Equal fingerprints mean nothing visible to
//! git changed, so a diff taken before still holds; it reads metadata only, never contents.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use sha2::{Digest, Sha256};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fingerprint([u8; 32]);

impl Fingerprint {
    pub(crate) fn of(workspace: &Path) -> Fingerprint {
        let mut hash = Sha256::new();
        let mut stack = vec![workspace.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut entries: Vec<_> = entries.flatten().collect();
            entries.sort_by_key(std::fs::DirEntry::file_name);
            for entry in entries {
                let path = entry.path();
                if dir == workspace && entry.file_name() == ".git" {
                    continue;
                }
                let Ok(meta) = entry.metadata() else {
                    continue;
                };
                hash.update(path.as_os_str().as_encoded_bytes());
                hash.update([0]);
                for number in [
                    meta.len(),
                    u64::from(meta.mode()),
                    meta.ino(),
                    meta.mtime() as u64,
                    meta.mtime_nsec() as u64,
                ] {
                    hash.update(number.to_le_bytes());
                }
                if meta.is_dir() {
                    stack.push(path);
                }
            }
        }
        Fingerprint(hash.finalize().into())
    }
}
