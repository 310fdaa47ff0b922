//! The operator policy file: every key, every rule, with line:col diagnostics.

use std::ffi::OsStr;
use std::path::PathBuf;

use cordon_pipeline::policy::{self, Limits, OperatorPolicy, PolicyPath};

fn check(name: &str, toml: &str) {
    let output = match policy::parse("policy.toml", toml) {
        Ok(p) => format!(
            "valid: {} deny, {} allow_private, {} resolve, {} grant allow, {} grant deny, limits {:?}",
            p.deny.len(),
            p.allow_private.len(),
            p.resolve.len(),
            p.grants.allow.len(),
            p.grants.deny.len(),
            p.limits
        ),
        Err(d) => d.to_string(),
    };
    insta::assert_snapshot!(name, format!("{toml}---\n{output}"));
}

#[test]
fn design_example_policy_is_valid() {
    let text = r#"deny = ["*.corp.example"]
allow_private = ["10.20.0.0/16"]
[resolve]
"registry.example" = "10.20.0.5"
"mirror.example" = ["10.20.0.6", "fd00::6"]
[grants]
allow = ["*.packages.example", "registry.example:8443"]
deny = []
[limits]
disk_warn = 85
disk_abort = 95
mem_warn = 90
[env]
pass = ["SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS"]
"#;
    let p = policy::parse("policy.toml", text).expect("valid");
    assert_eq!(
        p.env_pass.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
        ["SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS"]
    );
    assert_eq!(
        p.deny.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["*.corp.example:*"],
        "a deny pattern without a port covers every port"
    );
    assert_eq!(p.resolve.len(), 2);
    assert_eq!(p.resolve[0].0.as_str(), "mirror.example", "sorted by name");
    assert_eq!(p.resolve[0].1.len(), 2);
    assert_eq!(p.grants.allow.len(), 2);
    assert_eq!(
        p.limits,
        Limits {
            disk_warn: 85,
            disk_abort: 95,
            mem_warn: 90
        }
    );
}

#[test]
fn empty_policy_is_the_default() {
    assert_eq!(
        policy::parse("policy.toml", ""),
        Ok(OperatorPolicy::default())
    );
}

#[test]
fn operator_may_deny_everything() {
    let p = policy::parse("policy.toml", "deny = [\"*\"]\n").expect("valid");
    assert_eq!(p.deny.len(), 1);
}

#[test]
fn unknown_keys_are_errors_with_line_and_column() {
    check(
        "policy_unknown_keys",
        "deny = []\nalow_private = []\n[grants]\nallow = []\nextra = 1\n[limits]\ndisk_warm = 80\n[proxy]\nport = 1\n",
    );
}

#[test]
fn values_are_checked() {
    check(
        "policy_values",
        "deny = [\"10.0.0.1\", \"*.com\"]\nallow_private = [\"10.0.0.0/33\", 5]\n[resolve]\n\"registry.example\" = \"not-an-ip\"\n\"10.0.0.1\" = \"10.0.0.2\"\n[grants]\nallow = \"*.example.com\"\ndeny = [\"example.com:99999\"]\n[limits]\ndisk_warn = 95\ndisk_abort = 90\nmem_warn = 101\n[env]\npass = [\"GOOD\", \"1BAD\", \"GOOD\", 7]\nextra = 1\n",
    );
}

#[test]
fn malformed_toml_reports_the_parsers_location() {
    check(
        "policy_malformed",
        "deny = [\"a.example\"\nallow_private = []\n",
    );
    check(
        "policy_wrong_table_type",
        "grants = 1\nlimits = [1]\nresolve = \"x\"\n",
    );
}

#[test]
fn missing_given_policy_file_is_an_error_but_a_missing_default_is_no_policy() {
    let files = std::collections::BTreeMap::new();
    let given = PolicyPath::Given(PathBuf::from("nope.toml"));
    assert_eq!(
        policy::load(&given, &files)
            .expect_err("missing")
            .to_string(),
        "nope.toml: the operator policy file cannot be read: entity not found; fix the path given to `--policy`"
    );
    let default = PolicyPath::Default(PathBuf::from("nope.toml"));
    assert_eq!(
        policy::load(&default, &files),
        Ok(OperatorPolicy::default())
    );
}

#[test]
fn default_policy_path_follows_xdg_then_home() {
    let check = |xdg: Option<&str>, home: Option<&str>, expected: Option<&str>| {
        let got = policy::default_path(xdg.map(OsStr::new), home.map(OsStr::new));
        assert_eq!(
            got,
            expected.map(PathBuf::from),
            "xdg {xdg:?} home {home:?}"
        );
    };
    check(
        Some("/cfg"),
        Some("/home/u"),
        Some("/cfg/cordon/policy.toml"),
    );
    check(
        None,
        Some("/home/u"),
        Some("/home/u/.config/cordon/policy.toml"),
    );
    check(
        Some("relative"),
        Some("/home/u"),
        Some("/home/u/.config/cordon/policy.toml"),
    );
    check(None, None, None);
}

