//! `WsPath`: a path inside the workspace — relative, `/`-separated, every component a plain name
//! (no empty, `.`, `..` or `.git` component, no NUL), at most [`MAX_PATH`] bytes with components
//! of at most [`MAX_NAME`] bytes. Nothing turns one into a path the kernel resolves except
//! [`crate::View`], which resolves it beneath the workspace without following links.
//!
//! Names are bytes: a file name in a work tree need not be UTF-8, and git records it as it is.

use std::fmt;

/// The longest workspace path accepted, in bytes (Linux's `PATH_MAX` less the terminating NUL).
pub const MAX_PATH: usize = 4095;
/// The longest component, in bytes (Linux's `NAME_MAX`).
pub const MAX_NAME: usize = 255;

/// A validated workspace-relative path.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WsPath(Vec<u8>);

/// Why a text is not a workspace path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the path is empty")]
    Empty,
    #[error("the path is absolute; give it relative to the workspace")]
    Absolute,
    #[error("the path has an empty, `.` or `..` component")]
    Component,
    #[error("the path names something inside a `.git` directory")]
    GitDir,
    #[error("the path contains a NUL byte")]
    Nul,
    #[error("the path is longer than {MAX_PATH} bytes, or has a component longer than {MAX_NAME}")]
    TooLong,
}

/// Whether `name` is one git refuses as a path component because some file system or tool
/// takes it for the git directory (git's `verify_path` with `core.protectNTFS` and
/// `core.protectHFS`): `.git` in any letter case; followed by spaces and dots, or by `:` (NTFS
/// drops trailing spaces and dots, and reads `:` as a stream); the short name `git~1`; and any
/// of these with the code points HFS+ ignores (zero-width joiners, direction marks, U+FEFF)
/// inside.
pub fn is_git_name(name: &[u8]) -> bool {
    let mut folded = Vec::with_capacity(name.len());
    let mut rest = name;
    while let Some(&byte) = rest.first() {
        if let Some(skip) = hfs_ignorable(rest) {
            rest = &rest[skip..];
            continue;
        }
        folded.push(byte.to_ascii_lowercase());
        rest = &rest[1..];
    }
    if folded == b"git~1" {
        return true;
    }
    match folded.strip_prefix(b".git") {
        Some(after) => {
            after.first() == Some(&b':') || after.iter().all(|b| *b == b' ' || *b == b'.')
        }
        None => false,
    }
}

/// The length of the UTF-8 code point HFS+ ignores at the start of `bytes`, if it is one:
/// U+200C–U+200F, U+202A–U+202E, U+206A–U+206F, U+FEFF.
fn hfs_ignorable(bytes: &[u8]) -> Option<usize> {
    match bytes {
        [0xe2, 0x80, 0x8c..=0x8f, ..]
        | [0xe2, 0x80, 0xaa..=0xae, ..]
        | [0xe2, 0x81, 0xaa..=0xaf, ..]
        | [0xef, 0xbb, 0xbf, ..] => Some(3),
        _ => None,
    }
}

/// The `.env*` files at the workspace root that stay visible: templates hold no secrets.
pub const ENV_TEMPLATES: [&[u8]; 3] = [b".env.example", b".env.template", b".env.sample"];

/// Whether a workspace root entry named `name` is a secret `.env*` file: masked in every sandbox
/// and never read by the host (its git leaves it as HEAD has it). Matched on bytes, so a name
/// that is not UTF-8 (`.env\xff`) is as secret as `.env`.
pub fn is_env_secret(name: &[u8]) -> bool {
    name.starts_with(b".env") && !ENV_TEMPLATES.contains(&name)
}

fn check_name(name: &[u8]) -> Result<(), PathError> {
    if name.is_empty() || name == b"." || name == b".." {
        return Err(PathError::Component);
    }
    if name.contains(&0) {
        return Err(PathError::Nul);
    }
    if is_git_name(name) {
        return Err(PathError::GitDir);
    }
    if name.len() > MAX_NAME {
        return Err(PathError::TooLong);
    }
    Ok(())
}

impl WsPath {
    /// Parses `text` (bytes, `/`-separated).
    pub fn from_bytes(text: &[u8]) -> Result<WsPath, PathError> {
        if text.is_empty() {
            return Err(PathError::Empty);
        }
        if text[0] == b'/' {
            return Err(PathError::Absolute);
        }
        if text.len() > MAX_PATH {
            return Err(PathError::TooLong);
        }
        for name in text.split(|&b| b == b'/') {
            check_name(name)?;
        }
        Ok(WsPath(text.to_vec()))
    }

    /// Parses `text`. A trailing `/` is accepted and dropped (`dist/` names the directory).
    pub fn new(text: &str) -> Result<WsPath, PathError> {
        let text = text.strip_suffix('/').unwrap_or(text);
        WsPath::from_bytes(text.as_bytes())
    }

    /// A one-component path.
    pub fn name(name: &[u8]) -> Result<WsPath, PathError> {
        check_name(name)?;
        Ok(WsPath(name.to_vec()))
    }

    /// `self/name`.
    pub fn join(&self, name: &[u8]) -> Result<WsPath, PathError> {
        check_name(name)?;
        if self.0.len() + 1 + name.len() > MAX_PATH {
            return Err(PathError::TooLong);
        }
        let mut bytes = Vec::with_capacity(self.0.len() + 1 + name.len());
        bytes.extend_from_slice(&self.0);
        bytes.push(b'/');
        bytes.extend_from_slice(name);
        Ok(WsPath(bytes))
    }

