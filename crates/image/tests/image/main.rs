//! The importer and the image store, judged by what lands on the host.

mod build;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use build::{E, docker_archive, gzip, layer, oci_files, sha, tar_of, write_dir, zstd};
use cordon_image::{ImageError, Images, Limits};
use cordon_protocol::ImageRef;

struct Setup {
    _temp: tempfile::TempDir,
    dir: PathBuf,
    images: Images,
}

fn setup() -> Setup {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_path_buf();
    let images = Images::at(&dir.join("state"));
    Setup {
        _temp: temp,
        dir,
        images,
    }
}

impl Setup {
    fn archive(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.join(name);
        fs::write(&path, bytes).unwrap();
        path
    }

    fn import(&self, bytes: &[u8]) -> Result<cordon_image::Imported, ImageError> {
        let path = self.archive("image.tar", bytes);
        self.images.import(&path, None, &Limits::default())
    }

    fn rootfs(&self, reference: &str) -> PathBuf {
        self.images
            .resolve(&ImageRef::parse(reference).unwrap())
            .unwrap()
            .rootfs
    }

    /// Nothing but the store's own files: no image, no partial import.
    fn assert_store_empty(&self) {
        let dir = self.images.dir();
        let left: Vec<String> = fs::read_dir(dir)
            .map(|entries| {
                entries
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .filter(|n| n != ".lock")
                    .collect()
            })
            .unwrap_or_default();
        assert!(left.is_empty(), "left in the store: {left:?}");
    }
}

fn base() -> Vec<u8> {
    layer(&[
        E::Dir("bin/", 0o755),
        E::File("bin/tool", b"v1", 0o755),
        E::File("etc/os-release", b"ID=test\n", 0o644),
        E::Dir("var/", 0o755),
        E::File("var/old", b"old", 0o644),
        E::Dir("opt/", 0o755),
        E::File("opt/a", b"a", 0o644),
        E::File("opt/b", b"b", 0o644),
    ])
}

