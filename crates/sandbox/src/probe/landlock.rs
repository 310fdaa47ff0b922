//! Statuses of Landlock and Landlock scopes, from the ABI version the kernel reports.

use super::kernel::KernelVersion;
use super::namespaces::describe;
use super::{Layer, LayerStatus};

/// The first ABI with abstract-unix-socket and signal scoping.
pub const SCOPES_ABI: u32 = 6;

/// The Landlock ABI version or the errno `landlock_create_ruleset` answered.
pub(crate) fn statuses(abi: Result<u32, i32>, kernel: Option<KernelVersion>) -> [LayerStatus; 2] {
    let running = kernel.map_or_else(|| "this kernel".to_owned(), |k| format!("Linux {k}"));
    match abi {
        Ok(abi) => [
            LayerStatus::available(Layer::Landlock, format!("ABI {abi}")),
            if abi >= SCOPES_ABI {
                LayerStatus::available(
                    Layer::LandlockScopes,
                    format!("ABI {abi}: abstract unix sockets and signals are scoped"),
                )
            } else {
                LayerStatus::missing(
                    Layer::LandlockScopes,
                    format!("ABI {abi} has no scopes (they need ABI {SCOPES_ABI})"),
                    "Landlock scopes need Linux 6.12 or later; cordon runs without them".to_owned(),
                )
            },
        ],
        Err(errno) => {
            let (detail, remedy) = if errno == libc::EOPNOTSUPP {
                (
                    format!("built into {running} but not enabled at boot"),
                    "add `landlock` to the `lsm=` kernel boot parameter, keeping the modules \
                     listed in /sys/kernel/security/lsm (e.g. `lsm=landlock,lockdown,yama,\
                     integrity,apparmor,bpf`), and reboot"
                        .to_owned(),
                )
            } else {
                (
                    format!("{running} has no Landlock ({})", describe(errno)),
                    "Landlock needs Linux 5.13 or later built with CONFIG_SECURITY_LANDLOCK=y \
                     and `landlock` in the `lsm=` boot parameter; upgrade the kernel"
                        .to_owned(),
                )
            };
            [
                LayerStatus::missing(Layer::Landlock, detail, remedy),
                LayerStatus::missing(
                    Layer::LandlockScopes,
                    "Landlock is unavailable".to_owned(),
                    "fix landlock first".to_owned(),
                ),
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(abi: Result<u32, i32>, landlock: Result<&str, &str>, scopes: Result<&str, &str>) {
        let kernel = Some(KernelVersion { major: 6, minor: 1 });
        let [l, s] = statuses(abi, kernel);
        for (status, expected) in [(l, landlock), (s, scopes)] {
            match expected {
                Ok(detail) => {
                    assert!(status.available && status.remedy.is_none(), "{status:?}");
                    assert_eq!(status.detail, detail);
                }
                Err(remedy) => {
                    assert!(!status.available, "{status:?}");
                    assert!(status.remedy.as_deref().is_some_and(|r| r.contains(remedy)));
                }
            }
        }
    }

    #[test]
    fn landlock_abi_decides_both_layers() {
        check(
            Ok(7),
            Ok("ABI 7"),
            Ok("ABI 7: abstract unix sockets and signals are scoped"),
        );
        check(
            Ok(6),
            Ok("ABI 6"),
            Ok("ABI 6: abstract unix sockets and signals are scoped"),
        );
        check(Ok(5), Ok("ABI 5"), Err("Linux 6.12"));
        check(Ok(1), Ok("ABI 1"), Err("Linux 6.12"));
        check(
            Err(libc::EOPNOTSUPP),
            Err("`lsm=` kernel boot parameter"),
            Err("fix landlock"),
        );
        check(
            Err(libc::ENOSYS),
            Err("Linux 5.13 or later"),
            Err("fix landlock"),
        );
    }
}