    /// `base/name` when there is a base, else `name`.
    pub fn child(base: Option<&WsPath>, name: &[u8]) -> Result<WsPath, PathError> {
        match base {
            Some(base) => base.join(name),
            None => WsPath::name(name),
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The directory part (`None` at the top of the workspace) and the last component.
    pub fn split(&self) -> (Option<&[u8]>, &[u8]) {
        match self.0.iter().rposition(|&b| b == b'/') {
            Some(at) => (Some(&self.0[..at]), &self.0[at + 1..]),
            None => (None, &self.0),
        }
    }

    /// The last component.
    pub fn file_name(&self) -> &[u8] {
        self.split().1
    }

    /// The components, in order.
    pub fn components(&self) -> impl Iterator<Item = &[u8]> {
        self.0.split(|&b| b == b'/')
    }

    /// Whether `self` is `other` or lies below it.
    pub fn starts_with(&self, other: &WsPath) -> bool {
        self.0.starts_with(&other.0)
            && (self.0.len() == other.0.len() || self.0[other.0.len()] == b'/')
    }

    /// The path as text, invalid UTF-8 replaced (for messages and events; escape before a
    /// terminal).
    pub fn to_string_lossy(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }

    /// The path for a message: invalid UTF-8 replaced, control characters escaped
    /// ([`cordon_protocol::text::escape_line`]), so a name a step chose cannot break a message
    /// or a log line into lines of its own.
    pub fn shown(&self) -> String {
        cordon_protocol::text::escape_line(&self.to_string_lossy()).into_owned()
    }
}

impl fmt::Debug for WsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WsPath({:?})", String::from_utf8_lossy(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_paths_are_plain_relative_names() {
        for (text, expected) in [
            ("a", Ok(())),
            ("a/b.txt", Ok(())),
            ("dist/", Ok(())),
            (".github/workflows/x.yml", Ok(())),
            (".gitignore", Ok(())),
            ("a/.git-keep", Ok(())),
            ("", Err(PathError::Empty)),
            ("/etc/passwd", Err(PathError::Absolute)),
            ("a//b", Err(PathError::Component)),
            ("./a", Err(PathError::Component)),
            ("a/../b", Err(PathError::Component)),
            ("..", Err(PathError::Component)),
            (".git/config", Err(PathError::GitDir)),
            ("sub/.GIT/hooks", Err(PathError::GitDir)),
            ("a\0b", Err(PathError::Nul)),
        ] {
            assert_eq!(WsPath::new(text).map(|_| ()), expected, "{text:?}");
        }
    }

    #[test]
    fn every_name_git_takes_for_its_directory_on_some_file_system_is_refused() {
        for (name, git) in [
            (&b".git"[..], true),
            (b".GiT", true),
            (b".git ", true),
            (b".git.", true),
            (b".git . .", true),
            (b".git::$INDEX_ALLOCATION", true),
            (b"git~1", true),
            (b"GIT~1", true),
            (".g\u{200c}it".as_bytes(), true),
            ("\u{feff}.GIT".as_bytes(), true),
            (".git\u{206f}".as_bytes(), true),
            (b".gitignore", false),
            (b".git-keep", false),
            (b".github", false),
            (b".git.bak", false),
            (b"git~2", false),
            (b"git", false),
            (".g\u{200b}it".as_bytes(), false),
        ] {
            assert_eq!(
                is_git_name(name),
                git,
                "{:?}",
                String::from_utf8_lossy(name)
            );
        }
        assert_eq!(WsPath::new("e/.git ").map(|_| ()), Err(PathError::GitDir));
    }

    #[test]
    fn root_env_files_are_secret_except_the_templates() {
        for (name, secret) in [
            (&b".env"[..], true),
            (b".env.local", true),
            (b".envrc", true),
            (b".env\xff", true),
            (b".env.example", false),
            (b".env.template", false),
            (b".env.sample", false),
            (b"env", false),
            (b"x.env", false),
        ] {
            assert_eq!(is_env_secret(name), secret, "{:?}", name.escape_ascii());
        }
    }

    #[test]
    fn lengths_are_bounded_by_the_kernel_limits() {
        let long_name = "x".repeat(MAX_NAME + 1);
        assert_eq!(WsPath::new(&long_name), Err(PathError::TooLong));
        let deep = vec!["d"; MAX_PATH / 2 + 2].join("/");
        assert_eq!(WsPath::new(&deep), Err(PathError::TooLong));
        let fits = vec!["d"; MAX_PATH / 2].join("/");
        assert!(WsPath::new(&fits).is_ok());
        let base = WsPath::new(&fits).unwrap();
        assert_eq!(base.join(b"more"), Err(PathError::TooLong));
    }

    #[test]
    fn splitting_and_prefixes_follow_components() {
        let path = WsPath::new("a/b/c.md").unwrap();
        assert_eq!(path.split(), (Some(&b"a/b"[..]), &b"c.md"[..]));
        assert_eq!(WsPath::new("top").unwrap().split(), (None, &b"top"[..]));
        assert!(path.starts_with(&WsPath::new("a/b").unwrap()));
        assert!(!path.starts_with(&WsPath::new("a/bc").unwrap()));
        assert!(
            !WsPath::new("a/bc")
                .unwrap()
                .starts_with(&WsPath::new("a/b").unwrap())
        );
        assert_eq!(path.components().count(), 3);
        assert_eq!(
            WsPath::from_bytes(b"caf\xe9").unwrap().to_string_lossy(),
            "caf\u{fffd}"
        );
    }
}
