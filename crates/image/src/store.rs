//! The image store: `<state-dir>/images` (mode 0700), one directory per image named by its
//! configuration digest (`<hex>/rootfs` and `<hex>/image.json`), and `names.json` mapping names
//! to digests. An import unpacks into `.partial-<pid>` and renames it into place once it is
//! complete and synced, so a killed import leaves no half image; every writer holds the store's
//! lock (`flock` on `.lock`), and an import first removes what killed imports left.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use cordon_protocol::ImageRef;
use cordon_workspace::{View, WsPath};
use oci_spec::image::ImageConfiguration;
use serde::{Deserialize, Serialize};

use crate::archive::Archive;
use crate::digest::Digest;
use crate::error::{ImageError, shown};
use crate::layer::{Skipped, Unpacker};
use crate::manifest::{self, MAX_JSON};

/// An import's bounds (DESIGN §18): past any of them it is refused and nothing is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of all layers unpacked (as tar streams).
    pub unpacked: u64,
    /// Entries of all layers (and of the outer archive).
    pub entries: u64,
    /// Unpacked to compressed bytes of one layer (layers under 1 MiB unpacked excepted).
    pub ratio: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            unpacked: 16 << 30,
            entries: 1_000_000,
            ratio: 100,
        }
    }
}

/// What the store records of an image (`image.json`, and `cordon image ls --json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageInfo {
    /// `sha256:<hex>` of the configuration.
    pub digest: String,
    /// The names that point to it (filled in from `names.json` when listed).
    #[serde(default)]
    pub names: Vec<String>,
    pub os: String,
    pub architecture: String,
    /// The configuration's `Env` `PATH`, the sandbox `PATH` on this image.
    pub path: Option<String>,
    pub layers: usize,
    /// Unpacked bytes (tar streams).
    pub size: u64,
    pub entries: u64,
    /// Milliseconds since the epoch.
    pub imported: u64,
    #[serde(default)]
    pub skipped: Skipped,
}

/// What [`Images::import`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Imported {
    pub name: String,
    pub info: ImageInfo,
    /// The image was in the store already (its name now points to it).
    pub existed: bool,
}

/// What [`Images::remove`] removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removed {
    pub digest: String,
    pub names: Vec<String>,
    /// The image itself went (no name points to it any more, or it was named by digest).
    pub image: bool,
}

/// An image reference resolved to a root filesystem directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// `sha256:<hex>` for a store image; the directory itself for a path.
    pub recorded: String,
    pub rootfs: PathBuf,
    pub path: Option<String>,
}

/// The image store of one state directory.
#[derive(Clone, Debug)]
pub struct Images {
    dir: PathBuf,
}

type Names = BTreeMap<String, String>;

