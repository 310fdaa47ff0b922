//! The root: exactly the system directories and the session's own mounts; writes land only in the
//! workspace (and the private tmpfs mounts, which the host never sees).

use std::collections::BTreeSet;
use std::path::{Component, Path};

use crate::support::*;

fn top(path: &Path) -> Option<String> {
    path.components().find_map(|c| match c {
        Component::Normal(name) => Some(name.to_string_lossy().into_owned()),
        _ => None,
    })
}

#[test]
fn root_holds_only_system_dirs_and_session_mounts() {
    let ws = workspace();
    let mut session = open(ws.path());
    let listing = stdout(&sh(&mut session, "ls -A /"));
    let seen: BTreeSet<&str> = listing.lines().collect();
    let mut allowed: BTreeSet<String> = [
        "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt", "dev", "proc",
        "tmp", "var", "run",
    ]
    .map(String::from)
    .into();
    allowed.extend(top(session.workspace()));
    allowed.extend(top(&session.identity().home));
    for name in &seen {
        assert!(
            allowed.contains(*name),
            "unexpected /{name} in the sandbox root: {seen:?}"
        );
    }
    for needed in ["usr", "etc", "dev", "proc", "tmp"] {
        assert!(seen.contains(needed), "/{needed} is missing: {seen:?}");
    }
    // `/var` and `/run` hold only the session's own directories.
    let own = stdout(&sh(&mut session, "ls -A /var /run /run/user"));
    assert_eq!(
        own,
        format!(
            "/run:\nuser\n\n/run/user:\n{}\n\n/var:\ntmp\n",
            session.identity().uid
        )
    );
    // Control: the host has what the sandbox must not show.
    assert!(Path::new("/var/lib").is_dir());
}

#[test]
fn var_tmp_and_the_runtime_directory_are_private_and_counted_in_the_tmp_cap() {
    let ws = workspace();
    let mut config = config(ws.path());
    config.tmp_size = 8 << 20;
    let mut session = cordon_sandbox::Session::open(config).expect("open a session");
    let name = format!("cordon-var-tmp-{}", unique());
    let script = format!(
        "set -e; f=$(mktemp -p /var/tmp); echo made $f; touch /var/tmp/{name}; \
         test \"$XDG_RUNTIME_DIR\" = /run/user/$(id -u); stat -c 'runtime %a %u' \"$XDG_RUNTIME_DIR\"; \
         touch \"$XDG_RUNTIME_DIR/sock\"; \
         if dd if=/dev/zero of=/var/tmp/big bs=1M count=16 2>/dev/null; then echo fits; else echo capped; fi"
    );
    let out = sh(&mut session, &script);
    let text = stdout(&out);
    assert_eq!(out.status, cordon_sandbox::ExitStatus::Code(0), "{out:?}");
    assert!(text.contains("made /var/tmp/tmp."), "{text}");
    assert!(
        text.contains(&format!("runtime 700 {}", session.identity().uid)),
        "{text}"
    );
    assert!(
        text.contains("capped"),
        "/var/tmp is not in the cap: {text}"
    );
    // Judged on the host: nothing reached its /var/tmp, which exists there.
    assert!(Path::new("/var/tmp").is_dir());
    assert!(!Path::new("/var/tmp").join(&name).exists());
}

#[test]
fn python_bytecode_never_lands_in_the_workspace_and_a_rewrite_is_never_stale() {
    let Some(python) = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        panic!("no system python3 (install python3, or list this test in CORDON_TEST_MISSING)")
    };
    let ws = workspace();
    // The same size and the same mtime before and after the rewrite: what `__pycache__` trusts.
    let rewrite = "import os; st = os.stat('m.py'); open('m.py', 'w').write('X = 2\\n'); \
                   os.utime('m.py', ns=(st.st_atime_ns, st.st_mtime_ns))";
    let script = |python: &str| {
        format!(
            "cd {ws} && printf 'X = 1\\n' > m.py && {python} -c 'import m; print(m.X)' && \
             {python} -c \"{rewrite}\" && {python} -c 'import m; print(m.X)'",
            ws = ws.path().display()
        )
    };
    // Control, bare on the host: the second import runs the stale bytecode.
    let bare_ws = workspace();
    let bare = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(script(python).replace(
            &ws.path().display().to_string(),
            &bare_ws.path().display().to_string(),
        ))
        .env_remove("PYTHONPYCACHEPREFIX")
        .env_remove("PYTHONDONTWRITEBYTECODE")
        .output()
        .expect("run python on the host");
    assert_eq!(String::from_utf8_lossy(&bare.stdout), "1\n1\n", "{bare:?}");
    assert!(bare_ws.path().join("__pycache__").is_dir());
    // In a session: each command compiles afresh, and nothing lands in the workspace.
    let mut session = open(ws.path());
    let mut out = String::new();
    for part in script(python).split(" && ").skip(1) {
        let step = sh(
            &mut session,
            &format!("cd {} && {part}", ws.path().display()),
        );
        assert_eq!(step.status, cordon_sandbox::ExitStatus::Code(0), "{step:?}");
        out.push_str(&stdout(&step));
    }
    assert_eq!(out, "1\n2\n");
    assert!(!ws.path().join("__pycache__").exists());
}

