//! `RelPath`: a relative path that stays inside its base directory (no `..`, not absolute).

use std::fmt;
use std::path::Path;

/// A relative path written with `/`, without `..` components, never empty or absolute. Used for
/// workspace paths (`produces`, `artifact`, `hide`) and tooling paths (`agents_dir`, …).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelPath(String);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelPathError {
    Empty,
    Absolute,
    Parent,
    Nul,
}

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
        if text.split('/').any(|c| c == "..") {
            return Err(RelPathError::Parent);
        }
        Ok(RelPath(text.to_owned()))
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
