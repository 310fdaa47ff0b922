//! The environment a sandboxed process starts with: built from scratch, never inherited, so host
//! credentials (`AWS_*`, `SSH_AUTH_SOCK`, tokens, `LD_PRELOAD`, ...) cannot leak in by accident.
//!
//! Pure data: [`build`] takes everything it needs in [`EnvInput`] and reads nothing itself.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// `PATH` when the step does not set one (DESIGN §4).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The proxy's address inside a session (Appendix A).
pub const PROXY_ADDR: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 3128));

/// The model lane's address inside a session (Appendix A).
pub const LANE_ADDR: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 3129));

/// The placeholder API key a model-lane step sees; the lane swaps in the real key host-side.
pub const LANE_DUMMY_KEY: &str = "cordon-lane-dummy";

/// Host variables copied into the sandbox when set: harmless and needed for sane output — the
/// locale (`LANG` and glibc's `LC_*` categories), the terminal and the time zone.
const COPIED_FROM_HOST: [&str; 16] = [
    "LANG",
    "TERM",
    "TZ",
    "LC_ALL",
    "LC_ADDRESS",
    "LC_COLLATE",
    "LC_CTYPE",
    "LC_IDENTIFICATION",
    "LC_MEASUREMENT",
    "LC_MESSAGES",
    "LC_MONETARY",
    "LC_NAME",
    "LC_NUMERIC",
    "LC_PAPER",
    "LC_TELEPHONE",
    "LC_TIME",
];

/// Where Python keeps bytecode inside a sandbox: below the session's `/tmp`, a fresh directory
/// per command (`PYTHONPYCACHEPREFIX`), so no `__pycache__` lands in the workspace (or a commit)
/// and no command runs bytecode an earlier one compiled from a file since rewritten within the
/// same second and size.
pub const PYCACHE_DIR: &str = "/tmp/.cordon-pycache";

/// Everything the sandbox environment is made of.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvInput {
    /// The host's environment (`std::env::vars_os()`); only the locale, `TERM` and `TZ` are read
    /// from it.
    pub host: Vec<(OsString, OsString)>,
    /// The sandbox's uid: `XDG_RUNTIME_DIR` is `/run/user/<uid>`.
    pub uid: u32,
    /// The command's number in its session, for its fresh `PYTHONPYCACHEPREFIX`.
    pub exec: u64,
    /// The invoking user's home path (a fresh tmpfs inside the sandbox).
    pub home: PathBuf,
    /// The invoking user's name, for `USER` and `LOGNAME`.
    pub user: OsString,
    /// The session's egress proxy, when the step has network rules ([`PROXY_ADDR`]).
    pub proxy: Option<SocketAddr>,
    /// The session's model lane, when the step has `model_lane: true` ([`LANE_ADDR`]).
    pub model_lane: Option<SocketAddr>,
    /// The operator's `[env] pass` variables with their host values: after the host copies,
    /// before what the step declares.
    pub passed: Vec<(OsString, OsString)>,
    /// What the step declares (`env:`, `-e KEY=VALUE`, resolved secrets): it overrides
    /// everything above, `PATH` included.
    pub declared: Vec<(OsString, OsString)>,
    /// Directories put in front of `PATH` after the step's variables (exposed toolchains).
    pub path_prefix: Vec<PathBuf>,
    /// `PATH` before the step's variables instead of [`DEFAULT_PATH`]: an environment image's.
    pub base_path: Option<OsString>,
    /// cordon's own variables of exposed toolchains (`RUSTUP_HOME`, `CARGO_HOME`, …), applied
    /// last: they always win.
    pub forced: Vec<(OsString, OsString)>,
}

