//! `ImageRef`: how a pipeline, `cordon exec --image` and `cordon image rm` name an environment
//! image (DESIGN §14): a name from the image store (`python:3.12`, `team/tools:1`), a digest
//! (`sha256:<64 hex>`) or an absolute path to an unpacked root filesystem directory.
//!
//! One grammar for every crate: the pipeline validates with it, the image store resolves with it.

use std::fmt;

/// The longest image name accepted, in bytes.
pub const MAX_IMAGE_NAME: usize = 255;

/// A parsed image reference.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ImageRef {
    /// A name in the image store.
    Name(String),
    /// `sha256:<hex>` (the image's configuration digest); holds the 64 lowercase hex digits.
    Digest(String),
    /// An absolute path to a root filesystem directory (accepted only from `cordon exec --image`
    /// and the operator policy's `[images] paths`).
    Path(String),
}

/// Why a text is not an image reference.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImageRefError {
    #[error("the image reference is empty")]
    Empty,
    #[error("`sha256:` must be followed by 64 lowercase hex digits")]
    Digest,
    #[error(
        "an image name is 1 to {MAX_IMAGE_NAME} letters, digits and `._-:/@+`, starting with a \
         letter or digit, with no empty or `..` part between slashes"
    )]
    Name,
    #[error("the image path contains a NUL byte or a `..` component; give a plain absolute path")]
    Path,
}

impl ImageRef {
    pub fn parse(text: &str) -> Result<ImageRef, ImageRefError> {
        if text.is_empty() {
            return Err(ImageRefError::Empty);
        }
        if text.starts_with('/') {
            if text.contains('\0') || text.split('/').any(|part| part == "..") {
                return Err(ImageRefError::Path);
            }
            return Ok(ImageRef::Path(text.to_owned()));
        }
        if let Some(hex) = text.strip_prefix("sha256:") {
            if hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                return Ok(ImageRef::Digest(hex.to_owned()));
            }
            return Err(ImageRefError::Digest);
        }
        check_name(text)?;
        Ok(ImageRef::Name(text.to_owned()))
    }
}

/// Whether `name` is a valid image name (see [`ImageRefError::Name`]).
pub fn check_name(name: &str) -> Result<(), ImageRefError> {
    let bytes = name.as_bytes();
    let first_ok = bytes.first().is_some_and(u8::is_ascii_alphanumeric);
    let chars_ok = bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || b"._-:/@+".contains(b));
    let parts_ok = name.split('/').all(|part| !part.is_empty() && part != "..");
    if bytes.len() > MAX_IMAGE_NAME
        || !first_ok
        || !chars_ok
        || !parts_ok
        || name.starts_with("sha256:")
    {
        return Err(ImageRefError::Name);
    }
    Ok(())
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageRef::Name(name) => f.write_str(name),
            ImageRef::Digest(hex) => write!(f, "sha256:{hex}"),
            ImageRef::Path(path) => f.write_str(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_to_names_digests_and_paths_or_are_refused() {
        let hex = "a".repeat(64);
        let digest = format!("sha256:{hex}");
        for (text, parsed) in [
            ("busybox", Ok(ImageRef::Name("busybox".into()))),
            (
                "python:3.12-slim",
                Ok(ImageRef::Name("python:3.12-slim".into())),
            ),
            ("team/tools:1", Ok(ImageRef::Name("team/tools:1".into()))),
            (digest.as_str(), Ok(ImageRef::Digest(hex.clone()))),
            ("/srv/rootfs", Ok(ImageRef::Path("/srv/rootfs".into()))),
            ("", Err(ImageRefError::Empty)),
            ("sha256:abc", Err(ImageRefError::Digest)),
            ("sha256:ABCDEF", Err(ImageRefError::Digest)),
            ("-x", Err(ImageRefError::Name)),
            ("a b", Err(ImageRefError::Name)),
            ("a//b", Err(ImageRefError::Name)),
            ("a/../b", Err(ImageRefError::Name)),
            ("a\nb", Err(ImageRefError::Name)),
            ("/srv/../etc", Err(ImageRefError::Path)),
        ] {
            assert_eq!(ImageRef::parse(text), parsed, "{text:?}");
        }
        assert_eq!(
            ImageRef::parse(&"a".repeat(MAX_IMAGE_NAME + 1)),
            Err(ImageRefError::Name)
        );
        assert_eq!(ImageRef::parse(&digest).unwrap().to_string(), digest);
    }
}
