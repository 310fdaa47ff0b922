//! Status of overlayfs in a user namespace, which environment images need (DESIGN §14): the
//! image is the lower layer of an overlay made in the session's user namespace.

use super::{Layer, LayerStatus};
use crate::sys::probe::OverlayFailure;

const REMEDY: &str = "environment images need overlayfs mountable in a user namespace (Linux \
                      5.11 or later with CONFIG_OVERLAY_FS); steps without `image` do not";

/// The quick fact: whether the kernel lists `overlay` in `/proc/filesystems`.
pub(crate) fn quick(filesystems: &str) -> LayerStatus {
    if filesystems
        .lines()
        .any(|line| line.split_whitespace().last() == Some("overlay"))
    {
        LayerStatus::available(
            Layer::Overlayfs,
            "overlay is in /proc/filesystems (not mounted; `cordon doctor` tries one)".to_owned(),
        )
    } else {
        LayerStatus::missing(
            Layer::Overlayfs,
            "overlay is not in /proc/filesystems".to_owned(),
            REMEDY.to_owned(),
        )
    }
}

/// The thorough attempt: an overlay mounted in a forked child's user namespace.
pub(crate) fn attempt(result: std::io::Result<Result<(), OverlayFailure>>) -> LayerStatus {
    match result {
        Ok(Ok(())) => LayerStatus::available(
            Layer::Overlayfs,
            "an overlay with `userxattr` mounted in a new user namespace (tried)".to_owned(),
        ),
        Ok(Err(failure)) => LayerStatus::missing(
            Layer::Overlayfs,
            format!(
                "could not {} (tried in a forked child): {}",
                failure.step,
                std::io::Error::from_raw_os_error(failure.errno)
            ),
            REMEDY.to_owned(),
        ),
        Err(err) => LayerStatus::missing(
            Layer::Overlayfs,
            format!("the overlay probe failed: {err}"),
            REMEDY.to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quick_fact_reads_the_filesystem_list() {
        assert!(quick("nodev\ttmpfs\nnodev\toverlay\n").available);
        let missing = quick("nodev\ttmpfs\n\text4\n");
        assert!(!missing.available && missing.remedy.is_some());
    }

    #[test]
    fn a_failed_attempt_names_the_step_and_the_error() {
        let status = attempt(Ok(Err(OverlayFailure {
            step: "mount an overlay with `userxattr`",
            errno: libc::EPERM,
        })));
        assert!(!status.available);
        assert!(
            status.detail.starts_with(
                "could not mount an overlay with `userxattr` (tried in a forked child)"
            ),
            "{}",
            status.detail
        );
    }
}
