//! Host toolchains in sandboxes (DESIGN §11): `--toolchain` / `isolation.toolchains` expose the
//! invoking user's rustup and pyenv read-only with their `bin` on `PATH`; a toolchain this user
//! cannot reach (root's, for uid 65534) is a clear error naming where cordon looked; a credential
//! file inside an exposed tree stays masked; a program the sandbox cannot find is traced to the
//! hidden home and the key that exposes it.

use std::path::PathBuf;

use crate::exec::exec;
use crate::run::{Fixture, stderr};
use crate::support::cordon;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// This user's home, as cordon finds it (`/etc/passwd`, as the sandbox does).
fn passwd_home() -> PathBuf {
    cordon_sandbox::host_user().home
}

/// Where cordon looks for rustup's home: `$RUSTUP_HOME`, else `~/.rustup`.
fn rustup_home() -> PathBuf {
    std::env::var_os("RUSTUP_HOME")
        .filter(|v| !v.is_empty())
        .map_or_else(|| passwd_home().join(".rustup"), PathBuf::from)
}

/// Where cordon looks for pyenv: `$PYENV_ROOT`, else `~/.pyenv`.
fn pyenv_root() -> PathBuf {
    std::env::var_os("PYENV_ROOT")
        .filter(|v| !v.is_empty())
        .map_or_else(|| passwd_home().join(".pyenv"), PathBuf::from)
}

/// A crate without dependencies in a fresh workspace.
fn hello_crate() -> tempfile::TempDir {
    let ws = tempfile::Builder::new()
        .prefix("cordon-toolchain-")
        .tempdir()
        .expect("tempdir");
    std::fs::write(
        ws.path().join("Cargo.toml"),
        "[package]\nname = \"hello\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .expect("write");
    std::fs::create_dir(ws.path().join("src")).expect("mkdir");
    std::fs::write(
        ws.path().join("src/main.rs"),
        "fn main() { println!(\"hello from cargo\"); }\n",
    )
    .expect("write");
    ws
}

#[test]
fn toolchain_rust_builds_a_crate_offline_or_names_where_it_looked() {
    let ws = hello_crate();
    let out = exec(
        ws.path(),
        &["--toolchain", "rust"],
        &["cargo", "run", "--offline", "-q"],
    );
    if rustup_home().join("toolchains").is_dir() {
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "hello from cargo\n");
        // Cargo's home in the sandbox was a session directory: nothing landed in the host's.
        assert!(ws.path().join("target").is_dir());
    } else {
        // This user cannot reach the toolchain (root's, as uid 65534): exit 125, naming it.
        assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
        let message = text(&out.stderr);
        assert!(
            message.contains("the rust toolchain was not found: cordon looked for")
                && message.contains(&rustup_home().display().to_string())
                && message.contains("set RUSTUP_HOME and CARGO_HOME"),
            "{message}"
        );
    }
    // Control: without the toolchain the sandbox has no cargo.
    let out = exec(ws.path(), &[], &["cargo", "--version"]);
    assert_eq!(out.status.code(), Some(127), "{}", text(&out.stderr));
}