#[test]
fn image_paths_are_absolute_directories_each_once() {
    let policy = cordon_pipeline::policy::parse(
        "policy.toml",
        "[images]\npaths = [\"/srv/rootfs\", \"/opt/images/py\"]\n",
    )
    .expect("a valid policy");
    assert_eq!(policy.image_paths, ["/srv/rootfs", "/opt/images/py"]);
    check(
        "policy_image_paths",
        "[images]\npaths = [\"relative/dir\", \"/srv/a\", \"/srv/a\"]\nother = 1\n",
    );
}

#[test]
fn delivery_limits_default_to_4g_600_s_and_30_s_and_are_checked() {
    let d = policy::parse("policy.toml", "").expect("valid").delivery;
    assert_eq!(
        (d.git_memory.bytes(), d.git_timeout, d.api_timeout),
        (4 << 30, 600, 30)
    );
    let d = policy::parse(
        "policy.toml",
        "[delivery]\ngit_memory = \"256M\"\ngit_timeout = 5\napi_timeout = 2\n",
    )
    .expect("valid")
    .delivery;
    assert_eq!(
        (d.git_memory.bytes(), d.git_timeout, d.api_timeout),
        (256 << 20, 5, 2)
    );
    for (text, want) in [
        (
            "git_memory = 4\n",
            "`delivery.git_memory` is a size in a string",
        ),
        ("git_memory = \"0\"\n", "is zero"),
        ("git_memory = \"4Q\"\n", "unknown unit"),
        (
            "git_timeout = 0\n",
            "`git_timeout` must be whole seconds from 1 to 86400",
        ),
        (
            "api_timeout = 3601\n",
            "`api_timeout` must be whole seconds from 1 to 3600",
        ),
        ("api_timeout = \"30\"\n", "like `api_timeout = 60`"),
    ] {
        let err = policy::parse("policy.toml", &format!("[delivery]\n{text}"))
            .expect_err(text)
            .to_string();
        assert!(err.contains(want), "{text}: {err}");
        assert!(err.contains("policy.toml:2:"), "{text}: {err}");
    }
}

#[test]
fn the_kubernetes_pod_settings_default_to_uid_1000_and_are_checked() {
    let pod = policy::parse("policy.toml", "").expect("valid").kubernetes;
    assert_eq!(
        (pod.user, pod.program.as_str(), pod.image, pod.egress.len()),
        (1000, "/usr/local/bin/cordon", None, 0)
    );
    let pod = policy::parse(
        "policy.toml",
        "[kubernetes]\nnamespace = \"cordon\"\nimage = \"registry.example.com/cordon:1\"\n\
         seccomp_profile = \"profiles/cordon.json\"\negress = [\"10.0.0.0/8\", \"192.0.2.7/32\"]\n\
         user = 4242\nstate_claim = \"cordon-state\"\nstore_password_secret = \"cordon-store\"\n\
         env_secrets = [\"model-keys\", \"forge.token\"]\nprogram = \"/opt/cordon/bin/cordon\"\n",
    )
    .expect("valid")
    .kubernetes;
    assert_eq!(pod.namespace.as_deref(), Some("cordon"));
    assert_eq!(pod.image.as_deref(), Some("registry.example.com/cordon:1"));
    assert_eq!(pod.seccomp_profile.as_deref(), Some("profiles/cordon.json"));
    let egress: Vec<String> = pod.egress.iter().map(ToString::to_string).collect();
    assert_eq!(egress, ["10.0.0.0/8", "192.0.2.7"]);
    assert_eq!(
        (pod.user, pod.state_claim.as_deref(), pod.program.as_str()),
        (4242, Some("cordon-state"), "/opt/cordon/bin/cordon")
    );
    assert_eq!(pod.store_password_secret.as_deref(), Some("cordon-store"));
    assert_eq!(pod.env_secrets, ["model-keys", "forge.token"]);
    for (text, want) in [
        ("user = 0\n", "`kubernetes.user` is the non-root uid"),
        ("user = 65536\n", "1 to 65535"),
        ("user = \"1000\"\n", "like `user = 1000`"),
        (
            "namespace = \"Cordon\"\n",
            "`kubernetes.namespace` is a namespace name",
        ),
        (
            "namespace = \"a.b\"\n",
            "`kubernetes.namespace` is a namespace name",
        ),
        ("seccomp_profile = \"/etc/x.json\"\n", "relative, no `..`"),
        ("seccomp_profile = \"../x.json\"\n", "relative, no `..`"),
        (
            "image = \"a b\"\n",
            "`kubernetes.image` is a container image",
        ),
        (
            "program = \"cordon\"\n",
            "`kubernetes.program` is the absolute path",
        ),
        (
            "state_claim = \"-x\"\n",
            "`kubernetes.state_claim` is an object name",
        ),
        ("egress = [\"10.0.0.0/33\"]\n", "`kubernetes.egress`"),
        ("env_secrets = [\"a\", \"a\"]\n", "lists `a` twice"),
        ("env_secrets = [\"A\"]\n", "entries are Secret names"),
        ("images = \"x\"\n", "did you mean `image`?"),
    ] {
        let err = policy::parse("policy.toml", &format!("[kubernetes]\n{text}"))
            .expect_err(text)
            .to_string();
        assert!(err.contains(want), "{text}: {err}");
        assert!(err.contains("policy.toml:2:"), "{text}: {err}");
    }
}
