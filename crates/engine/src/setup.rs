//! Setup stamps: a setup hook is cached by a digest of its command, the workspace path, its
//! `setup_network`, the lockfiles at the workspace root and the machine it ran on (a shared store
//! holds the stamps of many machines, and what a hook installed on one is not on another).

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
    field(machine_id().as_bytes());
    let lockfiles = workspace.lockfiles(is_lockfile);
    for (name, digest) in lockfiles {
        field(name.as_bytes());
        field(&digest);
    }
    hex(&hash.finalize())
}

/// This machine: `/etc/machine-id` (systemd's, also written by dbus), else the kernel's host
/// name. Host files, not the workspace's; read with a bound.
fn machine_id() -> String {
    use std::io::Read as _;
    let read = |path: &str| {
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|file| file.take(256).read_to_string(&mut text))
            .ok()
            .map(|_| text.trim().to_owned())
            .filter(|text| !text.is_empty())
    };
    read("/etc/machine-id")
        .or_else(|| read("/proc/sys/kernel/hostname"))
        .unwrap_or_default()
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
