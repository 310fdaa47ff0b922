//! Fuzz target: the git index reader the sandbox uses to find submodules (`git/index.rs`), whose
//! input a hostile session may have written. Properties checked on every input: no panic, and
//! every gitlink path it returns is relative and stays inside the work tree (no `..`, `.` or
//! `.git` component), since the sandbox mounts over each one, and no longer than `PATH_MAX`
//! (version 4's prefix compression must not rebuild longer names than the file holds).
#![no_main]

use std::path::Component;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(gitlinks) = cordon_sandbox::git::fuzz_index(data) else {
        return;
    };
    assert!(gitlinks.len() <= cordon_sandbox::git::MAX_SUBMODULES);
    for path in gitlinks {
        assert!(!path.as_os_str().is_empty(), "empty gitlink path");
        assert!(path.as_os_str().len() <= cordon_sandbox::git::MAX_NAME);
        for component in path.components() {
            match component {
                Component::Normal(name) => {
                    assert!(!name.eq_ignore_ascii_case(".git"), "{path:?}");
                }
                other => panic!("{path:?} has the component {other:?}"),
            }
        }
    }
});
