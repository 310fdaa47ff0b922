//! The operator policy file (DESIGN §5): TOML outside the workspace that pipelines never widen.
//! Parsed into a spanned table so every problem is reported at once with line:col.

use std::ffi::OsStr;
use std::io;
use std::net::IpAddr;
use std::path::PathBuf;

use cordon_egress::{Cidr, HostName, Pattern, PatternList};
use toml::de::{DeTable, DeValue};

use crate::decode::closest;
use crate::diagnostic::{Diagnostics, FileSink, Position, Sink};
use crate::load::Files;

type Spanned<T> = toml::Spanned<T>;

/// The validated operator policy. An absent file is `OperatorPolicy::default()`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct OperatorPolicy {
    /// Overrides every pipeline allow and every grant; may be `*`.
    pub deny: Vec<Pattern>,
    /// Private ranges that allowed names (and `ip:` rules) may reach.
    pub allow_private: Vec<Cidr>,
    /// Static answers for the proxy's resolver, sorted by name.
    pub resolve: Vec<(HostName, Vec<IpAddr>)>,
    pub grants: GrantBounds,
    pub limits: Limits,
    /// Host variables copied into every sandbox (`[env] pass`), in the order written, each once.
    pub env_pass: Vec<crate::EnvName>,
    /// Root filesystem directories pipelines may name as `image` (`[images] paths`): absolute,
    /// each once. Pipelines otherwise name images from the store only.
    pub image_paths: Vec<String>,
    /// `[delivery]`: where `deliver` and `report` may send the run's token.
    pub delivery: DeliveryBounds,
    /// `[kubernetes]`: the pod every task of `cordon batch --backend kubernetes` runs in.
    pub kubernetes: KubernetesPod,
}

/// `[kubernetes]` (DESIGN §16): what the operator decides about a batch task's pod. The pod's
/// walls that do not vary (no host user namespace, `procMount: Unmasked`, AppArmor unconfined,
/// every capability dropped, no service account token) are not settings.
///
/// `image` holds cordon and git at `program`; `seccomp_profile` is a `Localhost` profile the
/// nodes carry under the kubelet's seccomp directory that permits the sandbox's namespaces (a
/// node prerequisite); `egress` the only networks the pod may reach (the store, the model
/// providers, what the pipelines' allowlists name), DNS to the cluster's resolver aside;
/// `state_claim` a PersistentVolumeClaim holding the workers' state directory (else each pod's
/// own volume); `store_password_secret` a Secret whose `password` key is the store's password;
/// `env_secrets` Secrets whose keys become the worker's environment (the pipelines' `env:`
/// secret references).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubernetesPod {
    pub namespace: Option<String>,
    pub image: Option<String>,
    pub program: String,
    pub seccomp_profile: Option<String>,
    pub egress: Vec<Cidr>,
    pub user: u32,
    pub state_claim: Option<String>,
    pub store_password_secret: Option<String>,
    pub env_secrets: Vec<String>,
}

impl Default for KubernetesPod {
    fn default() -> KubernetesPod {
        KubernetesPod {
            namespace: None,
            image: None,
            program: "/usr/local/bin/cordon".to_owned(),
            seccomp_profile: None,
            egress: Vec::new(),
            user: 1000,
            state_claim: None,
            store_password_secret: None,
            env_secrets: Vec::new(),
        }
    }
}

/// `[delivery]` (DESIGN §15): host patterns of §5 (`ip:` rules included). `allow` bounds every
/// destination of `deliver` and `report`, nothing allowed when empty; `allow_insecure` lets the
/// ones it also matches be reached over plain `http://` (local forges).
///
/// The rest bound what one delivery may take on the host: `git_memory` the data memory of the
/// host's git and the helpers it starts (each, `RLIMIT_DATA`), `git_timeout` one git command's
/// seconds (its whole process group is stopped then), `api_timeout` the seconds one forge API
/// call may take from its request to the last byte of its answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryBounds {
    pub allow: Vec<Pattern>,
    pub allow_insecure: Vec<Pattern>,
    pub git_memory: crate::ByteSize,
    pub git_timeout: u32,
    pub api_timeout: u32,
}

impl Default for DeliveryBounds {
    fn default() -> DeliveryBounds {
        DeliveryBounds {
            allow: Vec::new(),
            allow_insecure: Vec::new(),
            git_memory: crate::ByteSize::from_bytes(4 << 30).expect("not zero"),
            git_timeout: 600,
            api_timeout: 30,
        }
    }
}

