//! Which image of an archive is imported, and its parts: the configuration (verified against its
//! digest) and the layers in order, each with the digests it must match.

use oci_spec::image::{Descriptor, ImageIndex, ImageManifest};
use serde::Deserialize;

use crate::archive::Archive;
use crate::digest::Digest;
use crate::error::{ImageError, shown};

/// The most bytes of a JSON document (manifest, index, configuration) cordon reads.
pub(crate) const MAX_JSON: u64 = 4 << 20;
/// How deep image indexes may nest before the manifest.
const MAX_INDEX_DEPTH: usize = 4;

/// The image chosen from an archive.
pub(crate) struct Plan {
    pub(crate) config: Vec<u8>,
    pub(crate) digest: Digest,
    pub(crate) layers: Vec<LayerRef>,
    /// The names the archive gives the image (`RepoTags`, OCI `ref.name` annotations).
    pub(crate) names: Vec<String>,
}

/// One layer: where its blob is in the archive and the digest the blob must have, when the
/// archive states one (docker-archives before the OCI layout state only the unpacked digest,
/// which the configuration holds).
pub(crate) struct LayerRef {
    pub(crate) name: String,
    pub(crate) blob: Option<Digest>,
    pub(crate) size: Option<u64>,
}

/// `manifest.json` of a docker-archive: one entry per image.
#[derive(Deserialize)]
struct DockerEntry {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "RepoTags", default)]
    repo_tags: Option<Vec<String>>,
    #[serde(rename = "Layers")]
    layers: Vec<String>,
}

/// The image `archive` (read from `path`, named in errors) holds: the one `wanted` names, or its
/// only one.
pub(crate) fn plan(
    archive: &Archive,
    path: &std::path::Path,
    wanted: Option<&str>,
) -> Result<Plan, ImageError> {
    if archive.has("manifest.json") {
        docker(archive, wanted)
    } else if archive.has("index.json") && archive.has("oci-layout") {
        oci(archive, wanted)
    } else {
        Err(ImageError::NotAnArchive {
            path: path.to_path_buf(),
        })
    }
}

fn docker(archive: &Archive, wanted: Option<&str>) -> Result<Plan, ImageError> {
    let what = "manifest.json";
    let bytes = archive.read_small(what, what, MAX_JSON)?;
    let entries: Vec<DockerEntry> =
        serde_json::from_slice(&bytes).map_err(|e| ImageError::malformed(what, e))?;
    let tags = |e: &DockerEntry| e.repo_tags.clone().unwrap_or_default();
    let entry = match (entries.as_slice(), wanted) {
        ([], _) => return Err(ImageError::malformed(what, "it lists no image")),
        ([one], _) => one,
        (many, Some(name)) => many
            .iter()
            .find(|e| tags(e).iter().any(|t| t == name))
            .ok_or_else(|| ImageError::NoSuchTag {
                name: shown(name),
                choices: choices(many.iter().flat_map(tags)),
            })?,
        (many, None) => {
            return Err(ImageError::Ambiguous {
                choices: choices(many.iter().flat_map(tags)),
            });
        }
    };
    let config = archive.read_small(&entry.config, "image configuration", MAX_JSON)?;
    let digest = Digest::of(&config);
    if let Some(claimed) = digest_in_name(&entry.config)
        && claimed != digest
    {
        return Err(mismatch("image configuration", &claimed, &digest));
    }
    let layers = entry
        .layers
        .iter()
        .map(|name| LayerRef {
            name: name.clone(),
            blob: name
                .strip_prefix("blobs/sha256/")
                .and_then(Digest::from_hex),
            size: None,
        })
        .collect();
    Ok(Plan {
        config,
        digest,
        layers,
        names: tags(entry),
    })
}