/// The complete environment for a sandboxed process, sorted by name.
pub fn build(input: &EnvInput) -> Vec<(OsString, OsString)> {
    let mut env = BTreeMap::<OsString, OsString>::new();
    let mut set = |key: &str, value: OsString| {
        env.insert(OsString::from(key), value);
    };
    let base_path = input
        .base_path
        .clone()
        .unwrap_or_else(|| DEFAULT_PATH.into());
    set("PATH", base_path.clone());
    set("HOME", input.home.clone().into_os_string());
    set("USER", input.user.clone());
    set("LOGNAME", input.user.clone());
    set("XDG_RUNTIME_DIR", runtime_dir(input.uid).into_os_string());
    set(
        "PYTHONPYCACHEPREFIX",
        format!("{PYCACHE_DIR}/{}", input.exec).into(),
    );
    for (key, value) in &input.host {
        if let Some(name) = COPIED_FROM_HOST.iter().find(|name| OsStr::new(name) == key) {
            set(name, value.clone());
        }
    }
    for (key, value) in &input.passed {
        set(&key.to_string_lossy(), value.clone());
    }
    if let Some(proxy) = input.proxy {
        let url = OsString::from(format!("http://{proxy}"));
        for key in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            set(key, url.clone());
        }
        for key in ["NO_PROXY", "no_proxy"] {
            set(key, "localhost,127.0.0.1,::1".into());
        }
    }
    if let Some(lane) = input.model_lane {
        set("OPENAI_BASE_URL", format!("http://{lane}/v1").into());
        set("ANTHROPIC_BASE_URL", format!("http://{lane}").into());
        set("OPENAI_API_KEY", LANE_DUMMY_KEY.into());
        set("ANTHROPIC_API_KEY", LANE_DUMMY_KEY.into());
    }
    for (key, value) in &input.declared {
        env.insert(key.clone(), value.clone());
    }
    if !input.path_prefix.is_empty() {
        let mut path = OsString::new();
        for dir in &input.path_prefix {
            path.push(dir);
            path.push(":");
        }
        path.push(env.get(OsStr::new("PATH")).unwrap_or(&base_path));
        env.insert("PATH".into(), path);
    }
    for (key, value) in &input.forced {
        env.insert(key.clone(), value.clone());
    }
    env.into_iter().collect()
}

/// `[env] pass` variables with their values, and the files among the values.
pub type Passed = (Vec<(OsString, OsString)>, Vec<PathBuf>);

/// The operator's `[env] pass` names with the host's values (`var`), and the absolute paths
/// among those values that name a regular file: exposed read-only at that path, so a CA bundle
/// named by `SSL_CERT_FILE` is there to read. A name the host does not set is left out.
pub fn passed(names: &[&str], var: &dyn Fn(&str) -> Option<OsString>) -> Passed {
    let mut values = Vec::new();
    let mut files = Vec::new();
    for name in names {
        let Some(value) = var(name) else {
            continue;
        };
        let path = PathBuf::from(&value);
        if path.is_absolute() && path.is_file() {
            files.push(path);
        }
        values.push((OsString::from(name), value));
    }
    (values, files)
}

/// The session's runtime directory, `/run/user/<uid>` (`XDG_RUNTIME_DIR`).
pub fn runtime_dir(uid: u32) -> PathBuf {
    PathBuf::from(format!("/run/user/{uid}"))
}

/// A `KEY=VALUE` assignment that was not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AssignmentError {
    #[error("`{0}` is not KEY=VALUE; write it as NAME=value, for example `RUST_LOG=debug`")]
    NoEquals(String),
    #[error(
        "`{0}` is not a valid variable name; use letters, digits and `_`, not starting with a digit"
    )]
    BadName(String),
    #[error("the value of `{0}` contains a NUL byte, which no environment can hold")]
    NulInValue(String),
}

/// Parses one `-e KEY=VALUE`. Names are portable shell names (`[A-Za-z_][A-Za-z0-9_]*`); the value
/// is everything after the first `=` and may be empty.
pub fn parse_assignment(text: &OsStr) -> Result<(OsString, OsString), AssignmentError> {
    let bytes = text.as_bytes();
    let lossy = || text.to_string_lossy().into_owned();
    let Some(equals) = bytes.iter().position(|&byte| byte == b'=') else {
        return Err(AssignmentError::NoEquals(lossy()));
    };
    let (name, value) = (&bytes[..equals], &bytes[equals + 1..]);
    let valid_name = name
        .first()
        .is_some_and(|&first| first == b'_' || first.is_ascii_alphabetic())
        && name
            .iter()
            .all(|&byte| byte == b'_' || byte.is_ascii_alphanumeric());
    if !valid_name {
        return Err(AssignmentError::BadName(
            String::from_utf8_lossy(name).into_owned(),
        ));
    }
    if value.contains(&0) {
        return Err(AssignmentError::NulInValue(
            String::from_utf8_lossy(name).into_owned(),
        ));
    }
    Ok((
        OsStr::from_bytes(name).to_owned(),
        OsStr::from_bytes(value).to_owned(),
    ))
}

#[cfg(test)]
mod tests;