#[test]
fn toolchain_python_makes_a_venv_from_the_pyenv_python() {
    let ws = tempfile::Builder::new()
        .prefix("cordon-toolchain-")
        .tempdir()
        .expect("tempdir");
    let out = exec(
        ws.path(),
        &["--toolchain", "python"],
        &[
            "sh",
            "-c",
            "python3 -m venv .venv && .venv/bin/python -c 'import sys; print(sys.base_prefix)'",
        ],
    );
    if pyenv_root().join("versions").is_dir() {
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        // The venv's interpreter is pyenv's, at its host path.
        assert!(
            text(&out.stdout).starts_with(&pyenv_root().join("versions").display().to_string()),
            "{}",
            text(&out.stdout)
        );
        assert!(ws.path().join(".venv/bin/python").exists());
    } else {
        assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("the python toolchain was not found"),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn a_credential_file_inside_an_exposed_toolchain_stays_masked() {
    // A toolchain of its own outside the home (RUSTUP_HOME / CARGO_HOME moved), with a registry
    // token file inside it.
    let dir = tempfile::Builder::new()
        .prefix("cordon-toolchain-")
        .tempdir()
        .expect("tempdir");
    let rustup = dir.path().join("rustup");
    std::fs::create_dir_all(rustup.join("toolchains/fake/etc")).expect("mkdir");
    std::fs::write(
        rustup.join("toolchains/fake/etc/.npmrc"),
        "token=canary-npm\n",
    )
    .expect("write");
    std::fs::write(rustup.join("settings.toml"), "fake = true\n").expect("write");
    let cargo_bin = dir.path().join("cargo/bin");
    std::fs::create_dir_all(&cargo_bin).expect("mkdir");
    std::fs::write(cargo_bin.join("cargo"), "#!/bin/sh\necho fake cargo\n").expect("write");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).expect("mkdir");
    // Readable by the sandbox's user whoever runs the test.
    for path in [dir.path(), &rustup, &cargo_bin] {
        let _ = std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755));
    }
    let out = cordon()
        .args(["exec", "-w"])
        .arg(&ws)
        .args(["--toolchain", "rust", "--", "sh", "-c"])
        .arg(format!(
            "cat {}/settings.toml; cat {}/toolchains/fake/etc/.npmrc; echo \"$RUSTUP_HOME\"",
            rustup.display(),
            rustup.display()
        ))
        .env("RUSTUP_HOME", &rustup)
        .env("CARGO_HOME", dir.path().join("cargo"))
        .output()
        .expect("cordon exec");
    let stdout = text(&out.stdout);
    // Control: the tree itself is there, at its host path.
    assert!(
        stdout.starts_with("fake = true\n"),
        "{stdout}{}",
        text(&out.stderr)
    );
    assert!(
        stdout.ends_with(&format!("{}\n", rustup.display())),
        "{stdout}"
    );
    assert!(
        !stdout.contains("canary-npm"),
        "a credential file was readable: {stdout}"
    );
    // Control: the host reads it.
    assert!(
        std::fs::read_to_string(rustup.join("toolchains/fake/etc/.npmrc"))
            .expect("read")
            .contains("canary-npm")
    );
}

#[test]
fn a_toolchain_root_that_is_the_home_directory_is_refused() {
    let ws = hello_crate();
    let ran = ws.path().join("ran");
    let command = format!("touch {}", ran.display());
    let out = cordon()
        .args(["exec", "-w"])
        .arg(ws.path())
        .args(["--toolchain", "python", "--", "sh", "-c", &command])
        .env("PYENV_ROOT", passwd_home())
        .output()
        .expect("cordon exec");
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    let message = text(&out.stderr);
    // Either it is refused as the home itself, or (a home without `versions`) not found there.
    assert!(
        message.contains("is the home directory or holds it")
            || message.contains("the python toolchain was not found"),
        "{message}"
    );
    assert!(
        !ran.exists(),
        "the command ran although the toolchain was refused"
    );
    let out = cordon()
        .args(["exec", "-w"])
        .arg(ws.path())
        .args(["--toolchain", "ruby", "--", "sh", "-c", &command])
        .output()
        .expect("cordon exec");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr)
            .contains("`--toolchain ruby` is not a toolchain; use rust, python, node or go"),
        "{}",
        text(&out.stderr)
    );
    assert!(!ran.exists());
    // Control: the same command without the toolchain runs.
    let out = cordon()
        .args(["exec", "-w"])
        .arg(ws.path())
        .args(["--", "sh", "-c", &command])
        .output()
        .expect("cordon exec");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(ran.exists());
}

#[test]
fn a_program_in_the_hidden_home_is_named_with_the_key_that_exposes_it() {
    // A home of this user's own with a tool on PATH below it.
    let home = passwd_home();
    let ws = hello_crate();
    let out = exec(ws.path(), &[], &["cargo", "--version"]);
    assert_eq!(out.status.code(), Some(127), "{}", text(&out.stderr));
    let on_path_in_home = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path)
            .any(|dir| dir.starts_with(&home) && dir.join("cargo").is_file())
    });
    let message = text(&out.stderr);
    if on_path_in_home {
        assert!(
            message.contains(
                "in the home directory the sandbox hides: expose it with `--toolchain rust`"
            ),
            "{message}"
        );
    } else {
        // Control: nothing of this user's home is on PATH, and the plain message stays.
        assert!(
            message.contains("`cargo` not found in the sandbox (check PATH"),
            "{message}"
        );
    }
}

