//! Statuses of seccomp and `no_new_privs`, from system calls that ask the kernel without installing
//! anything.

use super::namespaces::describe;
use super::{Layer, LayerStatus};

#[derive(Debug, Clone)]
pub(crate) struct FilterFacts {
    /// `SECCOMP_GET_ACTION_AVAIL` for `SECCOMP_RET_ERRNO` and `SECCOMP_RET_KILL_PROCESS`, the two
    /// actions the filter uses.
    pub errno_action: Result<(), i32>,
    pub kill_process_action: Result<(), i32>,
    /// `PR_GET_NO_NEW_PRIVS`.
    pub no_new_privs: Result<bool, i32>,
}

impl FilterFacts {
    pub(crate) fn detect() -> FilterFacts {
        use crate::sys::probe::{no_new_privs, seccomp_action_available};
        FilterFacts {
            errno_action: seccomp_action_available(libc::SECCOMP_RET_ERRNO),
            kill_process_action: seccomp_action_available(libc::SECCOMP_RET_KILL_PROCESS),
            no_new_privs: no_new_privs(),
        }
    }
}

pub(crate) fn seccomp(facts: &FilterFacts) -> LayerStatus {
    match facts.errno_action.and(facts.kill_process_action) {
        Ok(()) => LayerStatus::available(
            Layer::Seccomp,
            "filter mode with SECCOMP_RET_ERRNO and SECCOMP_RET_KILL_PROCESS".to_owned(),
        ),
        Err(errno) => {
            let (detail, remedy) = match errno {
                libc::ENOSYS => (
                    "the kernel has no seccomp".to_owned(),
                    "use a kernel built with CONFIG_SECCOMP_FILTER=y",
                ),
                _ => (
                    format!("seccomp filter mode is unavailable: {}", describe(errno)),
                    "use Linux 4.14 or later built with CONFIG_SECCOMP_FILTER=y",
                ),
            };
            LayerStatus::missing(Layer::Seccomp, detail, remedy.to_owned())
        }
    }
}

pub(crate) fn no_new_privs(facts: &FilterFacts) -> LayerStatus {
    match facts.no_new_privs {
        Ok(set) => LayerStatus::available(
            Layer::NoNewPrivs,
            format!(
                "supported (already set on cordon: {})",
                if set { "yes" } else { "no" }
            ),
        ),
        Err(errno) => LayerStatus::missing(
            Layer::NoNewPrivs,
            format!("PR_GET_NO_NEW_PRIVS failed: {}", describe(errno)),
            "no_new_privs needs Linux 3.5 or later".to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(facts: FilterFacts, seccomp_remedy: Option<&str>, nnp_remedy: Option<&str>) {
        for (status, expected) in [
            (seccomp(&facts), seccomp_remedy),
            (no_new_privs(&facts), nnp_remedy),
        ] {
            assert_eq!(status.available, expected.is_none(), "{status:?}");
            match (status.remedy.as_deref(), expected) {
                (Some(actual), Some(part)) => assert!(actual.contains(part), "{status:?}"),
                (None, None) => {}
                _ => panic!("unexpected remedy in {status:?}"),
            }
        }
    }

    #[test]
    fn filter_layers_follow_the_kernel_answers() {
        let ok = FilterFacts {
            errno_action: Ok(()),
            kill_process_action: Ok(()),
            no_new_privs: Ok(false),
        };
        check(ok.clone(), None, None);
        check(
            FilterFacts {
                errno_action: Err(libc::ENOSYS),
                ..ok.clone()
            },
            Some("CONFIG_SECCOMP_FILTER=y"),
            None,
        );
        check(
            FilterFacts {
                kill_process_action: Err(libc::EOPNOTSUPP),
                ..ok.clone()
            },
            Some("Linux 4.14 or later"),
            None,
        );
        check(
            FilterFacts {
                no_new_privs: Err(libc::EINVAL),
                ..ok
            },
            None,
            Some("Linux 3.5"),
        );
    }
}