/// Bounds for plan-declared egress (`request_egress`); an empty `allow` grants nothing.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct GrantBounds {
    pub allow: Vec<Pattern>,
    pub deny: Vec<Pattern>,
}

/// Resource warning and abort thresholds, in percent; 0 disables one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub disk_warn: u8,
    pub disk_abort: u8,
    pub mem_warn: u8,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            disk_warn: 85,
            disk_abort: 95,
            mem_warn: 90,
        }
    }
}

const TOP_KEYS: &[&str] = &[
    "deny",
    "allow_private",
    "resolve",
    "grants",
    "limits",
    "env",
    "images",
    "delivery",
    "kubernetes",
];
const KUBERNETES_KEYS: &[&str] = &[
    "namespace",
    "image",
    "program",
    "seccomp_profile",
    "egress",
    "user",
    "state_claim",
    "store_password_secret",
    "env_secrets",
];
const DELIVERY_KEYS: &[&str] = &[
    "allow",
    "allow_insecure",
    "git_memory",
    "git_timeout",
    "api_timeout",
];
const ENV_KEYS: &[&str] = &["pass"];
const IMAGE_KEYS: &[&str] = &["paths"];
const GRANT_KEYS: &[&str] = &["allow", "deny"];
const LIMIT_KEYS: &[&str] = &["disk_warn", "disk_abort", "mem_warn"];

/// Where the operator policy comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyPath {
    /// `--policy FILE`: the file must exist.
    Given(PathBuf),
    /// The default location: a missing file means no operator policy.
    Default(PathBuf),
}

/// The default policy file: `$XDG_CONFIG_HOME/cordon/policy.toml`, else
/// `$HOME/.config/cordon/policy.toml`. A relative `XDG_CONFIG_HOME` is ignored, as the XDG
/// specification says. `None` when neither variable gives an absolute directory.
pub fn default_path(xdg_config_home: Option<&OsStr>, home: Option<&OsStr>) -> Option<PathBuf> {
    let absolute = |v: Option<&OsStr>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    absolute(xdg_config_home)
        .or_else(|| absolute(home).map(|h| h.join(".config")))
        .map(|dir| dir.join("cordon").join("policy.toml"))
}

/// Reads and checks the policy from `path`: a missing default file is the empty policy; a
/// missing given file, or a default file that exists but cannot be read, is an error.
pub fn load(path: &PolicyPath, files: &impl Files) -> Result<OperatorPolicy, Diagnostics> {
    let (file, given) = match path {
        PolicyPath::Given(p) => (p, true),
        PolicyPath::Default(p) => (p, false),
    };
    let display = file.display().to_string();
    match files.read(file) {
        Ok(text) => parse(&display, &text),
        Err(err) if err.kind() == io::ErrorKind::NotFound && !given => {
            Ok(OperatorPolicy::default())
        }
        Err(err) => {
            let fix = if given {
                "fix the path given to `--policy`"
            } else {
                "fix its permissions, or remove it to run without an operator policy"
            };
            let mut sink = Sink::default();
            sink.file(&display).file_error(format!(
                "the operator policy file cannot be read: {err}; {fix}"
            ));
            Err(sink.finish())
        }
    }
}

/// Checks policy text as if read from `display`.
pub fn parse(display: &str, text: &str) -> Result<OperatorPolicy, Diagnostics> {
    let mut sink = Sink::default();
    let policy = check(&mut sink.file(display), text);
    match policy {
        Some(policy) if !sink.has_errors() => Ok(policy),
        _ => Err(sink.finish()),
    }
}

/// Byte offsets → line:col.
struct Lines<'t>(&'t str);

impl Lines<'_> {
    fn at(&self, offset: usize) -> Position {
        let offset = offset.min(self.0.len());
        let before = self.0.get(..offset).unwrap_or(self.0);
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        Position::new(line, column)
    }
}