fn oci(archive: &Archive, wanted: Option<&str>) -> Result<Plan, ImageError> {
    let what = "index.json";
    let bytes = archive.read_small(what, what, MAX_JSON)?;
    let mut index: ImageIndex =
        serde_json::from_slice(&bytes).map_err(|e| ImageError::malformed(what, e))?;
    let mut names = Vec::new();
    for depth in 0.. {
        let chosen = choose(index.manifests(), wanted)?.clone();
        names.extend(ref_names(&chosen));
        let media = chosen.media_type().to_string();
        if media.contains("index") || media.contains("manifest.list") {
            if depth == MAX_INDEX_DEPTH {
                return Err(ImageError::malformed(what, "image indexes nest too deep"));
            }
            let bytes = read_verified(archive, &chosen, "image index")?;
            index = serde_json::from_slice(&bytes)
                .map_err(|e| ImageError::malformed("image index", e))?;
            continue;
        }
        let bytes = read_verified(archive, &chosen, "image manifest")?;
        let manifest: ImageManifest = serde_json::from_slice(&bytes)
            .map_err(|e| ImageError::malformed("image manifest", e))?;
        let config = read_verified(archive, manifest.config(), "image configuration")?;
        let digest = Digest::of(&config);
        let mut layers = Vec::new();
        for layer in manifest.layers() {
            let media = layer.media_type().to_string();
            if !media.contains("tar") || media.contains("encrypted") {
                return Err(ImageError::malformed(
                    "image manifest",
                    format!("layer media type `{media}` is not a tar layer cordon can unpack"),
                ));
            }
            let blob = descriptor_digest(layer, "layer")?;
            layers.push(LayerRef {
                name: format!("blobs/sha256/{}", blob.hex()),
                blob: Some(blob),
                size: Some(layer.size()),
            });
        }
        return Ok(Plan {
            config,
            digest,
            layers,
            names,
        });
    }
    unreachable!("the loop returns or fails")
}

/// The descriptor an index's `manifests` selects: the one `wanted` names, the only one, or the
/// one for this machine's platform.
fn choose<'a>(
    manifests: &'a [Descriptor],
    wanted: Option<&str>,
) -> Result<&'a Descriptor, ImageError> {
    if let Some(name) = wanted
        && let Some(found) = manifests
            .iter()
            .find(|d| ref_names(d).iter().any(|n| n == name))
    {
        return Ok(found);
    }
    match manifests {
        [] => Err(ImageError::malformed("image index", "it lists no manifest")),
        [one] => Ok(one),
        many => {
            let arch = match std::env::consts::ARCH {
                "x86_64" => "amd64",
                "aarch64" => "arm64",
                other => other,
            };
            let mut here = many.iter().filter(|d| {
                d.platform().as_ref().is_some_and(|p| {
                    p.os().to_string() == "linux" && p.architecture().to_string() == arch
                })
            });
            match (here.next(), here.next()) {
                (Some(one), None) => Ok(one),
                _ => Err(ImageError::Ambiguous {
                    choices: choices(many.iter().flat_map(ref_names)),
                }),
            }
        }
    }
}

fn ref_names(descriptor: &Descriptor) -> Vec<String> {
    let Some(annotations) = descriptor.annotations() else {
        return Vec::new();
    };
    [
        "io.containerd.image.name",
        "org.opencontainers.image.ref.name",
    ]
    .iter()
    .filter_map(|key| annotations.get(*key).cloned())
    .collect()
}

fn read_verified(
    archive: &Archive,
    descriptor: &Descriptor,
    what: &str,
) -> Result<Vec<u8>, ImageError> {
    let digest = descriptor_digest(descriptor, what)?;
    let bytes = archive.read_small(&format!("blobs/sha256/{}", digest.hex()), what, MAX_JSON)?;
    let found = Digest::of(&bytes);
    if found != digest {
        return Err(mismatch(what, &digest, &found));
    }
    if bytes.len() as u64 != descriptor.size() {
        return Err(ImageError::malformed(
            what,
            format!(
                "it is {} bytes where its descriptor says {}",
                bytes.len(),
                descriptor.size()
            ),
        ));
    }
    Ok(bytes)
}

fn descriptor_digest(descriptor: &Descriptor, what: &str) -> Result<Digest, ImageError> {
    let text = descriptor.digest().to_string();
    Digest::parse(&text).ok_or_else(|| {
        ImageError::malformed(
            what,
            format!("its digest `{text}` is not sha256, the only algorithm cordon verifies"),
        )
    })
}

/// `<hex>.json` (docker-archive) or `blobs/sha256/<hex>` (OCI inside docker-archive).
fn digest_in_name(name: &str) -> Option<Digest> {
    let file = name.rsplit('/').next().unwrap_or(name);
    let hex = file.strip_suffix(".json").unwrap_or(file);
    Digest::from_hex(hex)
}

pub(crate) fn mismatch(what: &str, expected: &Digest, found: &Digest) -> ImageError {
    ImageError::DigestMismatch {
        what: what.to_owned(),
        expected: expected.to_string(),
        found: found.to_string(),
    }
}

fn choices(names: impl Iterator<Item = String>) -> String {
    let names: Vec<String> = names.map(|n| format!("`{}`", shown(&n))).take(20).collect();
    if names.is_empty() {
        "images without names".to_owned()
    } else {
        names.join(", ")
    }
}
