//! The host's hosts file (`/etc/hosts`), read by cordon itself.
//!
//! The system resolver asks the C library for fully qualified names (`db.`) so that `resolv.conf`
//! search domains never apply, and glibc's hosts-file lookup matches names without the dot — so
//! without this, entries an administrator put in `/etc/hosts` would never answer. cordon reads the
//! file itself, before DNS (the order of the usual `hosts: files dns`), and matches a name exactly
//! (ASCII case-insensitive, one trailing dot ignored); search domains still never apply. What it
//! answers is classified like any DNS answer: a hosts entry pointing at a private address still
//! needs `allow_private`.
//!
//! The file belongs to the host's administrator, not to the sandbox, but it is still read with a
//! bound: at most [`MAX_HOSTS_FILE`] bytes, and lines that do not parse are skipped as glibc skips
//! them.

use std::io::Read as _;
use std::net::IpAddr;
use std::path::Path;

use crate::{HostName, canonical_ip};

/// The most bytes of the hosts file read; the rest is ignored.
pub const MAX_HOSTS_FILE: u64 = 4 << 20;

/// The addresses `text` (hosts-file syntax) gives `name`, in file order without duplicates.
pub fn lookup(text: &str, name: &HostName) -> Vec<IpAddr> {
    let mut found = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        let mut fields = line.split_ascii_whitespace();
        let Some(Ok(ip)) = fields.next().map(str::parse::<IpAddr>) else {
            continue;
        };
        let matches = fields.any(|alias| {
            let alias = alias.strip_suffix('.').unwrap_or(alias);
            alias.eq_ignore_ascii_case(name.as_str())
        });
        let ip = canonical_ip(ip);
        if matches && !found.contains(&ip) {
            found.push(ip);
        }
    }
    found
}

/// Reads at most [`MAX_HOSTS_FILE`] bytes of the hosts file at `path`; a missing or unreadable
/// file is an empty one (the lookup goes on to DNS, as the C library's would).
pub fn read(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(file) = std::fs::File::open(path) {
        let mut bytes = Vec::new();
        if file.take(MAX_HOSTS_FILE).read_to_end(&mut bytes).is_ok() {
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, name: &str, expected: &[&str]) {
        let name = HostName::parse(name).unwrap();
        let expected: Vec<IpAddr> = expected.iter().map(|ip| ip.parse().unwrap()).collect();
        assert_eq!(lookup(text, &name), expected, "{name} in {text:?}");
    }

    #[test]
    fn names_are_matched_exactly_ignoring_case_comments_and_one_trailing_dot() {
        let file = "127.0.0.1 localhost\n\
                    # 10.0.0.9 commented.example\n\
                    10.0.0.5  db.example.test db   # the database\n\
                    10.0.0.6\tDB.Example.Test.\n\
                    fd00::5 db.example.test\n\
                    ::ffff:10.0.0.7 mapped.example.test\n\
                    not-an-ip broken.example.test\n\
                    10.0.0.5 db.example.test\n";
        for (name, expected) in [
            ("db.example.test", &["10.0.0.5", "10.0.0.6", "fd00::5"][..]),
            ("DB.EXAMPLE.TEST", &["10.0.0.5", "10.0.0.6", "fd00::5"]),
            ("db", &["10.0.0.5"]),
            ("example.test", &[]),
            ("commented.example", &[]),
            ("broken.example.test", &[]),
            ("mapped.example.test", &["10.0.0.7"]),
            ("localhost", &["127.0.0.1"]),
        ] {
            check(file, name, expected);
        }
    }

    #[test]
    fn a_missing_hosts_file_reads_as_empty() {
        assert_eq!(read(Path::new("/nonexistent/cordon/hosts")), "");
    }
}