#[test]
fn host_tmp_and_home_directories_are_invisible() {
    let ws = workspace();
    let marker = std::env::temp_dir().join(format!("cordon-host-marker-{}", unique()));
    std::fs::write(&marker, "host").expect("write the marker");
    let mut session = open(ws.path());
    let script = format!(
        "test -e {0} && echo seen {0}; ls -A /root /home 2>/dev/null | grep -v ':$' | grep . && echo listed",
        marker.display()
    );
    let out = sh(&mut session, &script);
    // Control: the same probe finds the marker on the host.
    let control = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(&script)
        .output()
        .expect("run the probe on the host");
    let _ = std::fs::remove_file(&marker);
    assert!(
        String::from_utf8_lossy(&control.stdout).contains("seen"),
        "control: {control:?}"
    );
    assert!(
        !stdout(&out).contains("seen"),
        "the host /tmp is visible: {out:?}"
    );
    assert!(
        !stdout(&out).contains("listed"),
        "a home directory has content: {out:?}"
    );
}

#[test]
fn writes_outside_the_workspace_fail_and_leave_the_host_untouched() {
    let ws = workspace();
    let name = format!("cordon-write-{}", unique());
    let refused =
        ["/etc", "/usr", "/opt", "/", "/dev", "/proc"].map(|dir| Path::new(dir).join(&name));
    let private = std::env::temp_dir().join(&name);
    let inside = ws.path().join(&name);
    let mut session = open(ws.path());
    let script: String = refused
        .iter()
        .chain([&private, &inside])
        .map(|t| format!("echo x > {0} 2>/dev/null && echo wrote {0};\n", t.display()))
        .collect();
    let out = stdout(&sh(&mut session, &script));
    for target in &refused {
        assert!(
            !out.contains(&format!("wrote {}", target.display())),
            "wrote {}: {out}",
            target.display()
        );
        assert!(
            !target.exists(),
            "{} appeared on the host",
            target.display()
        );
    }
    // The sandbox's /tmp is its own: the write succeeds there, and the host never sees it.
    assert!(
        out.contains(&format!("wrote {}", private.display())),
        "{out}"
    );
    assert!(
        !private.exists(),
        "a sandbox /tmp write reached the host /tmp"
    );
    // Control: the same write into the workspace works and reaches the host.
    assert!(
        out.contains(&format!("wrote {}", inside.display())),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(&inside).expect("the workspace write reached the host"),
        "x\n"
    );
}

#[test]
fn read_only_paths_are_readable_but_not_writable() {
    let ws = workspace();
    let shared = tempfile::tempdir().expect("a directory to share");
    std::fs::write(shared.path().join("data"), "shared\n").expect("write");
    let mut config = config(ws.path());
    config.read_only = vec![shared.path().to_path_buf()];
    let mut session = cordon_sandbox::Session::open(config).expect("the session opens");
    let dir = shared.path().display();
    let out = stdout(&sh(
        &mut session,
        &format!(
            "cat {dir}/data; echo y > {dir}/data 2>/dev/null && echo wrote; touch {dir}/new 2>/dev/null && echo created"
        ),
    ));
    assert_eq!(
        out, "shared\n",
        "the read-only path was writable or unreadable"
    );
    assert_eq!(
        std::fs::read_to_string(shared.path().join("data")).expect("read"),
        "shared\n"
    );
    assert!(!shared.path().join("new").exists());
}

