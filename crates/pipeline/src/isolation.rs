//! The pipeline-level `isolation` block: resource caps, extra read-only paths, hidden paths.

use std::fmt;
use std::num::NonZeroU64;

use crate::{ByteSize, RelPath};

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Isolation {
    pub memory: Option<ByteSize>,
    pub pids: Option<NonZeroU64>,
    pub cpus: Option<Cpus>,
    pub tmp_size: Option<ByteSize>,
    /// A step attempt's stored output (`isolation.output_limit`); `None` is [`DEFAULT_OUTPUT_LIMIT`].
    pub output_limit: Option<ByteSize>,
    /// Extra host paths exposed read-only at their host path.
    pub read_only: Vec<HostPath>,
    /// Workspace-relative paths masked inside the sandbox.
    pub hide: Vec<RelPath>,
    pub allow_git_mutations: bool,
    /// Host toolchains exposed read-only in every sandbox (`rust`, `python`, `node`, `go`), in
    /// the order written, each once.
    pub toolchains: Vec<String>,
    /// Persistent download caches mounted in every sandbox (`cargo`, `pip`, `npm`, `go`, `uv`),
    /// each once.
    pub caches: Vec<String>,
    /// The most one cache may hold (`isolation.cache_limit`); `None` is [`DEFAULT_CACHE_LIMIT`].
    pub cache_limit: Option<ByteSize>,
    /// The environment image every sandboxed step runs on unless it names its own (DESIGN §14).
    pub image: Option<cordon_protocol::ImageRef>,
    /// Each session on an image gets a throwaway writable layer over it.
    pub image_writable: bool,
}

/// The toolchains `isolation.toolchains` names (DESIGN §11).
pub const TOOLCHAINS: [&str; 4] = ["rust", "python", "node", "go"];

/// The caches `isolation.caches` names (DESIGN §11).
pub const CACHES: [&str; 5] = ["cargo", "pip", "npm", "go", "uv"];

/// How much one cache may hold when `cache_limit` is not set (4 GiB).
pub const DEFAULT_CACHE_LIMIT: u64 = 4 << 30;

/// How much output one step attempt stores when `output_limit` is not set (16 MiB).
pub const DEFAULT_OUTPUT_LIMIT: u64 = 16 << 20;

impl Isolation {
    /// The bytes of output a step attempt stores; past it, output is counted, not stored.
    pub fn output_limit_bytes(&self) -> u64 {
        self.output_limit
            .map_or(DEFAULT_OUTPUT_LIMIT, ByteSize::bytes)
    }

    /// The bytes one cache may hold; over it, it is emptied when a run opens it.
    pub fn cache_limit_bytes(&self) -> u64 {
        self.cache_limit
            .map_or(DEFAULT_CACHE_LIMIT, ByteSize::bytes)
    }
}

/// A CPU cap in thousandths of a CPU (`cpus: 1.5` is 1500), so it compares exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cpus(NonZeroU64);

impl Cpus {
    pub fn from_millis(millis: NonZeroU64) -> Cpus {
        Cpus(millis)
    }

    pub fn millis(self) -> u64 {
        self.0.get()
    }

    pub fn as_f64(self) -> f64 {
        // Caps are small; the conversion is exact for every value a machine can have.
        self.0.get() as f64 / 1000.0
    }

    /// Parses `2`, `0.5`, `1.25` (at most three decimals, greater than 0).
    pub fn parse(text: &str) -> Option<Cpus> {
        let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
        if whole.is_empty() && frac.is_empty() {
            return None;
        }
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) || !digits(frac) || frac.len() > 3 || whole.len() > 6 {
            return None;
        }
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        let mut frac_millis: u64 = if frac.is_empty() {
            0
        } else {
            frac.parse().ok()?
        };
        for _ in frac.len()..3 {
            frac_millis *= 10;
        }
        NonZeroU64::new(whole * 1000 + frac_millis).map(Cpus)
    }
}

impl fmt::Display for Cpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (whole, frac) = (self.millis() / 1000, self.millis() % 1000);
        if frac == 0 {
            write!(f, "{whole}")
        } else {
            let frac = format!("{frac:03}");
            write!(f, "{whole}.{}", frac.trim_end_matches('0'))
        }
    }
}

/// A host path for `read_only`: absolute, or `~/…` under the invoking user's home.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostPath {
    Absolute(String),
    /// The part after `~/`.
    Home(String),
}

impl HostPath {
    pub fn parse(text: &str) -> Option<HostPath> {
        if text.contains('\0') || text.split('/').any(|c| c == "..") {
            return None;
        }
        if let Some(rest) = text.strip_prefix("~/") {
            return (!rest.is_empty()).then(|| HostPath::Home(rest.to_owned()));
        }
        text.starts_with('/')
            .then(|| HostPath::Absolute(text.to_owned()))
    }
}

impl fmt::Display for HostPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPath::Absolute(p) => f.write_str(p),
            HostPath::Home(p) => write!(f, "~/{p}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Option<&str>) {
        assert_eq!(
            Cpus::parse(text).map(|c| c.to_string()).as_deref(),
            expected,
            "{text:?}"
        );
    }

    #[test]
    fn cpu_caps_keep_three_decimals() {
        check("2", Some("2"));
        check("0.5", Some("0.5"));
        check(".25", Some("0.25"));
        check("1.125", Some("1.125"));
        check("1.1250", None);
        check("0", None);
        check("0.0", None);
        check("-1", None);
        check("1e3", None);
        check(".", None);
    }
}
