//! Setup stamps: a setup hook is cached by a digest of its command, the workspace path, its
//! `setup_network` and the lockfiles at the workspace root.

use cordon_pipeline::{CommandSpec, Setup};
use sha2::{Digest, Sha256};

use crate::workspace::HostWorkspace;

/// Whether a workspace-root file name is a lockfile whose content invalidates setup stamps.
pub fn is_lockfile(name: &str) -> bool {
    name.ends_with(".lock")
        || name.ends_with("-lock.json")
        || name.ends_with("-lock.yaml")
        || name.ends_with(".lockb")
        || name == "go.sum"
        || (name.starts_with("requirements") && name.ends_with(".txt"))
}

/// The stamp (hex SHA-256) of `setup` in `workspace`: lockfiles are regular files at the root,
/// read through the workspace view and streamed (a link or a FIFO is no lockfile); the first 64
/// by name, each up to 64 MiB and not sparse, count by content, the rest by name and size.
/// Unreadable lockfiles count by name only.
/// `image` is the digest (or directory) of the environment image the hook runs on: what a hook
/// installed on one image says nothing of another.
pub fn stamp(setup: &Setup, workspace: &HostWorkspace, image: Option<&str>) -> String {
    let mut hash = Sha256::new();
    let mut field = |bytes: &[u8]| {
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(bytes);
    };
    match &setup.command {
        CommandSpec::Shell(text) => {
            field(b"sh");
            field(text.as_bytes());
        }
        CommandSpec::Argv(argv) => {
            field(b"argv");
            for arg in argv {
                field(arg.as_bytes());
            }
        }
    }
    field(workspace.path().as_os_str().as_encoded_bytes());
    field(setup.network.to_string().as_bytes());
    field(image.unwrap_or("host").as_bytes());
    let lockfiles = workspace.lockfiles(is_lockfile);
    for (name, digest) in lockfiles {
        field(name.as_bytes());
        field(&digest);
    }
    hex(&hash.finalize())
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lockfiles_are_recognised_by_name() {
        for (name, expected) in [
            ("Cargo.lock", true),
            ("package-lock.json", true),
            ("pnpm-lock.yaml", true),
            ("bun.lockb", true),
            ("go.sum", true),
            ("requirements-dev.txt", true),
            ("README.md", false),
            ("lock", false),
        ] {
            assert_eq!(is_lockfile(name), expected, "{name}");
        }
    }
}