#[test]
fn isolation_toolchains_rust_runs_cargo_in_a_pipeline_step() {
    let f = Fixture::new(
        "name: t\nisolation:\n  toolchains: [rust]\nsteps:\n  - name: build\n    command: cargo new -q --offline --vcs none demo && cd demo && cargo run -q --offline > ../out.txt\n",
    );
    let out = f.run(&["--no-ui"]);
    if rustup_home().join("toolchains").is_dir() {
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(
            std::fs::read_to_string(f.ws.join("out.txt")).expect("out.txt"),
            "Hello, world!\n"
        );
    } else {
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("`isolation.toolchains`: the rust toolchain was not found"),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn toolchain_go_runs_a_module_with_the_distributions_go() {
    // `.ci/run` installs the distribution's Go (golang-go): `/usr/bin/go` links into its root.
    assert!(
        std::path::Path::new("/usr/bin/go").exists(),
        "this test needs the distribution's Go: install golang-go"
    );
    let ws = tempfile::Builder::new()
        .prefix("cordon-toolchain-")
        .tempdir()
        .expect("tempdir");
    std::fs::write(ws.path().join("go.mod"), "module hello\n\ngo 1.19\n").expect("write");
    std::fs::write(
        ws.path().join("main.go"),
        "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from go\") }\n",
    )
    .expect("write");
    let out = exec(
        ws.path(),
        &["--toolchain", "go"],
        &["sh", "-c", "go env GOROOT && go run ."],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let root = std::fs::canonicalize("/usr/bin/go")
        .expect("resolve go")
        .parent()
        .and_then(std::path::Path::parent)
        .expect("a root")
        .to_path_buf();
    assert_eq!(
        text(&out.stdout),
        format!("{}\nhello from go\n", root.display())
    );
}

#[test]
fn toolchain_node_runs_a_test_suite_with_the_nvm_default_version() {
    // An nvm directory as nvm lays it out (`versions/node/vX/bin/node`, `alias/default`), holding
    // the distribution's node (`.ci/run` installs nodejs): the node of nvm's default is the one
    // the sandbox runs, not `/usr/bin/node`.
    assert!(
        std::path::Path::new("/usr/bin/node").exists(),
        "this test needs the distribution's node: install nodejs"
    );
    let nvm = tempfile::Builder::new()
        .prefix("cordon-nvm-")
        .tempdir()
        .expect("tempdir");
    let nvm_dir = nvm.path().canonicalize().expect("canonical");
    let bin = nvm_dir.join("versions/node/v20.99.0/bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    std::fs::create_dir_all(nvm_dir.join("versions/node/v18.0.0/bin")).expect("mkdir");
    std::fs::copy("/usr/bin/node", bin.join("node")).expect("copy node");
    std::fs::create_dir(nvm_dir.join("alias")).expect("mkdir");
    std::fs::write(nvm_dir.join("alias/default"), "20\n").expect("write");
    let ws = tempfile::Builder::new()
        .prefix("cordon-toolchain-")
        .tempdir()
        .expect("tempdir");
    std::fs::write(
        ws.path().join("sum.test.js"),
        "const test = require('node:test');\nconst assert = require('node:assert');\n\
         test('adds', () => assert.strictEqual(1 + 1, 2));\n",
    )
    .expect("write");
    let out = cordon()
        .env("NVM_DIR", &nvm_dir)
        .args(["exec", "--toolchain", "node", "-w"])
        .arg(ws.path())
        .args([
            "--",
            "sh",
            "-c",
            "command -v node && node --test sum.test.js",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("cordon exec");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert_eq!(
        stdout.lines().next(),
        Some(bin.join("node").to_str().expect("utf-8")),
        "nvm's default version runs: {stdout}"
    );
    assert!(stdout.contains("# pass 1"), "{stdout}");
    // Control: without the toolchain the sandbox's node is the distribution's.
    let out = cordon()
        .env("NVM_DIR", &nvm_dir)
        .args(["exec", "-w"])
        .arg(ws.path())
        .args(["--", "sh", "-c", "command -v node"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("cordon exec");
    assert_eq!(text(&out.stdout), "/usr/bin/node\n");
}