#[test]
fn a_docker_archive_imports_with_its_layers_applied_in_order() {
    let s = setup();
    let upper = layer(&[
        E::File("bin/tool", b"v2", 0o755),
        E::File("new", b"n", 0o600),
    ]);
    let imported = s
        .import(&docker_archive(&[&base(), &upper], "tools:1"))
        .unwrap();
    assert_eq!(imported.name, "tools:1");
    assert!(!imported.existed);
    assert_eq!(imported.info.path.as_deref(), Some("/bin:/usr/bin"));
    let root = s.rootfs("tools:1");
    assert_eq!(fs::read(root.join("bin/tool")).unwrap(), b"v2");
    assert_eq!(fs::read(root.join("etc/os-release")).unwrap(), b"ID=test\n");
    let meta = fs::metadata(root.join("new")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    assert_eq!(meta.uid(), rustix_uid(), "owned by the importing user");
    assert_eq!(meta.mtime(), 1_700_000_000, "times are kept");
    // The store and its images are the importing user's alone.
    let store = fs::metadata(s.images.dir()).unwrap();
    assert_eq!(store.permissions().mode() & 0o777, 0o700);
    // The digest is the configuration's.
    let digest = &imported.info.digest;
    assert_eq!(s.rootfs(digest), root);
}

fn rustix_uid() -> u32 {
    fs::metadata("/proc/self").unwrap().uid()
}

#[test]
fn an_oci_layout_as_a_directory_and_as_a_tar_imports_gzip_zstd_and_plain_layers() {
    let s = setup();
    let one = base();
    let two = layer(&[E::File("opt/zstd", b"z", 0o644)]);
    let three = layer(&[E::File("opt/plain", b"p", 0o644)]);
    let files = oci_files(
        &[&one, &two, &three],
        &[gzip(&one), zstd(&two), three.clone()],
        &[
            "application/vnd.oci.image.layer.v1.tar+gzip",
            "application/vnd.oci.image.layer.v1.tar+zstd",
            "application/vnd.oci.image.layer.v1.tar",
        ],
        "oci:1",
    );
    let dir = s.dir.join("layout");
    write_dir(&dir, &files);
    let from_dir = s.images.import(&dir, None, &Limits::default()).unwrap();
    assert_eq!(from_dir.name, "oci:1");
    let root = s.rootfs("oci:1");
    for (name, bytes) in [
        ("opt/a", &b"a"[..]),
        ("opt/zstd", b"z"),
        ("opt/plain", b"p"),
    ] {
        assert_eq!(fs::read(root.join(name)).unwrap(), bytes, "{name}");
    }
    assert_eq!(from_dir.info.path.as_deref(), Some("/opt/bin:/bin"));
    let tar = s.archive("layout.tar", &tar_of(&files));
    let from_tar = s
        .images
        .import(&tar, Some("again"), &Limits::default())
        .unwrap();
    assert_eq!(from_tar.info.digest, from_dir.info.digest);
    assert!(from_tar.existed, "the same configuration is the same image");
    assert_eq!(
        from_tar.info.names,
        vec!["again".to_owned(), "oci:1".to_owned()]
    );
}

#[test]
fn whiteouts_and_opaque_directories_remove_what_lower_layers_made_and_keep_their_own_layers() {
    let s = setup();
    let upper = layer(&[
        E::File("var/.wh.old", b"", 0o644),
        E::Dir("opt/", 0o755),
        E::File("opt/kept-from-this-layer", b"k", 0o644),
        E::File("opt/.wh..wh..opq", b"", 0o644),
        E::File("bin/.wh.missing", b"", 0o644),
    ]);
    s.import(&docker_archive(&[&base(), &upper], "w:1"))
        .unwrap();
    let root = s.rootfs("w:1");
    assert!(!root.join("var/old").exists(), "whited out");
    assert!(root.join("var").is_dir());
    assert!(
        !root.join("opt/a").exists() && !root.join("opt/b").exists(),
        "opaque"
    );
    assert!(
        root.join("opt/kept-from-this-layer").exists(),
        "this layer's own entry"
    );
    assert!(root.join("bin/tool").exists());
    for name in ["var/.wh.old", "opt/.wh..wh..opq", "bin/.wh.missing"] {
        assert!(!root.join(name).exists(), "{name} is never unpacked");
    }
}

#[test]
fn a_config_or_layer_that_does_not_match_its_digest_refuses_the_import_and_stores_nothing() {
    let s = setup();
    // The configuration stored under another digest's name.
    let tars: [&[u8]; 1] = [&base()];
    let config = build::config(&tars, "/bin");
    let mut archive_files = vec![
        (format!("{}.json", sha(b"something else")), config.clone()),
        ("l/layer.tar".into(), base()),
    ];
    archive_files.push((
        "manifest.json".into(),
        serde_json::to_vec(&serde_json::json!([{
            "Config": archive_files[0].0, "RepoTags": ["x:1"], "Layers": ["l/layer.tar"]
        }]))
        .unwrap(),
    ));
    let err = s.import(&tar_of(&archive_files)).unwrap_err();
    assert!(matches!(err, ImageError::DigestMismatch { .. }), "{err}");
    assert!(err.to_string().contains("image configuration"), "{err}");
    s.assert_store_empty();

    // A layer whose bytes differ from the configuration's diff_id.
    let config = build::config(&[&layer(&[E::File("x", b"1", 0o644)])], "/bin");
    let altered = layer(&[E::File("x", b"2", 0o644)]);
    let err = s
        .import(&build::docker_archive_with(&config, &[&altered], "x:1"))
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("layer 1 (unpacked) does not match"),
        "{err}"
    );
    s.assert_store_empty();

    // An OCI blob whose compressed bytes were altered after the manifest named them.
    let one = base();
    let mut files = oci_files(
        &[&one],
        &[gzip(&one)],
        &["application/vnd.oci.image.layer.v1.tar+gzip"],
        "o:1",
    );
    let layer_name = format!("blobs/sha256/{}", sha(&gzip(&one)));
    let blob = files.iter_mut().find(|(n, _)| *n == layer_name).unwrap();
    // The gzip header's time changed: the same size and unpacked content (whose digest holds),
    // a different blob.
    blob.1[4] ^= 1;
    let err = s.import(&tar_of(&files)).unwrap_err();
    assert!(
        matches!(err, ImageError::DigestMismatch { .. })
            && err.to_string().contains("layer 1 does"),
        "{err}"
    );
    s.assert_store_empty();
}

