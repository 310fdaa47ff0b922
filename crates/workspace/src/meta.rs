//! `Kind` and `Meta`: what an entry of the workspace is, from one `lstat`-like call that never
//! follows a link.

use std::fmt;

use rustix::fs::{FileType, Stat};

/// What a workspace entry is. Only [`Kind::File`] is content.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    File,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
    Unknown,
}

impl Kind {
    fn of(file_type: FileType) -> Kind {
        match file_type {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Directory,
            FileType::Symlink => Kind::Symlink,
            FileType::Fifo => Kind::Fifo,
            FileType::Socket => Kind::Socket,
            FileType::CharacterDevice => Kind::CharDevice,
            FileType::BlockDevice => Kind::BlockDevice,
            FileType::Unknown => Kind::Unknown,
        }
    }
}

impl fmt::Display for Kind {
    /// With its article: `out.md is a symbolic link`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::File => "a regular file",
            Kind::Directory => "a directory",
            Kind::Symlink => "a symbolic link",
            Kind::Fifo => "a FIFO",
            Kind::Socket => "a socket",
            Kind::CharDevice => "a character device",
            Kind::BlockDevice => "a block device",
            Kind::Unknown => "of an unknown kind",
        })
    }
}

/// An entry's metadata, as `lstat` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Meta {
    pub kind: Kind,
    /// The permission bits (`st_mode & 0o7777`).
    pub permissions: u32,
    pub size: u64,
    /// Bytes allocated on disk (`st_blocks * 512`): far below `size` for a sparse file.
    pub allocated: u64,
    pub dev: u64,
    pub ino: u64,
    pub uid: u32,
    pub gid: u32,
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
}

impl Meta {
    pub(crate) fn from_stat(stat: &Stat) -> Meta {
        Meta {
            kind: Kind::of(FileType::from_raw_mode(stat.st_mode)),
            permissions: stat.st_mode & 0o7777,
            size: u64::try_from(stat.st_size).unwrap_or(0),
            allocated: u64::try_from(stat.st_blocks)
                .unwrap_or(0)
                .saturating_mul(512),
            dev: stat.st_dev,
            ino: stat.st_ino,
            uid: stat.st_uid,
            gid: stat.st_gid,
            mtime: (stat.st_mtime, stat.st_mtime_nsec.try_into().unwrap_or(0)),
            ctime: (stat.st_ctime, stat.st_ctime_nsec.try_into().unwrap_or(0)),
        }
    }

    /// Whether any execute bit is set (git's `100755`).
    pub fn executable(&self) -> bool {
        self.permissions & 0o111 != 0
    }
}
