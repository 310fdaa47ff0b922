//! `RelPath`: a relative path that stays inside its base directory (no `..`, not absolute).

use std::fmt;
use std::path::Path;

/// A relative path written with `/`, without `..` components, never empty or absolute. Used for
/// workspace paths (`produces`, `artifact`, `hide`) and tooling paths (`agents_dir`, …).
///
/// Held normalised: empty and `.` components are dropped when parsed (`./secrets/`,
/// `secrets//` and `a/./b` are `secrets`, `secrets` and `a/b`), so every consumer — the
/// sandbox's masks, the host's git guard, output removal — names the same path and none can
/// disagree with another about whether a spelling is valid. At most [`MAX_PATH`] bytes, each
/// component at most [`MAX_NAME`]: the bounds of the host's workspace view.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelPath(String);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelPathError {
    Empty,
    Absolute,
    Parent,
    Nul,
    TooLong,
}

/// Longest path, in bytes (the workspace view's bound).
pub const MAX_PATH: usize = 4095;
/// Longest component, in bytes.
pub const MAX_NAME: usize = 255;

impl RelPath {
    pub fn parse(text: &str) -> Result<RelPath, RelPathError> {
        if text.is_empty() || text == "." || text == "./" {
            return Err(RelPathError::Empty);
        }
        if text.contains('\0') {
            return Err(RelPathError::Nul);
        }
        if text.starts_with('/') || text.starts_with('~') {
            return Err(RelPathError::Absolute);
        }
        let names: Vec<&str> = text
            .split('/')
            .filter(|name| !name.is_empty() && *name != ".")
            .collect();
        if names.is_empty() {
            return Err(RelPathError::Empty);
        }
        if names.contains(&"..") {
            return Err(RelPathError::Parent);
        }
        let normal = names.join("/");
        if normal.len() > MAX_PATH || names.iter().any(|name| name.len() > MAX_NAME) {
            return Err(RelPathError::TooLong);
        }
        Ok(RelPath(normal))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn as_path(&self) -> &Path {
        Path::new(&self.0)
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_held_normalised_and_refused_with_a_reason() {
        let long_name = "n".repeat(MAX_NAME + 1);
        let long_path = "n/".repeat(MAX_PATH / 2 + 1) + "n";
        let table: &[(&str, Result<&str, RelPathError>)] = &[
            ("secrets", Ok("secrets")),
            ("./secrets", Ok("secrets")),
            ("secrets/", Ok("secrets")),
            ("secrets//", Ok("secrets")),
            ("a/./secrets", Ok("a/secrets")),
            ("a//b/.", Ok("a/b")),
            (".env", Ok(".env")),
            ("...", Ok("...")),
            ("", Err(RelPathError::Empty)),
            (".", Err(RelPathError::Empty)),
            ("./", Err(RelPathError::Empty)),
            ("././/.", Err(RelPathError::Empty)),
            ("/etc", Err(RelPathError::Absolute)),
            ("~/.ssh", Err(RelPathError::Absolute)),
            ("a/../b", Err(RelPathError::Parent)),
            ("./..", Err(RelPathError::Parent)),
            ("a\0b", Err(RelPathError::Nul)),
            (&long_name, Err(RelPathError::TooLong)),
            (&long_path, Err(RelPathError::TooLong)),
        ];
        for (text, want) in table {
            let got = RelPath::parse(text);
            assert_eq!(
                got.as_ref().map(RelPath::as_str).map_err(|e| *e),
                *want,
                "a path of {} bytes starting {:?}",
                text.len(),
                &text[..text.len().min(20)]
            );
        }
        let longest = "n/".repeat(MAX_PATH / 2) + "n";
        assert_eq!(longest.len(), MAX_PATH);
        assert!(
            RelPath::parse(&longest).is_ok(),
            "the bound itself is accepted"
        );
    }
}