#[test]
fn hidden_paths_and_root_env_files_are_masked() {
    let ws = workspace();
    std::fs::create_dir(ws.path().join("secrets")).expect("mkdir");
    for (file, text) in [
        ("secrets/key", "k"),
        (".env", "e"),
        (".env.local", "l"),
        (".env.example", "x"),
        ("visible", "v"),
    ] {
        std::fs::write(ws.path().join(file), text).expect("write");
    }
    let mut config = config(ws.path());
    config.hide = vec!["secrets".into()];
    let mut session = cordon_sandbox::Session::open(config).expect("the session opens");
    let out = stdout(&sh(
        &mut session,
        "for f in secrets/key .env .env.local .env.example visible; do printf '%s=' $f; cat $f 2>/dev/null; echo; done; echo y > .env 2>/dev/null && echo rewrote",
    ));
    // The template stays, and `visible` is the control: the probe reads what is not masked.
    assert_eq!(
        out, "secrets/key=\n.env=\n.env.local=\n.env.example=x\nvisible=v\n",
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join(".env")).expect("read"),
        "e"
    );
}

#[test]
fn a_hidden_path_cannot_be_moved_out_from_under_its_mask() {
    let ws = workspace();
    std::fs::create_dir_all(ws.path().join("config/deep")).expect("mkdir");
    std::fs::write(ws.path().join("config/deep/secrets.yml"), "key").expect("write");
    std::fs::write(ws.path().join("config/other"), "o").expect("write");
    let hidden_config = |ws: &std::path::Path| {
        let mut config = config(ws);
        config.hide = vec!["config/deep/secrets.yml".into()];
        config
    };
    let mut session = cordon_sandbox::Session::open(hidden_config(ws.path())).expect("opens");
    let out = stdout(&sh(
        &mut session,
        "mv config config2 2>/dev/null && echo moved-config; \
         mv config/deep config/deep2 2>/dev/null && echo moved-deep; \
         cat config/deep/secrets.yml; cat config/other && echo control",
    ));
    session.close();
    // Reading the unmasked neighbour is the control.
    assert_eq!(out, "ocontrol\n", "{out}");
    assert!(ws.path().join("config/deep/secrets.yml").exists());
    assert!(!ws.path().join("config2").exists() && !ws.path().join("config/deep2").exists());
    // The next session still masks it.
    let mut next = cordon_sandbox::Session::open(hidden_config(ws.path())).expect("opens");
    let out = stdout(&sh(&mut next, "cat config/deep/secrets.yml; echo end"));
    assert_eq!(out, "end\n");
}

#[test]
fn home_shares_one_size_cap_with_tmp() {
    let ws = workspace();
    let mut session = open(ws.path());
    // One tmpfs: the same device for HOME, /tmp and /dev/shm.
    let out = stdout(&sh(
        &mut session,
        "stat -c %d \"$HOME\" /tmp /dev/shm | sort -u | wc -l; stat -c %d \"$HOME\" /proc | sort -u | wc -l",
    ));
    // The second count is the control: different filesystems do show different devices.
    assert_eq!(out, "1\n2\n", "{out}");
}

#[test]
fn a_hidden_path_through_a_symlink_is_refused_since_the_link_could_be_repointed() {
    let ws = workspace();
    std::fs::create_dir(ws.path().join("real")).expect("mkdir");
    std::fs::write(ws.path().join("real/secrets.yml"), "key").expect("write");
    std::os::unix::fs::symlink("real", ws.path().join("config")).expect("symlink");
    let mut hidden = config(ws.path());
    hidden.hide = vec!["config/secrets.yml".into()];
    let err = cordon_sandbox::Session::open(hidden)
        .err()
        .expect("the session is refused");
    assert!(err.to_string().contains("symbolic link"), "{err}");
    // A root `.env` link is refused the same way.
    let ws = workspace();
    std::fs::write(ws.path().join("prod.env"), "key").expect("write");
    std::os::unix::fs::symlink("prod.env", ws.path().join(".env")).expect("symlink");
    let err = cordon_sandbox::Session::open(config(ws.path()))
        .err()
        .expect("the session is refused");
    let text = err.to_string();
    assert!(
        text.contains("/.env`") && text.contains("symbolic link"),
        "{text}"
    );
    // Control: the real path hides fine.
    let mut real = config(ws.path());
    std::fs::remove_file(ws.path().join(".env")).expect("rm");
    real.hide = vec!["prod.env".into()];
    let mut session = cordon_sandbox::Session::open(real).expect("opens");
    assert_eq!(stdout(&sh(&mut session, "cat prod.env; echo end")), "end\n");
}