fn refused(s: &Setup, entries: &[E<'_>], problem: &str) {
    let err = s
        .import(&docker_archive(&[&layer(entries)], "bad:1"))
        .unwrap_err();
    assert!(
        matches!(err, ImageError::Refused { .. }) && err.to_string().contains(problem),
        "{err}"
    );
    assert!(err.to_string().contains("nothing was imported"), "{err}");
    s.assert_store_empty();
}

#[test]
fn an_entry_that_climbs_out_of_the_root_refuses_the_import_and_writes_nothing_outside() {
    let s = setup();
    refused(
        &s,
        &[
            E::File("ok", b"", 0o644),
            E::File("../../escaped", b"x", 0o644),
        ],
        "escapes the image root",
    );
    assert!(!s.dir.join("escaped").exists());
    assert!(!s.images.dir().parent().unwrap().join("escaped").exists());
    // Control: the same layer without the climbing entry imports.
    s.import(&docker_archive(
        &[&layer(&[E::File("ok", b"", 0o644)])],
        "ok:1",
    ))
    .unwrap();
}

#[test]
fn a_hard_link_that_escapes_or_names_nothing_unpacked_refuses_the_import() {
    let s = setup();
    refused(
        &s,
        &[E::Hard("h", "../../../etc/passwd")],
        "escapes the image root",
    );
    refused(
        &s,
        &[E::Hard("h", "etc/shadow")],
        "not a file unpacked earlier",
    );
    refused(
        &s,
        &[E::Dir("d/", 0o755), E::Hard("h", "d")],
        "not a file unpacked earlier",
    );
    // A link to a file from an earlier entry is a hard link on the host.
    s.import(&docker_archive(
        &[&layer(&[E::File("f", b"same", 0o644), E::Hard("h", "f")])],
        "h:1",
    ))
    .unwrap();
    let root = s.rootfs("h:1");
    let (f, h) = (
        fs::metadata(root.join("f")).unwrap(),
        fs::metadata(root.join("h")).unwrap(),
    );
    assert_eq!(f.ino(), h.ino());
}

#[test]
fn a_device_node_refuses_the_import() {
    let s = setup();
    refused(&s, &[E::Device("dev/sda")], "device node");
}

#[test]
fn an_entry_below_a_symbolic_link_is_refused_and_nothing_is_written_through_the_link() {
    let s = setup();
    let outside = s.dir.join("outside");
    fs::create_dir(&outside).unwrap();
    let link = layer(&[E::Link("escape", outside.to_str().unwrap())]);
    let through = layer(&[E::File("escape/planted", b"x", 0o644)]);
    let err = s
        .import(&docker_archive(&[&link, &through], "l:1"))
        .unwrap_err();
    assert!(err.to_string().contains("below a symbolic link"), "{err}");
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    s.assert_store_empty();
    // A link itself is unpacked as a link, never followed.
    s.import(&docker_archive(&[&link], "l:2")).unwrap();
    let root = s.rootfs("l:2");
    assert_eq!(fs::read_link(root.join("escape")).unwrap(), outside);
}

#[test]
fn setuid_setgid_and_group_or_other_write_bits_are_dropped() {
    let s = setup();
    let imported = s
        .import(&docker_archive(
            &[&layer(&[
                E::File("suid", b"", 0o4755),
                E::File("sgid", b"", 0o2775),
                E::Dir("shared/", 0o3777),
                E::Fifo("fifo"),
            ])],
            "s:1",
        ))
        .unwrap();
    let root = s.rootfs("s:1");
    let mode = |name: &str| {
        fs::symlink_metadata(root.join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("suid"), 0o755);
    assert_eq!(mode("sgid"), 0o755);
    assert_eq!(mode("shared"), 0o1755);
    assert!(!root.join("fifo").exists());
    assert_eq!(imported.info.skipped.setuid, 2);
    assert_eq!(imported.info.skipped.special, 1);
}

#[test]
fn a_read_only_directory_of_a_lower_layer_is_filled_by_a_later_one_and_removed_with_the_image() {
    let s = setup();
    let lower = layer(&[E::Dir("ro/", 0o555), E::File("ro/a", b"a", 0o444)]);
    let upper = layer(&[E::File("ro/b", b"b", 0o444)]);
    s.import(&docker_archive(&[&lower, &upper], "ro:1"))
        .unwrap();
    let root = s.rootfs("ro:1");
    assert_eq!(fs::read(root.join("ro/b")).unwrap(), b"b");
    assert_eq!(
        fs::metadata(root.join("ro")).unwrap().permissions().mode() & 0o777,
        0o555
    );
    let removed = s.images.remove("ro:1").unwrap();
    assert!(removed.image);
    assert!(!root.exists());
    s.assert_store_empty_but_names();
}

impl Setup {
    fn assert_store_empty_but_names(&self) {
        let left: Vec<String> = fs::read_dir(self.images.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != ".lock" && n != "names.json")
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}

#[test]
fn each_import_bound_refuses_past_it_and_keeps_nothing() {
    let s = setup();
    let path = s.archive("big.tar", &docker_archive(&[&base()], "b:1"));
    let limits = Limits {
        entries: 3,
        ..Limits::default()
    };
    let err = s.images.import(&path, None, &limits).unwrap_err();
    assert!(err.to_string().contains("more than 3 entries"), "{err}");
    s.assert_store_empty();

    let limits = Limits {
        unpacked: 4096,
        ..Limits::default()
    };
    let err = s.images.import(&path, None, &limits).unwrap_err();
    assert!(
        err.to_string().contains("more than 4096 bytes unpacked"),
        "{err}"
    );
    s.assert_store_empty();

    // 4 MiB of zeros gzip to a few KiB: far past 100:1, and past the 1 MiB floor.
    let zeros = vec![0u8; 4 << 20];
    let bomb = layer(&[E::File("zeros", &zeros, 0o644)]);
    let files = oci_files(
        &[&bomb],
        &[gzip(&bomb)],
        &["application/vnd.oci.image.layer.v1.tar+gzip"],
        "bomb:1",
    );
    let err = s.import(&tar_of(&files)).unwrap_err();
    assert!(err.to_string().contains("100:1"), "{err}");
    s.assert_store_empty();
    // Control: within the defaults the plain archive imports.
    s.images.import(&path, None, &Limits::default()).unwrap();
}

#[test]
fn names_point_to_digests_and_removal_by_name_keeps_an_image_another_name_holds() {
    let s = setup();
    let path = s.archive("a.tar", &docker_archive(&[&base()], "a:1"));
    let first = s.images.import(&path, None, &Limits::default()).unwrap();
    let second = s
        .images
        .import(&path, Some("alias"), &Limits::default())
        .unwrap();
    assert!(second.existed);
    let listed = s.images.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].names, vec!["a:1".to_owned(), "alias".to_owned()]);
    let removed = s.images.remove("a:1").unwrap();
    assert!(!removed.image, "alias still names it");
    assert!(s.rootfs("alias").exists());
    let removed = s.images.remove(&first.info.digest).unwrap();
    assert!(removed.image);
    assert_eq!(removed.names, vec!["alias".to_owned()]);
    assert!(s.images.list().unwrap().is_empty());
    let err = s.images.remove("a:1").unwrap_err();
    assert!(
        err.to_string()
            .contains("no image `a:1` in the image store; import it with `cordon image import"),
        "{err}"
    );
    let err = s
        .images
        .resolve(&ImageRef::parse("nope").unwrap())
        .unwrap_err();
    assert!(matches!(err, ImageError::Unknown { .. }), "{err}");
}

#[test]
fn an_import_killed_midway_leaves_nothing_the_next_import_keeps() {
    let s = setup();
    let path = s.archive("a.tar", &docker_archive(&[&base()], "a:1"));
    s.images.import(&path, None, &Limits::default()).unwrap();
    // What a killed import leaves: a partial directory, read-only parts included.
    let partial = s.images.dir().join(".partial-4242/rootfs/ro");
    fs::create_dir_all(&partial).unwrap();
    fs::write(partial.join("f"), b"x").unwrap();
    fs::set_permissions(&partial, fs::Permissions::from_mode(0o555)).unwrap();
    s.images
        .import(&path, Some("b"), &Limits::default())
        .unwrap();
    assert!(!s.images.dir().join(".partial-4242").exists());
}

#[test]
fn a_file_that_is_no_image_archive_is_refused_naming_both_formats() {
    let s = setup();
    let err = s
        .import(&tar_of(&[("hello".into(), b"x".to_vec())]))
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("neither a docker-archive") && text.contains("OCI image layout"),
        "{text}"
    );
    let err = s.import(b"not a tar at all, just bytes").unwrap_err();
    assert!(!err.to_string().is_empty());
    let err = s
        .images
        .import(
            &s.archive("x.tar", b""),
            Some("bad name"),
            &Limits::default(),
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("is not an image reference"),
        "{err}"
    );
}

