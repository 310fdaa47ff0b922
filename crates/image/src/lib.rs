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

/// The fuzz target's entry point: imports `data` into a fresh store under `dir` — as a whole
/// archive when its first byte is even, else as the one layer of a docker-archive built around
/// it (whose `diff_id` cannot match, so the layer is unpacked in full and then refused). Whatever
/// the bytes, the import succeeds or returns an error; it never panics, never writes outside
/// `dir`, and stays within small [`Limits`]. Returns the store's root filesystem directory of a
/// successful import.
#[doc(hidden)]
pub fn fuzz_import(dir: &std::path::Path, data: &[u8]) -> Result<Imported, ImageError> {
    let (archive, as_layer) = match data.split_first() {
        Some((first, rest)) => (rest, first % 2 == 1),
        None => (data, false),
    };
    let bytes = if as_layer {
        wrap_layer(archive)
    } else {
        archive.to_vec()
    };
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

/// A docker-archive whose one layer is `layer` (and whose configuration names a digest no layer
/// has).
fn wrap_layer(layer: &[u8]) -> Vec<u8> {
    let config = format!(
        r#"{{"architecture":"amd64","os":"linux","rootfs":{{"type":"layers","diff_ids":["sha256:{}"]}}}}"#,
        "0".repeat(64)
    );
    let config_name = format!("{}.json", Digest::of(config.as_bytes()).hex());
    let manifest =
        format!(r#"[{{"Config":"{config_name}","RepoTags":["fuzz:1"],"Layers":["l/layer.tar"]}}]"#);
    let mut builder = tar::Builder::new(Vec::new());
    for (name, bytes) in [
        ("manifest.json", manifest.as_bytes()),
        (config_name.as_str(), config.as_bytes()),
        ("l/layer.tar", layer),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        // Appending to a Vec cannot fail.
        let _ = builder.append_data(&mut header, name, bytes);
    }
    builder.into_inner().unwrap_or_default()
}