fn check(out: &mut FileSink<'_>, text: &str) -> Option<OperatorPolicy> {
    let lines = Lines(text);
    let table = match DeTable::parse(text) {
        Ok(table) => table,
        Err(err) => {
            let at = err.span().map_or(Position::START, |s| lines.at(s.start));
            out.error(at, format!("invalid TOML: {}", err.message().trim_end()));
            return None;
        }
    };
    let table = table.get_ref();
    let cx = Cx { lines: &lines };
    cx.unknown_keys(out, table, TOP_KEYS, "the policy file");
    let mut policy = OperatorPolicy::default();
    let mut ok = true;
    if let Some(value) = table.get("deny") {
        ok &= cx
            .patterns(out, value, "deny", PatternList::Deny)
            .map(|p| policy.deny = p)
            .is_some();
    }
    if let Some(value) = table.get("allow_private") {
        ok &= cx
            .cidrs(out, value, "allow_private")
            .map(|c| policy.allow_private = c)
            .is_some();
    }
    if let Some(value) = table.get("resolve") {
        ok &= cx.resolve(out, value).map(|r| policy.resolve = r).is_some();
    }
    if let Some(value) = table.get("grants") {
        match cx.table(out, value, "grants") {
            Some(grants) => {
                cx.unknown_keys(out, grants, GRANT_KEYS, "`[grants]`");
                if let Some(v) = grants.get("allow") {
                    ok &= cx
                        .patterns(out, v, "grants.allow", PatternList::Allow)
                        .map(|p| policy.grants.allow = p)
                        .is_some();
                }
                if let Some(v) = grants.get("deny") {
                    ok &= cx
                        .patterns(out, v, "grants.deny", PatternList::Deny)
                        .map(|p| policy.grants.deny = p)
                        .is_some();
                }
            }
            None => ok = false,
        }
    }
    if let Some(value) = table.get("limits") {
        match cx.table(out, value, "limits") {
            Some(limits) => {
                cx.unknown_keys(out, limits, LIMIT_KEYS, "`[limits]`");
                let mut percent = |key: &str, slot: &mut u8| {
                    if let Some(v) = limits.get(key) {
                        match cx.percent(out, v, key) {
                            Some(p) => *slot = p,
                            None => ok = false,
                        }
                    }
                };
                percent("disk_warn", &mut policy.limits.disk_warn);
                percent("disk_abort", &mut policy.limits.disk_abort);
                percent("mem_warn", &mut policy.limits.mem_warn);
                let l = policy.limits;
                if l.disk_abort != 0 && l.disk_abort <= l.disk_warn {
                    let at = limits
                        .get("disk_abort")
                        .or(limits.get("disk_warn"))
                        .map_or(Position::START, |v| lines.at(v.span().start));
                    out.error(
                        at,
                        format!("`disk_abort` ({}) must exceed `disk_warn` ({}); raise `disk_abort` or lower `disk_warn`", l.disk_abort, l.disk_warn),
                    );
                    ok = false;
                }
            }
            None => ok = false,
        }
    }
    if let Some(value) = table.get("env") {
        match cx.table(out, value, "env") {
            Some(env) => {
                cx.unknown_keys(out, env, ENV_KEYS, "`[env]`");
                if let Some(v) = env.get("pass") {
                    let (texts, all) = cx.strings(out, v, "env.pass", "\"SSL_CERT_FILE\"");
                    ok &= all;
                    for (at, text) in texts {
                        match crate::EnvName::parse(&text) {
                            Some(name) if policy.env_pass.contains(&name) => {
                                out.error(at, format!("`env.pass` lists `{text}` twice; keep one"));
                                ok = false;
                            }
                            Some(name) => policy.env_pass.push(name),
                            None => {
                                out.error(
                                    at,
                                    "`env.pass` entries are variable NAMES (letters, digits and \
                                     `_`), like `pass = [\"SSL_CERT_FILE\"]`; values come from the \
                                     host's environment",
                                );
                                ok = false;
                            }
                        }
                    }
                }
            }
            None => ok = false,
        }
    }
    if let Some(value) = table.get("images") {
        match cx.table(out, value, "images") {
            Some(images) => {
                cx.unknown_keys(out, images, IMAGE_KEYS, "`[images]`");
                if let Some(v) = images.get("paths") {
                    let (texts, all) = cx.strings(out, v, "images.paths", "\"/srv/rootfs\"");
                    ok &= all;
                    for (at, text) in texts {
                        let parsed = cordon_protocol::ImageRef::parse(&text);
                        if !matches!(parsed, Ok(cordon_protocol::ImageRef::Path(_))) {
                            out.error(
                                at,
                                format!(
                                    "`images.paths` entries are absolute directories holding an \
                                     unpacked root filesystem, like `paths = [\"/srv/rootfs\"]`; \
                                     found `{}`",
                                    cordon_protocol::text::escape_line(&text)
                                ),
                            );
                            ok = false;
                        } else if policy.image_paths.contains(&text) {
                            out.error(at, format!("`images.paths` lists `{text}` twice; keep one"));
                            ok = false;
                        } else {
                            policy.image_paths.push(text);
                        }
                    }
                }
            }
            None => ok = false,
        }
    }
    if let Some(value) = table.get("delivery") {
        match cx.table(out, value, "delivery") {
            Some(delivery) => {
                cx.unknown_keys(out, delivery, DELIVERY_KEYS, "`[delivery]`");
                if let Some(v) = delivery.get("allow") {
                    ok &= cx
                        .patterns(out, v, "delivery.allow", PatternList::Allow)
                        .map(|p| policy.delivery.allow = p)
                        .is_some();
                }
                if let Some(v) = delivery.get("allow_insecure") {
                    ok &= cx
                        .patterns(out, v, "delivery.allow_insecure", PatternList::Allow)
                        .map(|p| policy.delivery.allow_insecure = p)
                        .is_some();
                }
                if let Some(v) = delivery.get("git_memory") {
                    match cx.size(out, v, "delivery.git_memory") {
                        Some(size) => policy.delivery.git_memory = size,
                        None => ok = false,
                    }
                }
                for (key, slot, most) in [
                    ("git_timeout", &mut policy.delivery.git_timeout, 86_400),
                    ("api_timeout", &mut policy.delivery.api_timeout, 3_600),
                ] {
                    if let Some(v) = delivery.get(key) {
                        match cx.seconds(out, v, key, most) {
                            Some(seconds) => *slot = seconds,
                            None => ok = false,
                        }
                    }
                }
            }
            None => ok = false,
        }
    }
    if let Some(value) = table.get("kubernetes") {
        match cx.table(out, value, "kubernetes") {
            Some(pod) => ok &= cx.kubernetes(out, pod, &mut policy.kubernetes),
            None => ok = false,
        }
    }
    ok.then_some(policy)
}