#[test]
fn mount_points_the_sandbox_covers_are_made_plain_and_git_directories_skipped() {
    let s = setup();
    let imported = s
        .import(&docker_archive(
            &[&layer(&[
                E::Dir("etc/", 0o755),
                E::Link("etc/passwd", "/proc/self/environ"),
                E::Dir(".cordon/", 0o755),
                E::File("app/.git/config", b"[core]", 0o644),
                E::File("app/main.py", b"", 0o644),
            ])],
            "m:1",
        ))
        .unwrap();
    let root = s.rootfs("m:1");
    assert!(fs::symlink_metadata(root.join("etc/passwd")).is_err());
    assert!(!root.join(".cordon").exists());
    assert!(!root.join("app/.git").exists());
    assert!(root.join("app/main.py").exists());
    assert_eq!(imported.info.skipped.git, 1);
}

#[allow(dead_code)]
fn exists(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

#[test]
fn long_names_and_pax_paths_are_applied_and_an_oversized_extension_header_is_refused_unread() {
    let s = setup();
    // A GNU long name (over 100 bytes) and a PAX `path` record, both as the tar crate writes them.
    let long = format!("opt/{}/file", "d".repeat(120));
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(4);
    header.set_mode(0o644);
    builder
        .append_data(&mut header, &long, &b"long"[..])
        .unwrap();
    builder
        .append_pax_extensions([("path", &b"etc/from-pax"[..])])
        .unwrap();
    let mut header = tar::Header::new_ustar();
    header.set_size(3);
    header.set_mode(0o644);
    header.set_path("etc/short-name").unwrap();
    header.set_cksum();
    builder.append(&header, &b"pax"[..]).unwrap();
    let tar = builder.into_inner().unwrap();
    s.import(&docker_archive(&[&tar], "names:1")).unwrap();
    let root = s.rootfs("names:1");
    assert_eq!(fs::read(root.join(&long)).unwrap(), b"long");
    assert_eq!(fs::read(root.join("etc/from-pax")).unwrap(), b"pax");
    assert!(
        !root.join("etc/short-name").exists(),
        "the PAX path wins over the header's"
    );

    // A long-name header claiming a gigabyte: refused on its size, never read into memory.
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::GNULongName);
    header.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
    header.set_size(1 << 30);
    header.set_cksum();
    let mut bomb = header.as_bytes().to_vec();
    bomb.extend_from_slice(&[b'x'; 4096]);
    let fresh = setup();
    let err = fresh
        .import(&docker_archive(&[&bomb], "bomb:1"))
        .unwrap_err();
    assert!(err.to_string().contains("larger than 64 KiB"), "{err}");
    fresh.assert_store_empty();
}