impl Images {
    /// The store under `state_dir` (created on the first import).
    pub fn at(state_dir: &Path) -> Images {
        Images {
            dir: state_dir.join("images"),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Imports the archive at `file` under `name` (else the first name the archive gives the
    /// image, else the file's stem) and returns what was stored.
    pub fn import(
        &self,
        file: &Path,
        name: Option<&str>,
        limits: &Limits,
    ) -> Result<Imported, ImageError> {
        if let Some(name) = name {
            check_name(name)?;
        }
        let archive = Archive::open(file, limits.entries)?;
        let plan = manifest::plan(&archive, file, name)?;
        let name = match name {
            Some(name) => name.to_owned(),
            None => plan
                .names
                .iter()
                .find(|n| cordon_protocol::check_image_name(n).is_ok())
                .cloned()
                .or_else(|| {
                    let stem = file.file_stem()?.to_str()?;
                    cordon_protocol::check_image_name(stem)
                        .is_ok()
                        .then(|| stem.to_owned())
                })
                .ok_or_else(|| ImageError::BadReference {
                    reference: shown(&file.display().to_string()),
                    problem: "the archive names no image and the file name is not a valid \
                              image name; give one with --name"
                        .to_owned(),
                })?,
        };
        let config: ImageConfiguration = serde_json::from_slice(&plan.config)
            .map_err(|e| ImageError::malformed("image configuration", e))?;
        let diff_ids: Vec<Digest> = config
            .rootfs()
            .diff_ids()
            .iter()
            .map(|d| {
                Digest::parse(d).ok_or_else(|| {
                    ImageError::malformed(
                        "image configuration",
                        format!("diff_id `{}` is not a sha256 digest", shown(d)),
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        if diff_ids.len() != plan.layers.len() {
            return Err(ImageError::malformed(
                "image configuration",
                format!(
                    "it lists {} layers where the manifest has {}",
                    diff_ids.len(),
                    plan.layers.len()
                ),
            ));
        }
        let path_env = config
            .config()
            .as_ref()
            .and_then(|c| c.env().as_ref())
            .and_then(|env| env.iter().find_map(|kv| kv.strip_prefix("PATH=")))
            .map(str::to_owned);

        self.create()?;
        let _lock = self.lock()?;
        self.clean_partial()?;
        let hex = plan.digest.hex().to_owned();
        let final_dir = self.dir.join(&hex);
        let existed = final_dir.join("image.json").exists();
        let mut info = if existed {
            self.info(&hex)?
        } else {
            let partial = self.dir.join(format!(".partial-{}", std::process::id()));
            let result = self.unpack(&archive, &plan, &diff_ids, &partial, limits, |unpacker| {
                ImageInfo {
                    digest: plan.digest.to_string(),
                    names: Vec::new(),
                    os: config.os().to_string(),
                    architecture: config.architecture().to_string(),
                    path: path_env.clone(),
                    layers: plan.layers.len(),
                    size: unpacker.unpacked,
                    entries: unpacker.entries,
                    imported: now_millis(),
                    skipped: Skipped::default(),
                }
            });
            let info = match result {
                Ok(info) => info,
                Err(err) => {
                    let _ = remove_tree(&self.dir, &partial, u64::MAX);
                    return Err(err);
                }
            };
            if final_dir.exists() {
                // A damaged entry (its `image.json` gone; an import only ever renames a
                // complete directory into place): replaced by this complete one.
                remove_tree(&self.dir, &final_dir, u64::MAX)?;
            }
            fs::rename(&partial, &final_dir).map_err(ImageError::io("store", &final_dir))?;
            sync_dir(&self.dir)?;
            info
        };
        let mut names = self.names()?;
        names.insert(name.clone(), plan.digest.to_string());
        self.write_names(&names)?;
        info.names = names_of(&names, &info.digest);
        Ok(Imported {
            name,
            info,
            existed,
        })
    }

    fn unpack(
        &self,
        archive: &Archive,
        plan: &manifest::Plan,
        diff_ids: &[Digest],
        partial: &Path,
        limits: &Limits,
        describe: impl FnOnce(&Unpacker<'_>) -> ImageInfo,
    ) -> Result<ImageInfo, ImageError> {
        mkdir(partial, 0o700)?;
        let rootfs = partial.join("rootfs");
        mkdir(&rootfs, 0o755)?;
        let view = View::open(&rootfs).map_err(ImageError::io("open", &rootfs))?;
        let mut unpacker = Unpacker::new(&view, limits);
        for (i, (layer, diff_id)) in plan.layers.iter().zip(diff_ids).enumerate() {
            let index = i + 1;
            let blob = archive.open_blob(&layer.name, &format!("layer {index}"))?;
            let size = blob.size;
            if let Some(expected) = layer.size
                && expected != size
            {
                return Err(ImageError::malformed(
                    format!("layer {index}"),
                    format!("it is {size} bytes where its descriptor says {expected}"),
                ));
            }
            unpacker.layer(index, blob, size, diff_id, layer.blob.as_ref())?;
        }
        let mut info = describe(&unpacker);
        info.skipped = unpacker.finish()?;
        let json = serde_json::to_vec_pretty(&info).expect("image info serializes");
        write_synced(&partial.join("image.json"), &json)?;
        view.sync_filesystem()
            .map_err(ImageError::io("sync", &rootfs))?;
        Ok(info)
    }

    /// Every image in the store, by digest, with its names.
    pub fn list(&self) -> Result<Vec<ImageInfo>, ImageError> {
        let names = self.names()?;
        let mut images = Vec::new();
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(images),
            Err(err) => return Err(ImageError::io("list", &self.dir)(err)),
        };
        for entry in entries {
            let entry = entry.map_err(ImageError::io("list", &self.dir))?;
            let Some(hex) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if Digest::from_hex(&hex).is_none() {
                continue;
            }
            let mut info = self.info(&hex)?;
            info.names = names_of(&names, &info.digest);
            images.push(info);
        }
        images.sort_by(|a, b| a.names.cmp(&b.names).then(a.digest.cmp(&b.digest)));
        Ok(images)
    }

    /// Removes `reference`: a name (and the image when no other name points to it) or a digest
    /// (the image and every name pointing to it).
    pub fn remove(&self, reference: &str) -> Result<Removed, ImageError> {
        let parsed = parse_ref(reference)?;
        let _lock = self.lock_existing(reference)?;
        let mut names = self.names()?;
        let digest = match &parsed {
            ImageRef::Name(name) => names.get(name).cloned(),
            ImageRef::Digest(hex) => Some(format!("sha256:{hex}")),
            ImageRef::Path(_) => {
                return Err(ImageError::BadReference {
                    reference: shown(reference),
                    problem: "a root filesystem directory is not in the store; remove it \
                              yourself"
                        .to_owned(),
                });
            }
        };
        let unknown = || ImageError::Unknown {
            reference: shown(reference),
        };
        let digest = digest.ok_or_else(unknown)?;
        let hex = digest.trim_start_matches("sha256:").to_owned();
        let dir = self.dir.join(&hex);
        let removed_names: Vec<String> = match &parsed {
            ImageRef::Name(name) => vec![name.clone()],
            _ => names_of(&names, &digest),
        };
        if matches!(parsed, ImageRef::Digest(_)) && !dir.exists() && removed_names.is_empty() {
            return Err(unknown());
        }
        for name in &removed_names {
            names.remove(name);
        }
        let image = names_of(&names, &digest).is_empty();
        self.write_names(&names)?;
        if image && dir.exists() {
            remove_tree(&self.dir, &dir, u64::MAX)?;
            sync_dir(&self.dir)?;
        }
        Ok(Removed {
            digest,
            names: removed_names,
            image,
        })
    }

    /// The root filesystem `reference` names: a store image by name or digest, or a directory
    /// given as an absolute path (callers decide whether a path is allowed).
    pub fn resolve(&self, reference: &ImageRef) -> Result<Resolved, ImageError> {
        let unknown = || ImageError::Unknown {
            reference: shown(&reference.to_string()),
        };
        let hex = match reference {
            ImageRef::Path(path) => {
                let path = PathBuf::from(path);
                if !path.is_dir() {
                    return Err(ImageError::NotADirectory { path });
                }
                return Ok(Resolved {
                    recorded: path.display().to_string(),
                    rootfs: path,
                    path: None,
                });
            }
            ImageRef::Digest(hex) => hex.clone(),
            ImageRef::Name(name) => self
                .names()?
                .get(name)
                .map(|d| d.trim_start_matches("sha256:").to_owned())
                .ok_or_else(unknown)?,
        };
        if !self.dir.join(&hex).join("image.json").exists() {
            return Err(unknown());
        }
        let info = self.info(&hex)?;
        Ok(Resolved {
            recorded: info.digest.clone(),
            rootfs: self.dir.join(&hex).join("rootfs"),
            path: info.path,
        })
    }

    fn info(&self, hex: &str) -> Result<ImageInfo, ImageError> {
        let path = self.dir.join(hex).join("image.json");
        let bytes = read_bounded(&path)?;
        serde_json::from_slice(&bytes).map_err(|e| ImageError::malformed("image store", e))
    }

    fn names(&self) -> Result<Names, ImageError> {
        let path = self.dir.join("names.json");
        match fs::metadata(&path) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Names::new()),
            _ => {}
        }
        let bytes = read_bounded(&path)?;
        serde_json::from_slice(&bytes).map_err(|e| ImageError::malformed("image store", e))
    }

    fn write_names(&self, names: &Names) -> Result<(), ImageError> {
        let json = serde_json::to_vec_pretty(names).expect("names serialize");
        let temporary = self.dir.join(".names.json.new");
        write_synced(&temporary, &json)?;
        let path = self.dir.join("names.json");
        fs::rename(&temporary, &path).map_err(ImageError::io("replace", &path))?;
        sync_dir(&self.dir)
    }

    fn create(&self) -> Result<(), ImageError> {
        if let Some(parent) = self.dir.parent() {
            fs::create_dir_all(parent).map_err(ImageError::io("create", parent))?;
        }
        match fs::DirBuilder::new().mode(0o700).create(&self.dir) {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
                fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o700))
                    .map_err(ImageError::io("set the mode of", &self.dir))
            }
            Err(err) => Err(ImageError::io("create", &self.dir)(err)),
        }
    }

    fn lock(&self) -> Result<File, ImageError> {
        let path = self.dir.join(".lock");
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(ImageError::io("open", &path))?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| ImageError::io("lock", &path)(e.into()))?;
        Ok(file)
    }

    fn lock_existing(&self, reference: &str) -> Result<File, ImageError> {
        if !self.dir.exists() {
            return Err(ImageError::Unknown {
                reference: shown(reference),
            });
        }
        self.lock()
    }

    /// Removes the directories of imports that were killed (the caller holds the lock, so no
    /// import is running).
    fn clean_partial(&self) -> Result<(), ImageError> {
        for entry in fs::read_dir(&self.dir).map_err(ImageError::io("list", &self.dir))? {
            let entry = entry.map_err(ImageError::io("list", &self.dir))?;
            if entry
                .file_name()
                .as_encoded_bytes()
                .starts_with(b".partial-")
            {
                remove_tree(&self.dir, &entry.path(), u64::MAX)?;
            }
        }
        Ok(())
    }
}

fn check_name(name: &str) -> Result<(), ImageError> {
    cordon_protocol::check_image_name(name).map_err(|e| ImageError::BadReference {
        reference: shown(name),
        problem: e.to_string(),
    })
}

fn parse_ref(reference: &str) -> Result<ImageRef, ImageError> {
    ImageRef::parse(reference).map_err(|e| ImageError::BadReference {
        reference: shown(reference),
        problem: e.to_string(),
    })
}

fn names_of(names: &Names, digest: &str) -> Vec<String> {
    names
        .iter()
        .filter(|(_, d)| d.as_str() == digest)
        .map(|(n, _)| n.clone())
        .collect()
}

/// Removes `path`, an entry directly in the store directory `store`, and everything below it,
/// through a view of the store (no link followed).
fn remove_tree(store: &Path, path: &Path, limit: u64) -> Result<(), ImageError> {
    let view = View::open(store).map_err(ImageError::io("open", store))?;
    let name = path
        .file_name()
        .and_then(|n| WsPath::name(n.as_encoded_bytes()).ok())
        .ok_or_else(|| ImageError::io("remove", path)(std::io::ErrorKind::InvalidInput.into()))?;
    view.remove_all(&name, limit)
        .map(drop)
        .map_err(|e| ImageError::io("remove", path)(std::io::Error::other(e.to_string())))
}

fn mkdir(path: &Path, mode: u32) -> Result<(), ImageError> {
    fs::DirBuilder::new()
        .mode(mode)
        .create(path)
        .map_err(ImageError::io("create", path))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(ImageError::io("set the mode of", path))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), ImageError> {
    let mut file = File::create(path).map_err(ImageError::io("create", path))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(ImageError::io("write", path))
}

fn sync_dir(dir: &Path) -> Result<(), ImageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(ImageError::io("sync", dir))
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, ImageError> {
    use std::io::Read;
    let file = File::open(path).map_err(ImageError::io("open", path))?;
    let mut bytes = Vec::new();
    file.take(MAX_JSON + 1)
        .read_to_end(&mut bytes)
        .map_err(ImageError::io("read", path))?;
    if bytes.len() as u64 > MAX_JSON {
        return Err(ImageError::malformed(
            "image store",
            format!("`{}` is larger than {MAX_JSON} bytes", path.display()),
        ));
    }
    Ok(bytes)
}

fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
