//! The running kernel's version, read from `/proc/sys/kernel/osrelease`, for details and remedies.

use std::fmt;

/// `major.minor` of a kernel release such as `6.18.44-generic`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelVersion {
    pub major: u32,
    pub minor: u32,
}

impl KernelVersion {
    /// Parses the leading `MAJOR.MINOR` of a release string; `None` when it has none.
    pub fn parse(release: &str) -> Option<KernelVersion> {
        let mut parts = release.trim().splitn(3, ['.', '-']);
        let major = parts.next()?.parse().ok()?;
        let minor_text = parts.next()?;
        let digits = minor_text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(minor_text.len());
        let minor = minor_text[..digits].parse().ok()?;
        Some(KernelVersion { major, minor })
    }

    /// The running kernel, if its release string can be read and parsed.
    pub fn running() -> Option<KernelVersion> {
        // A release is at most 64 bytes (`__NEW_UTS_LEN`) plus a newline.
        let release = super::namespaces::read_small("/proc/sys/kernel/osrelease")?;
        KernelVersion::parse(&release)
    }

    pub fn at_least(self, major: u32, minor: u32) -> bool {
        self >= KernelVersion { major, minor }
    }
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(release: &str, expected: Option<(u32, u32)>) {
        let actual = KernelVersion::parse(release).map(|v| (v.major, v.minor));
        assert_eq!(actual, expected, "release {release:?}");
    }

    #[test]
    fn kernel_releases_parse_to_major_and_minor() {
        check("6.18.44-fc-v769\n", Some((6, 18)));
        check("5.4.0-150-generic", Some((5, 4)));
        check("5.12", Some((5, 12)));
        check("6.1rc2", Some((6, 1)));
        check("6", None);
        check("linux", None);
        check("", None);
    }

    #[test]
    fn versions_compare_by_major_then_minor() {
        let v = KernelVersion {
            major: 5,
            minor: 12,
        };
        assert!(v.at_least(5, 12));
        assert!(v.at_least(4, 20));
        assert!(!v.at_least(5, 13));
        assert!(!v.at_least(6, 0));
    }
}