#[test]
fn an_archive_entry_claiming_more_bytes_than_the_file_holds_is_refused() {
    let s = setup();
    let tars: [&[u8]; 1] = [&base()];
    let config = build::config(&tars, "/bin");
    let config_name = format!("{}.json", sha(&config));
    let manifest = serde_json::to_vec(&serde_json::json!([{
        "Config": config_name, "RepoTags": ["cut:1"], "Layers": ["l/layer.tar"]
    }]))
    .unwrap();
    // The layer last, 2000 bytes of it padded to 2048: the archive is cut past its end marker
    // (1024 bytes), its padding (48) and 100 bytes into its data, so its header claims bytes the
    // file does not have.
    let mut layer_bytes = base();
    layer_bytes.resize(2000, 0);
    let mut archive = tar_of(&[
        ("manifest.json".into(), manifest),
        (config_name, config),
        ("l/layer.tar".into(), layer_bytes),
    ]);
    archive.truncate(archive.len() - 1024 - 48 - 100);
    let err = s.import(&archive).unwrap_err();
    assert!(
        err.to_string().contains("more than the archive holds"),
        "{err}"
    );
    s.assert_store_empty();
}

#[test]
fn a_directory_a_later_layer_replaces_with_a_link_or_a_file_imports() {
    let s = setup();
    let lower = layer(&[
        E::Dir("var/", 0o755),
        E::Dir("var/run/", 0o700),
        E::Dir("d/", 0o755),
    ]);
    let upper = layer(&[
        E::Link("var/run", "/run"),
        E::File("d", b"now a file", 0o644),
    ]);
    s.import(&docker_archive(&[&lower, &upper], "replace:1"))
        .unwrap();
    let root = s.rootfs("replace:1");
    assert_eq!(
        fs::read_link(root.join("var/run")).unwrap(),
        Path::new("/run")
    );
    assert_eq!(fs::read(root.join("d")).unwrap(), b"now a file");
}

