//! The resource caps a session may request, their validation and the values written for them.

use std::fmt;

use super::{CgroupError, Controller};

/// Limits for one session; `None` means "not requested", and nothing is enforced for it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Caps {
    /// Memory in bytes, swap included (a process may not swap beyond it).
    pub memory: Option<u64>,
    /// Maximum number of processes and threads.
    pub pids: Option<u64>,
    /// CPU time as a number of CPUs (`1.5` = one and a half CPUs' worth per period).
    pub cpus: Option<f64>,
}

/// One kind of cap, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    Memory,
    Pids,
    Cpus,
}

impl Cap {
    pub fn controller(self) -> Controller {
        match self {
            Cap::Memory => Controller::Memory,
            Cap::Pids => Controller::Pids,
            Cap::Cpus => Controller::Cpu,
        }
    }
}

impl fmt::Display for Cap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cap::Memory => "memory",
            Cap::Pids => "pids",
            Cap::Cpus => "cpus",
        })
    }
}

/// The CFS period cordon uses for CPU caps, in microseconds (the kernel's default).
pub(crate) const CPU_PERIOD_US: u64 = 100_000;
/// The smallest quota the kernel accepts, in microseconds.
const CPU_MIN_QUOTA_US: u64 = 1_000;
/// The smallest memory cap: below this even a shell cannot start.
const MEMORY_MIN: u64 = 1 << 20;

impl Caps {
    /// True when no cap is requested: then no cgroup is needed at all.
    pub fn is_empty(&self) -> bool {
        self.requested().is_empty()
    }

    /// The requested caps, in a fixed order (memory, pids, cpus).
    pub fn requested(&self) -> Vec<Cap> {
        let mut caps = Vec::new();
        if self.memory.is_some() {
            caps.push(Cap::Memory);
        }
        if self.pids.is_some() {
            caps.push(Cap::Pids);
        }
        if self.cpus.is_some() {
            caps.push(Cap::Cpus);
        }
        caps
    }

    /// The controllers the requested caps need.
    pub fn controllers(&self) -> Vec<Controller> {
        self.requested().into_iter().map(Cap::controller).collect()
    }

    /// Checks every requested value is one the kernel can enforce meaningfully.
    pub fn validate(&self) -> Result<(), CgroupError> {
        if let Some(memory) = self.memory
            && memory < MEMORY_MIN
        {
            return Err(CgroupError::InvalidCap {
                cap: Cap::Memory,
                reason: format!("{memory} bytes is below the minimum of 1M"),
            });
        }
        if self.pids == Some(0) {
            return Err(CgroupError::InvalidCap {
                cap: Cap::Pids,
                reason: "0 processes cannot run anything; use 1 or more".to_owned(),
            });
        }
        if self.cpus.is_some() && self.cpu_quota_us().is_none() {
            return Err(CgroupError::InvalidCap {
                cap: Cap::Cpus,
                reason: format!(
                    "`{}` is not a number of CPUs from 0.01 up",
                    self.cpus.unwrap_or_default()
                ),
            });
        }
        Ok(())
    }

    /// The CPU quota per [`CPU_PERIOD_US`], when `cpus` is a usable value.
    pub(crate) fn cpu_quota_us(&self) -> Option<u64> {
        let cpus = self.cpus?;
        if !cpus.is_finite() || cpus <= 0.0 || cpus > 1_000_000.0 {
            return None;
        }
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "cpus is finite, positive and at most 1e6, so the product fits a u64"
        )]
        let quota = (cpus * CPU_PERIOD_US as f64).round() as u64;
        (quota >= CPU_MIN_QUOTA_US).then_some(quota)
    }

    /// `memory cap 512 MiB`-style description of the memory cap, for OOM messages.
    pub fn describe_memory(&self) -> Option<String> {
        self.memory
            .map(|bytes| format!("memory cap {}", format_size(bytes)))
    }
}

/// Renders a byte count with the largest binary unit that divides it exactly.
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
}

/// A size that [`parse_size`] rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid size `{text}`: write a whole number with an optional binary unit, e.g. `512M`, `2G` \
     or `2Gi`"
)]
pub struct SizeError {
    pub text: String,
}

