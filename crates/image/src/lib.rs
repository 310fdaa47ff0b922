//! Environment images (DESIGN §14, §18): a docker-archive (`docker save`, `podman save`) or an OCI
//! image layout (a directory or a tar of one) imported into a content-addressed store under the
//! state directory, with no container engine.
//!
//! An import verifies every blob against its digest — the configuration against the name it is
//! stored under, each compressed layer against its descriptor, each unpacked layer against the
//! configuration's `diff_ids` — and applies the layers in order with their whiteouts. Layers are
//! unpacked through `cordon-workspace`'s beneath-view of the image's directory, so no entry is
//! written through a link, and nothing lands outside the image: an escaping path or hard link
//! refuses the import, as does a device node; setuid, setgid and group/other write bits are
//! dropped; extended attributes are never applied; everything belongs to the importing user.
//! Every import is bounded ([`Limits`]). The digest of an image is its configuration digest.
//!
//! Entry points: [`Images::at`] then [`Images::import`], [`Images::list`], [`Images::remove`],
//! [`Images::resolve`].

mod archive;
mod digest;
mod error;
mod layer;
mod manifest;
mod store;

pub use digest::Digest;
pub use error::ImageError;
pub use layer::Skipped;
pub use store::{ImageInfo, Images, Imported, Limits, Removed, Resolved};

/// Imports `bytes` as an archive into a fresh store under `dir` (the fuzz target's entry point:
/// whatever the bytes, an import either succeeds or returns an error; it never panics and never
/// writes outside `dir`).
pub fn import_bytes(dir: &std::path::Path, bytes: &[u8]) -> Result<Imported, ImageError> {
    let file = dir.join("archive.tar");
    std::fs::write(&file, bytes).map_err(ImageError::io("write", &file))?;
    let images = Images::at(&dir.join("state"));
    let limits = Limits {
        unpacked: 64 << 20,
        entries: 10_000,
        ratio: Limits::default().ratio,
    };
    images.import(&file, Some("fuzz"), &limits)
}
