//! Status of the cgroups layer: whether the host's cgroup driver could enforce every cap.

use super::{Layer, LayerStatus};
use crate::cgroup::{Caps, CgroupDriver, CgroupError};

/// Caps naming every controller, to ask the driver about all of them at once.
const EVERY_CAP: Caps = Caps {
    memory: Some(1 << 30),
    pids: Some(1),
    cpus: Some(1.0),
};

pub(crate) fn status(driver: &dyn CgroupDriver) -> LayerStatus {
    match driver.check(&EVERY_CAP) {
        Ok(()) => LayerStatus::available(
            Layer::Cgroups,
            format!(
                "{} (memory, pids and cpu caps enforceable)",
                driver.describe()
            ),
        ),
        Err(CgroupError::NotEnforceable { reason, remedy, .. }) => {
            LayerStatus::missing(Layer::Cgroups, reason, remedy)
        }
        Err(other) => LayerStatus::missing(
            Layer::Cgroups,
            other.to_string(),
            crate::cgroup::DELEGATE_REMEDY.to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::NoCgroups;

    #[test]
    fn a_host_without_cgroups_reports_the_delegation_remedy() {
        let status = status(&NoCgroups);
        assert!(!status.available);
        assert_eq!(status.detail, "no cgroup filesystem is mounted");
        assert!(
            status
                .remedy
                .is_some_and(|r| r.contains("systemd-run --user --scope"))
        );
    }
}
