//! Fuzz target: the image importer (`cordon-image`), on archives and on layers, which come from
//! whoever built the image. Properties checked on every input: no panic; nothing is written
//! outside the fuzz case's own directory (the directory beside it stays empty); a failed import
//! leaves no image and no partial directory in the store.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(top) = tempfile::tempdir() else {
        return;
    };
    let case = top.path().join("case");
    let beside = top.path().join("beside");
    if std::fs::create_dir(&case).is_err() || std::fs::create_dir(&beside).is_err() {
        return;
    }
    let result = cordon_image::fuzz_import(&case, data);
    let written = std::fs::read_dir(&beside).map(|d| d.count()).unwrap_or(0);
    assert_eq!(written, 0, "the import wrote beside its directory");
    let top_level: Vec<String> = std::fs::read_dir(top.path())
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        top_level.len() == 2,
        "the import wrote next to its directory: {top_level:?}"
    );
    if result.is_err() {
        let images = case.join("state/images");
        let left: Vec<String> = std::fs::read_dir(&images)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n != ".lock" && n != "names.json")
                    .collect()
            })
            .unwrap_or_default();
        assert!(left.is_empty(), "a failed import left {left:?}");
    }
});
