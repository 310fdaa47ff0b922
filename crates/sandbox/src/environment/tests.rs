//! The scrubbed environment as tables: input in, the complete environment out.

use std::ffi::{OsStr, OsString};

use super::{AssignmentError, EnvInput, LANE_ADDR, PROXY_ADDR, build, parse_assignment};

fn pairs(list: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    list.iter()
        .map(|(key, value)| (OsString::from(key), OsString::from(value)))
        .collect()
}

fn input(host: &[(&str, &str)], declared: &[(&str, &str)]) -> EnvInput {
    EnvInput {
        host: pairs(host),
        home: "/home/ada".into(),
        user: "ada".into(),
        uid: 1000,
        exec: 3,
        proxy: None,
        model_lane: None,
        declared: pairs(declared),
        passed: Vec::new(),
        path_prefix: Vec::new(),
        base_path: None,
        forced: Vec::new(),
    }
}

#[test]
fn an_images_path_replaces_the_default_and_toolchains_go_in_front_of_it() {
    let mut on_image = input(&[], &[]);
    on_image.base_path = Some("/opt/venv/bin:/bin".into());
    let env = build(&on_image);
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone());
    assert_eq!(path, Some("/opt/venv/bin:/bin".into()));
    on_image.path_prefix = vec!["/toolchain/bin".into()];
    let env = build(&on_image);
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone());
    assert_eq!(path, Some("/toolchain/bin:/opt/venv/bin:/bin".into()));
    // A step's own PATH still wins over the image's.
    let mut declared = input(&[], &[("PATH", "/mine")]);
    declared.base_path = Some("/bin".into());
    let env = build(&declared);
    assert!(env.iter().any(|(k, v)| k == "PATH" && v == "/mine"));
}

/// Builds the environment and compares it, whole and in order, with `expected`.
fn check(input: EnvInput, expected: &[(&str, &str)]) {
    assert_eq!(build(&input), pairs(expected));
}

const BASE: [(&str, &str); 6] = [
    ("HOME", "/home/ada"),
    ("LOGNAME", "ada"),
    (
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ),
    ("PYTHONPYCACHEPREFIX", "/tmp/.cordon-pycache/3"),
    ("USER", "ada"),
    ("XDG_RUNTIME_DIR", "/run/user/1000"),
];

#[test]
fn host_environment_is_not_inherited_except_the_locale_terminal_and_time_zone() {
    let host = [
        ("AWS_SECRET_ACCESS_KEY", "hunter2hunter2"),
        ("SSH_AUTH_SOCK", "/run/user/1000/ssh"),
        ("LD_PRELOAD", "/tmp/evil.so"),
        ("PATH", "/home/ada/bin:/usr/bin"),
        ("HOME", "/root"),
        ("XDG_RUNTIME_DIR", "/run/user/0"),
        ("PYTHONPYCACHEPREFIX", "/home/ada/.pyc"),
        ("LANG", "C.UTF-8"),
        ("TERM", "xterm-256color"),
        ("LC_ALL", "C"),
        ("LC_TIME", "en_GB.UTF-8"),
        ("LC_SECRET", "not-a-category"),
        ("TZ", "Europe/Berlin"),
    ];
    let mut expected = BASE.to_vec();
    expected.extend([
        ("LANG", "C.UTF-8"),
        ("TERM", "xterm-256color"),
        ("LC_ALL", "C"),
        ("LC_TIME", "en_GB.UTF-8"),
        ("TZ", "Europe/Berlin"),
    ]);
    expected.sort();
    check(input(&host, &[]), &expected);
}

#[test]
fn minimal_environment_has_path_home_user_and_logname() {
    check(input(&[], &[]), &BASE);
}

#[test]
fn proxy_variables_appear_only_with_a_proxy() {
    let mut with_proxy = input(&[], &[]);
    with_proxy.proxy = Some(PROXY_ADDR);
    let proxy = "http://127.0.0.1:3128";
    let no_proxy = "localhost,127.0.0.1,::1";
    check(
        with_proxy,
        &[
            ("ALL_PROXY", proxy),
            ("HOME", "/home/ada"),
            ("HTTPS_PROXY", proxy),
            ("HTTP_PROXY", proxy),
            ("LOGNAME", "ada"),
            ("NO_PROXY", no_proxy),
            ("PATH", BASE[2].1),
            ("PYTHONPYCACHEPREFIX", BASE[3].1),
            ("USER", "ada"),
            ("XDG_RUNTIME_DIR", BASE[5].1),
            ("all_proxy", proxy),
            ("http_proxy", proxy),
            ("https_proxy", proxy),
            ("no_proxy", no_proxy),
        ],
    );
}