#[test]
fn a_docker_archive_in_the_newer_layout_is_verified_by_its_blob_names() {
    // `docker save` since 25 writes the OCI layout's blobs and names them in `manifest.json`.
    let s = setup();
    let one = base();
    let tars: [&[u8]; 1] = [&one];
    let config = build::config(&tars, "/bin");
    let (config_hex, layer_hex) = (sha(&config), sha(&one));
    let manifest = |layer: &str| {
        serde_json::to_vec(&serde_json::json!([{
            "Config": format!("blobs/sha256/{config_hex}"),
            "RepoTags": ["new:1"],
            "Layers": [format!("blobs/sha256/{layer}")],
        }]))
        .unwrap()
    };
    let files = |layer_name: &str| {
        vec![
            (format!("blobs/sha256/{config_hex}"), config.clone()),
            (format!("blobs/sha256/{layer_name}"), one.clone()),
            ("manifest.json".to_owned(), manifest(layer_name)),
        ]
    };
    s.import(&tar_of(&files(&layer_hex))).unwrap();
    assert_eq!(fs::read(s.rootfs("new:1").join("bin/tool")).unwrap(), b"v1");
    // A layer stored under another digest's name is refused, although its content matches the
    // configuration's diff_id.
    let other = setup();
    let wrong = "f".repeat(64);
    let err = other.import(&tar_of(&files(&wrong))).unwrap_err();
    assert!(
        err.to_string()
            .contains("layer 1 does not match its digest"),
        "{err}"
    );
    other.assert_store_empty();
}

#[test]
fn an_archive_of_several_images_needs_a_name_that_picks_one() {
    let s = setup();
    let one = base();
    let two = layer(&[E::File("two", b"2", 0o644)]);
    let mut files = Vec::new();
    let mut entries = Vec::new();
    for (tag, tar) in [("a:1", &one), ("b:1", &two)] {
        let tars: [&[u8]; 1] = [tar];
        let config = build::config(&tars, "/bin");
        let config_name = format!("{}.json", sha(&config));
        let layer_name = format!("{tag}/layer.tar").replace(':', "-");
        files.push((config_name.clone(), config));
        files.push((layer_name.clone(), tar.clone()));
        entries.push(
            serde_json::json!({"Config": config_name, "RepoTags": [tag], "Layers": [layer_name]}),
        );
    }
    files.push((
        "manifest.json".into(),
        serde_json::to_vec(&entries).unwrap(),
    ));
    let path = s.archive("two.tar", &tar_of(&files));
    let err = s
        .images
        .import(&path, None, &Limits::default())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the archive holds several images (`a:1`, `b:1`); name the one to import with --name"
    );
    let err = s
        .images
        .import(&path, Some("c:1"), &Limits::default())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the archive has no image named `c:1`; it holds: `a:1`, `b:1`"
    );
    s.assert_store_empty();
    let imported = s
        .images
        .import(&path, Some("b:1"), &Limits::default())
        .unwrap();
    assert_eq!(imported.name, "b:1");
    assert_eq!(fs::read(s.rootfs("b:1").join("two")).unwrap(), b"2");
}

#[test]
fn a_zstd_frame_asking_for_a_huge_window_is_refused_before_it_is_decoded() {
    let s = setup();
    // Magic, a descriptor without single-segment, and a window descriptor of 2^28 bytes.
    let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 18 << 3];
    frame.extend_from_slice(&[0; 64]);
    let err = s
        .import(&docker_archive(&[&frame], "window:1"))
        .unwrap_err();
    assert!(
        err.to_string().contains("window, more than the 134217728"),
        "{err}"
    );
    s.assert_store_empty();
    // Control: the same layer compressed ordinarily imports.
    let plain = base();
    let files = oci_files(
        &[&plain],
        &[zstd(&plain)],
        &["application/vnd.oci.image.layer.v1.tar+zstd"],
        "window:2",
    );
    s.import(&tar_of(&files)).unwrap();
}
