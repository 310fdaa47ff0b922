//! Finding toolchains in a made-up home: where each is looked for, the refusals, the masks.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::Path;

use super::*;

fn touch(path: &Path) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, "").unwrap();
}

/// `resolve` in `home` with the host variables `vars`.
fn resolve_in(
    home: &Path,
    vars: &HashMap<&'static str, OsString>,
    toolchains: &[Toolchain],
) -> Result<Exposure, ToolchainError> {
    let var = |name: &str| vars.get(name).cloned();
    resolve(
        toolchains,
        &HostFacts {
            home,
            var: &var,
            workspace: None,
        },
    )
}

#[test]
fn rust_is_rustups_home_and_cargos_bin_with_a_session_cargo_home() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    fs::create_dir_all(h.join(".rustup/toolchains/stable/bin")).unwrap();
    touch(&h.join(".cargo/bin/cargo"));
    touch(&h.join(".cargo/credentials.toml"));
    touch(&h.join(".rustup/toolchains/stable/etc/.npmrc"));
    let vars = HashMap::new();
    let exposure = resolve_in(h, &vars, &[Toolchain::Rust]).unwrap();
    assert_eq!(
        exposure.read_only,
        [h.join(".rustup"), h.join(".cargo/bin")]
    );
    assert_eq!(exposure.path, [h.join(".cargo/bin")]);
    assert_eq!(
        exposure.env,
        [
            ("RUSTUP_HOME".into(), h.join(".rustup").into_os_string()),
            ("CARGO_HOME".into(), OsString::from(CARGO_HOME)),
        ]
    );
    // Cargo's credentials are not in what is exposed; a credential file inside it is masked.
    assert_eq!(
        exposure.masks,
        [h.join(".rustup/toolchains/stable/etc/.npmrc")]
    );
}

#[test]
fn a_missing_toolchain_names_where_cordon_looked_and_the_variable() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let vars = HashMap::new();
    for (toolchain, looked, var) in [
        (Toolchain::Rust, ".rustup", "RUSTUP_HOME and CARGO_HOME"),
        (Toolchain::Python, ".pyenv", "PYENV_ROOT"),
        (Toolchain::Node, ".nvm/alias/default", "NVM_DIR"),
    ] {
        let err = resolve_in(h, &vars, &[toolchain]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&h.join(looked).display().to_string()),
            "{text}"
        );
        assert!(text.contains(&format!("set {var}")), "{text}");
    }
    let err = resolve_in(h, &vars, &[Toolchain::Go])
        .unwrap_err()
        .to_string();
    assert!(err.contains("`go` in the host's PATH"), "{err}");
}

#[test]
fn a_root_that_is_the_home_or_holds_it_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path().join("user");
    fs::create_dir_all(h.join("toolchains")).unwrap();
    touch(&h.join("versions/3.12/bin/python"));
    for root in [h.clone(), home.path().to_path_buf()] {
        let vars = HashMap::from([("PYENV_ROOT", root.clone().into_os_string())]);
        fs::create_dir_all(root.join("versions")).unwrap();
        assert_eq!(
            resolve_in(&h, &vars, &[Toolchain::Python]),
            Err(ToolchainError::NotDedicated {
                name: "python",
                path: root,
                var: "PYENV_ROOT",
            })
        );
    }
}

#[test]
fn nodes_default_alias_is_followed_to_the_newest_matching_version() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    for version in ["v20.1.0", "v22.2.0", "v22.10.1", "v220.0.0"] {
        touch(&h.join(format!(".nvm/versions/node/{version}/bin/node")));
    }
    touch(&h.join(".nvm/alias/lts/jod"));
    fs::write(h.join(".nvm/alias/default"), "lts/jod\n").unwrap();
    fs::write(h.join(".nvm/alias/lts/jod"), "v22\n").unwrap();
    let vars = HashMap::new();
    let exposure = resolve_in(h, &vars, &[Toolchain::Node]).unwrap();
    assert_eq!(exposure.path, [h.join(".nvm/versions/node/v22.10.1/bin")]);
}