#[test]
fn model_lane_variables_point_at_the_lane_with_a_dummy_key() {
    let mut with_lane = input(&[], &[]);
    with_lane.model_lane = Some(LANE_ADDR);
    check(
        with_lane,
        &[
            ("ANTHROPIC_API_KEY", "cordon-lane-dummy"),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:3129"),
            ("HOME", "/home/ada"),
            ("LOGNAME", "ada"),
            ("OPENAI_API_KEY", "cordon-lane-dummy"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:3129/v1"),
            ("PATH", BASE[2].1),
            ("PYTHONPYCACHEPREFIX", BASE[3].1),
            ("USER", "ada"),
            ("XDG_RUNTIME_DIR", BASE[5].1),
        ],
    );
}

#[test]
fn declared_variables_are_added_and_override_defaults() {
    check(
        input(
            &[("LANG", "C")],
            &[
                ("PATH", "/opt/bin:/usr/bin"),
                ("GH_TOKEN", "secret-value"),
                ("LANG", "de_DE.UTF-8"),
                ("PYTHONPYCACHEPREFIX", "/tmp/mine"),
            ],
        ),
        &[
            ("GH_TOKEN", "secret-value"),
            ("HOME", "/home/ada"),
            ("LANG", "de_DE.UTF-8"),
            ("LOGNAME", "ada"),
            ("PATH", "/opt/bin:/usr/bin"),
            ("PYTHONPYCACHEPREFIX", "/tmp/mine"),
            ("USER", "ada"),
            ("XDG_RUNTIME_DIR", BASE[5].1),
        ],
    );
}

/// `-e` text and what it parses to.
type AssignmentCase = (
    &'static str,
    Result<(&'static str, &'static str), AssignmentError>,
);

#[test]
fn assignments_parse_or_say_how_to_fix_them() {
    let cases: &[AssignmentCase] = &[
        ("RUST_LOG=debug", Ok(("RUST_LOG", "debug"))),
        ("EMPTY=", Ok(("EMPTY", ""))),
        ("URL=a=b", Ok(("URL", "a=b"))),
        ("_X1=y", Ok(("_X1", "y"))),
        ("NOVALUE", Err(AssignmentError::NoEquals("NOVALUE".into()))),
        ("=value", Err(AssignmentError::BadName(String::new()))),
        ("1X=y", Err(AssignmentError::BadName("1X".into()))),
        ("A-B=y", Err(AssignmentError::BadName("A-B".into()))),
        ("A=x\0y", Err(AssignmentError::NulInValue("A".into()))),
    ];
    for (text, expected) in cases {
        let got = parse_assignment(OsStr::new(text));
        let expected = match expected {
            Ok((key, value)) => Ok((OsString::from(key), OsString::from(value))),
            Err(error) => Err(error.clone()),
        };
        assert_eq!(got, expected, "{text:?}");
    }
    assert_eq!(
        AssignmentError::NoEquals("NOVALUE".into()).to_string(),
        "`NOVALUE` is not KEY=VALUE; write it as NAME=value, for example `RUST_LOG=debug`"
    );
}

#[test]
fn toolchain_directories_go_in_front_of_path_and_their_variables_win() {
    let mut with_toolchain = input(
        &[],
        &[
            ("PATH", "/opt/bin:/usr/bin"),
            ("CARGO_HOME", "/workspace/.cargo"),
        ],
    );
    with_toolchain.path_prefix = vec!["/home/ada/.cargo/bin".into()];
    with_toolchain.forced = pairs(&[
        ("CARGO_HOME", "/tmp/.cordon-cargo-home"),
        ("RUSTUP_HOME", "/home/ada/.rustup"),
    ]);
    check(
        with_toolchain,
        &[
            ("CARGO_HOME", "/tmp/.cordon-cargo-home"),
            ("HOME", "/home/ada"),
            ("LOGNAME", "ada"),
            ("PATH", "/home/ada/.cargo/bin:/opt/bin:/usr/bin"),
            ("PYTHONPYCACHEPREFIX", BASE[3].1),
            ("RUSTUP_HOME", "/home/ada/.rustup"),
            ("USER", "ada"),
            ("XDG_RUNTIME_DIR", BASE[5].1),
        ],
    );
    // Without a step PATH, in front of the default.
    let mut default_path = input(&[], &[]);
    default_path.path_prefix = vec!["/a/bin".into(), "/b/bin".into()];
    let env = build(&default_path);
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone());
    assert_eq!(
        path,
        Some(OsString::from(format!("/a/bin:/b/bin:{}", BASE[2].1)))
    );
}

#[test]
fn passed_variables_come_after_the_host_copies_and_before_the_step() {
    let mut with_pass = input(
        &[("LANG", "C"), ("SSL_CERT_FILE", "/ignored")],
        &[("NODE_EXTRA_CA_CERTS", "/step/ca.pem")],
    );
    with_pass.passed = pairs(&[
        ("SSL_CERT_FILE", "/etc/corp/ca.pem"),
        ("NODE_EXTRA_CA_CERTS", "/etc/corp/ca.pem"),
        ("LANG", "de_DE.UTF-8"),
    ]);
    let env = build(&with_pass);
    let get = |key: &str| {
        env.iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.to_string_lossy().into_owned())
    };
    assert_eq!(get("SSL_CERT_FILE").as_deref(), Some("/etc/corp/ca.pem"));
    assert_eq!(
        get("LANG").as_deref(),
        Some("de_DE.UTF-8"),
        "over the host copy"
    );
    assert_eq!(
        get("NODE_EXTRA_CA_CERTS").as_deref(),
        Some("/step/ca.pem"),
        "the step's own wins"
    );
}

#[test]
fn passed_values_naming_files_are_exposed_and_unset_names_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "pem").unwrap();
    let host = [
        ("CA", ca.clone().into_os_string()),
        ("DIR", dir.path().as_os_str().to_owned()),
        ("RELATIVE", OsString::from("ca.pem")),
    ];
    let var = |name: &str| {
        host.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    };
    let (values, files) = super::passed(&["CA", "DIR", "RELATIVE", "UNSET"], &var);
    assert_eq!(values.len(), 3);
    assert_eq!(files, [ca]);
}
