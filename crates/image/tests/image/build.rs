//! Archives built in the tests: layers as tar bytes, then docker-archives and OCI layouts around
//! them.

use std::path::Path;

use sha2::{Digest as _, Sha256};

pub fn sha(bytes: &[u8]) -> String {
    let mut hex = String::new();
    for b in Sha256::digest(bytes) {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

/// One entry of a test layer.
pub enum E<'a> {
    Dir(&'a str, u32),
    File(&'a str, &'a [u8], u32),
    Link(&'a str, &'a str),
    Hard(&'a str, &'a str),
    Device(&'a str),
    Fifo(&'a str),
}

/// A tar of `entries`; names are written raw (so `..` reaches the importer).
pub fn layer(entries: &[E<'_>]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        let mut header = tar::Header::new_gnu();
        let (name, kind, mode, data, link): (&str, tar::EntryType, u32, &[u8], Option<&str>) =
            match entry {
                E::Dir(n, m) => (n, tar::EntryType::Directory, *m, b"", None),
                E::File(n, d, m) => (n, tar::EntryType::Regular, *m, d, None),
                E::Link(n, t) => (n, tar::EntryType::Symlink, 0o777, b"", Some(t)),
                E::Hard(n, t) => (n, tar::EntryType::Link, 0o644, b"", Some(t)),
                E::Device(n) => (n, tar::EntryType::Char, 0o644, b"", None),
                E::Fifo(n) => (n, tar::EntryType::Fifo, 0o644, b"", None),
            };
        let raw = &mut header.as_old_mut().name;
        raw.fill(0);
        raw[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(target) = link {
            let raw = &mut header.as_old_mut().linkname;
            raw.fill(0);
            raw[..target.len()].copy_from_slice(target.as_bytes());
        }
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_size(data.len() as u64);
        header.set_mtime(1_700_000_000);
        header.set_cksum();
        builder.append(&header, data).unwrap();
    }
    builder.into_inner().unwrap()
}

pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

pub fn zstd(bytes: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(bytes, ruzstd::encoding::CompressionLevel::Fastest)
}

/// An image configuration for layers whose unpacked tars are `tars`.
pub fn config(tars: &[&[u8]], path: &str) -> Vec<u8> {
    let diff_ids: Vec<String> = tars.iter().map(|t| format!("sha256:{}", sha(t))).collect();
    serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": [format!("PATH={path}")]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .unwrap()
}

/// A tar archive of `files` (name, bytes).
pub fn tar_of(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, data) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append_data(&mut header, name, &data[..]).unwrap();
    }
    builder.into_inner().unwrap()
}

/// A legacy docker-archive (`<hex>.json`, `<id>/layer.tar`) of uncompressed `tars`.
pub fn docker_archive(tars: &[&[u8]], tag: &str) -> Vec<u8> {
    let config = config(tars, "/bin:/usr/bin");
    docker_archive_with(&config, tars, tag)
}

pub fn docker_archive_with(config: &[u8], tars: &[&[u8]], tag: &str) -> Vec<u8> {
    let config_name = format!("{}.json", sha(config));
    let mut files = vec![(config_name.clone(), config.to_vec())];
    let mut layers = Vec::new();
    for (i, tar) in tars.iter().enumerate() {
        let name = format!("layer{i}/layer.tar");
        files.push((name.clone(), tar.to_vec()));
        layers.push(name);
    }
    let manifest =
        serde_json::json!([{"Config": config_name, "RepoTags": [tag], "Layers": layers}]);
    files.push((
        "manifest.json".into(),
        serde_json::to_vec(&manifest).unwrap(),
    ));
    tar_of(&files)
}

/// An OCI layout's files: layer blobs as given (`blobs[i]` compressed as `media[i]`) for the
/// unpacked `tars`.
pub fn oci_files(
    tars: &[&[u8]],
    blobs: &[Vec<u8>],
    media: &[&str],
    tag: &str,
) -> Vec<(String, Vec<u8>)> {
    let config = config(tars, "/opt/bin:/bin");
    let mut files = vec![
        (
            "oci-layout".to_owned(),
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        (format!("blobs/sha256/{}", sha(&config)), config.clone()),
    ];
    let mut layers = Vec::new();
    for (blob, media) in blobs.iter().zip(media) {
        files.push((format!("blobs/sha256/{}", sha(blob)), blob.clone()));
        layers.push(serde_json::json!({
            "mediaType": media, "digest": format!("sha256:{}", sha(blob)), "size": blob.len()
        }));
    }
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{}", sha(&config)), "size": config.len()
        },
        "layers": layers,
    }))
    .unwrap();
    files.push((format!("blobs/sha256/{}", sha(&manifest)), manifest.clone()));
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{}", sha(&manifest)), "size": manifest.len(),
            "annotations": {"org.opencontainers.image.ref.name": tag}
        }],
    }))
    .unwrap();
    files.push(("index.json".into(), index));
    files
}

pub fn write_dir(dir: &Path, files: &[(String, Vec<u8>)]) {
    for (name, data) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, data).unwrap();
    }
}