#[test]
fn go_is_found_by_looking_in_path_never_by_running_it() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let goroot = h.join("opt/go");
    // Not executable and not a real go: it is only looked at.
    touch(&goroot.join("bin/go"));
    touch(&goroot.join("VERSION"));
    let vars = HashMap::from([(
        "PATH",
        OsString::from(format!(
            "relative/bin:/nonexistent:{}",
            goroot.join("bin").display()
        )),
    )]);
    let exposure = resolve_in(h, &vars, &[Toolchain::Go]).unwrap();
    let goroot = fs::canonicalize(&goroot).unwrap();
    assert_eq!(exposure.read_only, std::slice::from_ref(&goroot));
    assert_eq!(exposure.path, [goroot.join("bin")]);
}

#[test]
fn credential_files_are_matched_by_name() {
    for (name, masked) in [
        (".npmrc", true),
        ("npmrc", true),
        ("global-npmrc", true),
        (".netrc", true),
        ("credentials", true),
        ("credentials.toml", true),
        ("pip.conf", true),
        (".pypirc", true),
        (".NPMRC", true),
        ("Credentials.toml", true),
        (".git-credentials", true),
        ("netrc", false),
        ("my-credentials", false),
        ("pip.conf.d", false),
    ] {
        assert_eq!(is_credential(OsStr::new(name)), masked, "{name}");
    }
}

#[test]
fn a_program_the_sandbox_cannot_find_is_traced_to_the_hidden_home_and_its_toolchain() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    touch(&h.join(".cargo/bin/cargo"));
    touch(&h.join(".local/bin/tool"));
    let vars = HashMap::from([(
        "PATH",
        OsString::from(format!(
            "/usr/bin:{}:{}",
            h.join(".cargo/bin").display(),
            h.join(".local/bin").display()
        )),
    )]);
    let var = |name: &str| vars.get(name).cloned();
    let facts = HostFacts {
        home: h,
        var: &var,
        workspace: None,
    };
    assert_eq!(
        hidden_program("cargo", &facts),
        Some((h.join(".cargo/bin/cargo"), Some(Toolchain::Rust)))
    );
    assert_eq!(
        hidden_program("tool", &facts),
        Some((h.join(".local/bin/tool"), None))
    );
    // Control: a program outside the home, or none at all, or a path, is not traced.
    assert_eq!(hidden_program("sh", &facts), None);
    assert_eq!(hidden_program("nothing-here", &facts), None);
    assert_eq!(hidden_program("./cargo", &facts), None);
}

#[test]
fn a_root_reached_through_a_link_or_dots_is_judged_by_what_it_resolves_to() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path().join("user");
    touch(&h.join(".ssh/id_rsa"));
    fs::create_dir_all(h.join("x")).unwrap();
    // The home made to look like a uv install, reached three ways.
    touch(&h.join("cpython-3.12/bin/python"));
    let link = home.path().join("link");
    std::os::unix::fs::symlink(&h, &link).unwrap();
    for written in [link.clone(), h.join("x/..")] {
        let vars = HashMap::from([("UV_PYTHON_INSTALL_DIR", written.into_os_string())]);
        let err = resolve_in(&h, &vars, &[Toolchain::Python]).unwrap_err();
        assert!(matches!(err, ToolchainError::NotDedicated { .. }), "{err}");
    }
    // A relative root is not one.
    let vars = HashMap::from([("UV_PYTHON_INSTALL_DIR", OsString::from(".."))]);
    assert!(matches!(
        resolve_in(&h, &vars, &[Toolchain::Python]),
        Err(ToolchainError::NotFound { .. })
    ));
}

#[test]
fn a_root_in_the_workspace_or_through_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    fs::create_dir_all(&home).unwrap();
    let ws = dir.path().join("ws");
    // The sandbox can turn this into a link to anywhere between runs.
    touch(&ws.join(".uv-python/cpython-3.12/bin/python"));
    let ws = fs::canonicalize(&ws).unwrap();
    let vars = HashMap::from([(
        "UV_PYTHON_INSTALL_DIR",
        ws.join(".uv-python").into_os_string(),
    )]);
    let var = |name: &str| vars.get(name).cloned();
    let err = resolve(
        &[Toolchain::Python],
        &HostFacts {
            home: &home,
            var: &var,
            workspace: Some(&ws),
        },
    )
    .unwrap_err();
    assert!(matches!(err, ToolchainError::InWorkspace { .. }), "{err}");
    // Control: outside the workspace the same tree is exposed.
    let outside = dir.path().join("uv");
    touch(&outside.join("cpython-3.12/bin/python"));
    let vars = HashMap::from([("UV_PYTHON_INSTALL_DIR", outside.clone().into_os_string())]);
    let var = |name: &str| vars.get(name).cloned();
    let exposure = resolve(
        &[Toolchain::Python],
        &HostFacts {
            home: &home,
            var: &var,
            workspace: Some(&ws),
        },
    )
    .unwrap();
    assert_eq!(exposure.read_only, [fs::canonicalize(&outside).unwrap()]);
}