/// A Kubernetes object name: a DNS label (`namespace`, at most 63) or subdomain (at most 253),
/// lowercase letters, digits and `-` (and `.` between labels of a subdomain).
fn object_name(text: &str, most: usize) -> bool {
    !text.is_empty()
        && text.len() <= most
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
        && (most > 63 || !text.contains('.'))
}

struct Cx<'a, 't> {
    lines: &'a Lines<'t>,
}

impl Cx<'_, '_> {
    fn at<T>(&self, value: &Spanned<T>) -> Position {
        self.lines.at(value.span().start)
    }

    fn unknown_keys(
        &self,
        out: &mut FileSink<'_>,
        table: &DeTable<'_>,
        known: &[&str],
        what: &str,
    ) {
        for (key, _) in table.iter() {
            let name: &str = key.get_ref();
            if known.contains(&name) {
                continue;
            }
            let hint = match closest(name, known.iter().copied()) {
                Some(best) => format!("did you mean `{best}`?"),
                None => format!(
                    "the keys are {}",
                    known
                        .iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            out.error(
                self.at(key),
                format!("unknown key `{name}` in {what}; {hint}"),
            );
        }
    }

    fn table<'v, 'i>(
        &self,
        out: &mut FileSink<'_>,
        value: &'v Spanned<DeValue<'i>>,
        key: &str,
    ) -> Option<&'v DeTable<'i>> {
        match value.get_ref() {
            DeValue::Table(t) => Some(t),
            _ => {
                out.error(
                    self.at(value),
                    format!("`{key}` must be a table, like `[{key}]` on its own line"),
                );
                None
            }
        }
    }

    /// An array of strings, each with its position; `ok` is false when something was reported.
    /// The valid entries are returned either way, so their own problems are reported too.
    fn strings(
        &self,
        out: &mut FileSink<'_>,
        value: &Spanned<DeValue<'_>>,
        key: &str,
        example: &str,
    ) -> (Vec<(Position, String)>, bool) {
        // `grants.allow` is written as `allow = [...]` inside `[grants]`.
        let short = key.rsplit('.').next().unwrap_or(key);
        let items: Vec<&Spanned<DeValue<'_>>> = match value.get_ref() {
            DeValue::Array(items) => items.iter().collect(),
            _ => {
                out.error(
                    self.at(value),
                    format!("`{key}` must be an array of strings, like `{short} = [{example}]`"),
                );
                return (Vec::new(), false);
            }
        };
        let mut ok = true;
        let mut result = Vec::new();
        for item in items {
            match item.get_ref() {
                DeValue::String(s) => result.push((self.at(item), s.to_string())),
                _ => {
                    out.error(
                        self.at(item),
                        format!("`{key}` entries must be strings, like `{short} = [{example}]`"),
                    );
                    ok = false;
                }
            }
        }
        (result, ok)
    }

    fn patterns(
        &self,
        out: &mut FileSink<'_>,
        value: &Spanned<DeValue<'_>>,
        key: &str,
        list: PatternList,
    ) -> Option<Vec<Pattern>> {
        let (texts, mut ok) = self.strings(out, value, key, "\"*.example.com\"");
        let mut result = Vec::new();
        for (at, text) in texts {
            match Pattern::parse(&text, list) {
                Ok(p) => result.push(p),
                Err(err) => {
                    out.error(at, format!("`{key}`: {err}"));
                    ok = false;
                }
            }
        }
        ok.then_some(result)
    }

    fn cidrs(
        &self,
        out: &mut FileSink<'_>,
        value: &Spanned<DeValue<'_>>,
        key: &str,
    ) -> Option<Vec<Cidr>> {
        let (texts, mut ok) = self.strings(out, value, key, "\"10.20.0.0/16\"");
        let mut result = Vec::new();
        for (at, text) in texts {
            match Cidr::parse(&text) {
                Ok(c) => result.push(c),
                Err(err) => {
                    out.error(at, format!("`{key}`: {err}"));
                    ok = false;
                }
            }
        }
        ok.then_some(result)
    }

    fn resolve(
        &self,
        out: &mut FileSink<'_>,
        value: &Spanned<DeValue<'_>>,
    ) -> Option<Vec<(HostName, Vec<IpAddr>)>> {
        let table = self.table(out, value, "resolve")?;
        let mut ok = true;
        let mut result = Vec::new();
        for (key, value) in table.iter() {
            let name: &str = key.get_ref();
            let host = if name.parse::<IpAddr>().is_ok() {
                out.error(
                    self.at(key),
                    format!("`resolve` maps host names to addresses, and `{name}` is already an address; remove the entry"),
                );
                None
            } else {
                match HostName::parse(name) {
                    Ok(h) => Some(h),
                    Err(err) => {
                        out.error(self.at(key), format!("`resolve`: {err}"));
                        None
                    }
                }
            };
            let texts: Vec<(Position, String)> = match value.get_ref() {
                DeValue::String(s) => vec![(self.at(value), s.to_string())],
                DeValue::Array(_) => {
                    let (texts, all) = self.strings(out, value, "resolve", "\"10.20.0.5\"");
                    ok &= all;
                    texts
                }
                _ => {
                    out.error(self.at(value), "`resolve` values must be an IP address or an array of them, like `\"registry.example\" = \"10.20.0.5\"`");
                    ok = false;
                    Vec::new()
                }
            };
            let mut ips = Vec::new();
            for (at, text) in texts {
                match text.parse::<IpAddr>() {
                    Ok(ip) => ips.push(ip),
                    Err(_) => {
                        out.error(at, format!("`resolve` answer `{text}` is not an IP address; write one like `10.20.0.5` or `fd00::5`"));
                        ok = false;
                    }
                }
            }
            match host {
                Some(host) if !ips.is_empty() => result.push((host, ips)),
                Some(_) if ok => {
                    out.error(
                        self.at(value),
                        "`resolve` needs at least one address per name",
                    );
                    ok = false;
                }
                _ => ok = false,
            }
        }
        ok.then_some(result)
    }

    fn size(
        &self,
        out: &mut FileSink<'_>,
        value: &Spanned<DeValue<'_>>,
        key: &str,
    ) -> Option<crate::ByteSize> {
        let DeValue::String(text) = value.get_ref() else {
            out.error(
                self.at(value),
                format!("`{key}` is a size in a string, like `{key} = \"4G\"`"),
            );
            return None;
        };
        crate::ByteSize::parse(text)
            .map_err(|e| out.error(self.at(value), format!("`{key}`: {e}")))
            .ok()
    }

    /// Whole seconds from 1 to `most`.
    fn seconds(
        &self,
        out: &mut FileSink<'_>,
        value: &Spanned<DeValue<'_>>,
        key: &str,
        most: u32,
    ) -> Option<u32> {
        let parsed = match value.get_ref() {
            DeValue::Integer(i) if i.radix() == 10 => i
                .as_str()
                .parse::<u32>()
                .ok()
                .filter(|s| (1..=most).contains(s)),
            _ => None,
        };
        if parsed.is_none() {
            out.error(
                self.at(value),
                format!("`{key}` must be whole seconds from 1 to {most}, like `{key} = 60`"),
            );
        }
        parsed
    }

    /// `[kubernetes]` into `pod`; false when something was reported.
    fn kubernetes(
        &self,
        out: &mut FileSink<'_>,
        table: &DeTable<'_>,
        pod: &mut KubernetesPod,
    ) -> bool {
        self.unknown_keys(out, table, KUBERNETES_KEYS, "`[kubernetes]`");
        let mut ok = true;
        let mut text = |key: &str, check: &dyn Fn(&str) -> bool, like: &str| {
            let value = table.get(key)?;
            match value.get_ref() {
                DeValue::String(s) if check(s) => Some(s.to_string()),
                _ => {
                    out.error(self.at(value), format!("`kubernetes.{key}` {like}"));
                    ok = false;
                    None
                }
            }
        };
        pod.namespace = text(
            "namespace",
            &|s| object_name(s, 63),
            "is a namespace name (lowercase letters, digits and `-`, at most 63), like \
             `namespace = \"cordon\"`",
        );
        pod.image = text(
            "image",
            &|s| !s.is_empty() && s.len() <= 512 && s.bytes().all(|b| b.is_ascii_graphic()),
            "is a container image reference holding cordon and git, like \
             `image = \"registry.example.com/cordon:1\"`",
        );
        if let Some(program) = text(
            "program",
            &|s| s.starts_with('/') && s.len() <= 4096 && !s.chars().any(char::is_control),
            "is the absolute path of cordon in the image, like \
             `program = \"/usr/local/bin/cordon\"`",
        ) {
            pod.program = program;
        }
        pod.seccomp_profile = text(
            "seccomp_profile",
            &|s| {
                s.len() <= 4096
                    && s.split('/').all(|part| {
                        !part.is_empty()
                            && part != "."
                            && part != ".."
                            && part.bytes().all(|b| {
                                b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
                            })
                    })
            },
            "is a profile's path under the kubelet's seccomp directory (relative, no `..`), like \
             `seccomp_profile = \"profiles/cordon.json\"`",
        );
        for (key, slot) in [
            ("state_claim", &mut pod.state_claim),
            ("store_password_secret", &mut pod.store_password_secret),
        ] {
            *slot = text(
                key,
                &|s| object_name(s, 253),
                "is an object name (lowercase letters, digits, `-` and `.`), like \
                 `name = \"cordon-state\"`",
            );
        }
        if let Some(v) = table.get("env_secrets") {
            let (names, all) =
                self.strings(out, v, "kubernetes.env_secrets", "\"cordon-model-keys\"");
            ok &= all;
            for (at, name) in names {
                if !object_name(&name, 253) {
                    out.error(
                        at,
                        format!(
                            "`kubernetes.env_secrets` entries are Secret names (lowercase \
                             letters, digits, `-` and `.`); found `{}`",
                            cordon_protocol::text::escape_line(&name)
                        ),
                    );
                    ok = false;
                } else if pod.env_secrets.contains(&name) {
                    out.error(
                        at,
                        format!("`kubernetes.env_secrets` lists `{name}` twice; keep one"),
                    );
                    ok = false;
                } else {
                    pod.env_secrets.push(name);
                }
            }
        }
        if let Some(v) = table.get("egress") {
            match self.cidrs(out, v, "kubernetes.egress") {
                Some(cidrs) => pod.egress = cidrs,
                None => ok = false,
            }
        }
        if let Some(v) = table.get("user") {
            let parsed = match v.get_ref() {
                DeValue::Integer(i) if i.radix() == 10 => i
                    .as_str()
                    .parse::<u32>()
                    .ok()
                    .filter(|u| (1..=65_535).contains(u)),
                _ => None,
            };
            match parsed {
                Some(user) => pod.user = user,
                None => {
                    out.error(
                        self.at(v),
                        "`kubernetes.user` is the non-root uid cordon runs as in the pod (1 to \
                         65535, the uids of a user-namespaced pod), like `user = 1000`",
                    );
                    ok = false;
                }
            }
        }
        ok
    }

    fn percent(
        &self,
        out: &mut FileSink<'_>,
        value: &Spanned<DeValue<'_>>,
        key: &str,
    ) -> Option<u8> {
        let parsed = match value.get_ref() {
            DeValue::Integer(i) if i.radix() == 10 => {
                i.as_str().parse::<u8>().ok().filter(|p| *p <= 100)
            }
            _ => None,
        };
        if parsed.is_none() {
            out.error(self.at(value), format!("`{key}` must be a whole percentage from 0 to 100 (0 disables it), like `{key} = 90`"));
        }
        parsed
    }
}