/// Parses a size as DESIGN §2 defines it: a whole number of bytes, optionally followed by `K`,
/// `M`, `G` or `T` (binary: `2G` = 2 GiB) or `Ki`, `Mi`, `Gi`, `Ti`.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let error = || SizeError {
        text: text.to_owned(),
    };
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    if number.is_empty() {
        return Err(error());
    }
    let number: u64 = number.parse().map_err(|_| error())?;
    let shift = match unit {
        "" => 0,
        "K" | "Ki" => 10,
        "M" | "Mi" => 20,
        "G" | "Gi" => 30,
        "T" | "Ti" => 40,
        _ => return Err(error()),
    };
    number.checked_mul(1 << shift).ok_or_else(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Option<u64>) {
        assert_eq!(parse_size(text).ok(), expected, "size {text:?}");
    }

    #[test]
    fn sizes_use_binary_units() {
        check("0", Some(0));
        check("4096", Some(4096));
        check("512K", Some(512 << 10));
        check("2G", Some(2 << 30));
        check("2Gi", Some(2 << 30));
        check("3Mi", Some(3 << 20));
        check("1T", Some(1 << 40));
        check("2g", None);
        check("2GB", None);
        check("1.5G", None);
        check("-1", None);
        check("G", None);
        check("", None);
        check(" 2G", None);
        check("99999999999999999999", None);
        check("17179869184G", None);
    }

    #[test]
    fn size_error_shows_the_accepted_forms() {
        assert_eq!(
            parse_size("2GB").unwrap_err().to_string(),
            "invalid size `2GB`: write a whole number with an optional binary unit, e.g. `512M`, \
             `2G` or `2Gi`"
        );
    }

    fn check_caps(caps: Caps, error: Option<&str>) {
        let actual = caps.validate().err().map(|e| e.to_string());
        assert_eq!(actual.as_deref(), error, "{caps:?}");
    }

    #[test]
    fn cap_values_are_validated() {
        check_caps(Caps::default(), None);
        check_caps(
            Caps {
                memory: Some(1 << 20),
                pids: Some(1),
                cpus: Some(0.01),
            },
            None,
        );
        check_caps(
            Caps {
                memory: Some(1000),
                ..Caps::default()
            },
            Some("invalid memory cap: 1000 bytes is below the minimum of 1M"),
        );
        check_caps(
            Caps {
                pids: Some(0),
                ..Caps::default()
            },
            Some("invalid pids cap: 0 processes cannot run anything; use 1 or more"),
        );
        for cpus in [0.0, -1.0, 0.001, f64::NAN, f64::INFINITY] {
            let caps = Caps {
                cpus: Some(cpus),
                ..Caps::default()
            };
            let err = caps.validate().unwrap_err().to_string();
            assert!(err.starts_with("invalid cpus cap: `"), "{err}");
            assert!(
                err.ends_with("` is not a number of CPUs from 0.01 up"),
                "{err}"
            );
        }
    }

    #[test]
    fn cpu_quota_is_per_hundred_milliseconds() {
        let quota = |cpus| {
            Caps {
                cpus: Some(cpus),
                ..Caps::default()
            }
            .cpu_quota_us()
        };
        assert_eq!(quota(1.0), Some(100_000));
        assert_eq!(quota(0.5), Some(50_000));
        assert_eq!(quota(2.25), Some(225_000));
        assert_eq!(quota(0.01), Some(1_000));
        assert_eq!(quota(0.009), None);
    }

    #[test]
    fn requested_caps_and_sizes_describe_themselves() {
        let caps = Caps {
            memory: Some(512 << 20),
            pids: None,
            cpus: Some(1.0),
        };
        assert_eq!(caps.requested(), [Cap::Memory, Cap::Cpus]);
        assert_eq!(caps.controllers(), [Controller::Memory, Controller::Cpu]);
        assert!(!caps.is_empty());
        assert!(Caps::default().is_empty());
        assert_eq!(
            caps.describe_memory().as_deref(),
            Some("memory cap 512 MiB")
        );
        assert_eq!(format_size(3 << 30), "3 GiB");
        assert_eq!(format_size(1000), "1000 bytes");
        assert_eq!(format_size(1536), "1536 bytes");
    }
}