#[test]
fn a_go_binary_is_no_go_root_without_its_version() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    touch(&h.join(".local/bin/go"));
    let vars = HashMap::from([(
        "PATH",
        OsString::from(h.join(".local/bin").display().to_string()),
    )]);
    assert!(matches!(
        resolve_in(h, &vars, &[Toolchain::Go]),
        Err(ToolchainError::NotFound { .. })
    ));
}

#[test]
fn nvm_aliases_name_versions_never_paths_or_fifos() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    touch(&h.join(".nvm/versions/node/v22.1.0/bin/node"));
    let outside = h.join("outside");
    touch(&outside);
    for alias in [outside.display().to_string(), "../../outside".to_owned()] {
        fs::write(h.join(".nvm/alias/default"), &alias).unwrap_or_else(|_| {
            touch(&h.join(".nvm/alias/default"));
            fs::write(h.join(".nvm/alias/default"), &alias).unwrap();
        });
        let vars = HashMap::new();
        assert!(
            matches!(
                resolve_in(h, &vars, &[Toolchain::Node]),
                Err(ToolchainError::NotFound { .. })
            ),
            "{alias}"
        );
    }
    // A FIFO where the alias should be is not opened (it would block).
    fs::remove_file(h.join(".nvm/alias/default")).unwrap();
    rustix_fifo(&h.join(".nvm/alias/default"));
    let vars = HashMap::new();
    assert!(resolve_in(h, &vars, &[Toolchain::Node]).is_err());
}

fn rustix_fifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo");
    assert!(status.success());
}

#[test]
fn credential_directories_and_links_are_masked_and_a_bin_that_is_cargos_home_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    fs::create_dir_all(h.join(".rustup/toolchains/stable")).unwrap();
    touch(&h.join(".rustup/credentials/token"));
    touch(&h.join(".rustup/settings-real"));
    std::os::unix::fs::symlink("settings-real", h.join(".rustup/.npmrc")).unwrap();
    touch(&h.join(".cargo/bin/cargo"));
    let vars = HashMap::new();
    let mut masks = resolve_in(h, &vars, &[Toolchain::Rust]).unwrap().masks;
    masks.sort();
    let root = fs::canonicalize(h.join(".rustup")).unwrap();
    assert_eq!(
        masks,
        [root.join("credentials"), root.join("settings-real")]
    );
    // `~/.cargo/bin` a link to `~/.cargo`: cargo's config and credentials would be exposed.
    fs::remove_dir_all(h.join(".cargo/bin")).unwrap();
    touch(&h.join(".cargo/cargo"));
    std::os::unix::fs::symlink(h.join(".cargo"), h.join(".cargo/bin")).unwrap();
    let err = resolve_in(h, &vars, &[Toolchain::Rust]).unwrap_err();
    assert!(matches!(err, ToolchainError::NotDedicated { .. }), "{err}");
}

#[test]
fn a_tree_nested_past_the_walk_bound_is_refused_rather_than_exposed_unchecked() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    fs::create_dir_all(h.join(".rustup/toolchains")).unwrap();
    touch(&h.join(".cargo/bin/cargo"));
    let vars = HashMap::new();
    // Control: a shallow tree is walked and exposed.
    assert!(resolve_in(h, &vars, &[Toolchain::Rust]).is_ok());
    let mut deep = h.join(".rustup/toolchains");
    for _ in 0..=MAX_DEPTH {
        deep.push("d");
    }
    fs::create_dir_all(&deep).unwrap();
    let err = resolve_in(h, &vars, &[Toolchain::Rust]).unwrap_err();
    assert!(matches!(err, ToolchainError::TooLarge { .. }), "{err}");
    assert!(err.to_string().contains("remove unused versions"), "{err}");
}
