//! Status of idmapped mounts (`mount_setattr` with `MOUNT_ATTR_IDMAP`), which cordon needs as root
//! to map the workspace owner to the sandbox's unowned uid.

use super::kernel::KernelVersion;
use super::{Layer, LayerStatus};

/// Whether the kernel knows `mount_setattr` and which kernel it is. The probe does not idmap a
/// real mount (that needs a user namespace and a filesystem that supports it); the session reports
/// a filesystem that refuses.
pub(crate) fn status(mount_setattr_exists: bool, kernel: Option<KernelVersion>) -> LayerStatus {
    let running = kernel.map_or_else(|| "this kernel".to_owned(), |k| format!("Linux {k}"));
    if mount_setattr_exists {
        LayerStatus::available(
            Layer::IdmappedMounts,
            format!("{running} has mount_setattr (system call tried; no mount idmapped)"),
        )
    } else {
        LayerStatus::missing(
            Layer::IdmappedMounts,
            format!("{running} has no mount_setattr (system call tried)"),
            "idmapped mounts need Linux 5.12 or later; cordon needs them only when run as root"
                .to_owned(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idmapped_mounts_follow_the_system_call() {
        let kernel = Some(KernelVersion {
            major: 5,
            minor: 10,
        });
        let missing = status(false, kernel);
        assert!(!missing.available);
        assert_eq!(
            missing.detail,
            "Linux 5.10 has no mount_setattr (system call tried)"
        );
        assert!(missing.remedy.is_some_and(|r| r.contains("Linux 5.12")));
        let present = status(true, None);
        assert!(present.available && present.remedy.is_none());
    }
}
