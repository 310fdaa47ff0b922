//! Why an import, a removal or a lookup failed: each message names the problem and the fix.
//! Names that come from an archive are escaped before they are kept here.

use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("cannot {action} `{path}`")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "`{path}` is neither a docker-archive (it has no `manifest.json`) nor an OCI image layout \
         (no `index.json` and `oci-layout`); save the image with `docker save IMAGE -o FILE`, \
         `podman save`, or as an OCI layout"
    )]
    NotAnArchive { path: PathBuf },
    #[error("the archive's {what} is malformed: {problem}; save the image again")]
    Malformed { what: String, problem: String },
    #[error(
        "the archive's {what} does not match its digest (expected {expected}, found {found}): the \
         archive is corrupt or was altered, and nothing was imported"
    )]
    DigestMismatch {
        what: String,
        expected: String,
        found: String,
    },
    #[error(
        "layer {layer}: `{entry}` {problem}; the archive is malformed or hostile, and nothing was \
         imported"
    )]
    Refused {
        layer: usize,
        entry: String,
        problem: &'static str,
    },
    #[error(
        "the image is larger than cordon imports: {what} (layer {layer}); nothing was imported"
    )]
    TooLarge { what: String, layer: usize },
    #[error("the archive holds several images ({choices}); name the one to import with --name")]
    Ambiguous { choices: String },
    #[error("the archive has no image named `{name}`; it holds: {choices}")]
    NoSuchTag { name: String, choices: String },
    #[error(
        "no image `{reference}` in the image store; import it with `cordon image import FILE \
         --name {reference}` (`cordon image ls` lists the store)"
    )]
    Unknown { reference: String },
    #[error("`{reference}` is not an image reference: {problem}")]
    BadReference { reference: String, problem: String },
    #[error(
        "the image root filesystem `{path}` is not a directory; give the directory an image was \
         unpacked into"
    )]
    NotADirectory { path: PathBuf },
}

impl ImageError {
    pub(crate) fn io(
        action: &'static str,
        path: &Path,
    ) -> impl FnOnce(io::Error) -> ImageError + use<> {
        let path = path.to_path_buf();
        move |source| ImageError::Io {
            action,
            path,
            source,
        }
    }

    pub(crate) fn malformed(what: impl Into<String>, problem: impl ToString) -> ImageError {
        ImageError::Malformed {
            what: what.into(),
            problem: shown(&problem.to_string()),
        }
    }
}

/// Text from an archive, safe for a message on one line.
pub(crate) fn shown(text: &str) -> String {
    cordon_protocol::text::escape_line(text).into_owned()
}

/// Bytes from an archive (a name need not be UTF-8), safe for a message on one line.
pub(crate) fn shown_bytes(bytes: &[u8]) -> String {
    shown(&String::from_utf8_lossy(bytes))
}
