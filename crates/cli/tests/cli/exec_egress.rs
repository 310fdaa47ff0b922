//! `cordon exec` with egress (DESIGN §2, §5): `--allow` puts the session in allowlist mode behind
//! its own proxy at `127.0.0.1:3128` inside the sandbox; `--resolve` and `--allow-private` let a
//! test reach a loopback upstream by name; `--noproxy` and direct connections fail; `--audit`
//! writes one JSON line per decision; `--net open` reaches the upstream only with
//! `--allow-private` covering it.

use std::process::Output;

use crate::support::{cordon, upstream};

/// `cordon exec` in a fresh workspace with an empty operator policy (so the machine's own file
/// plays no part), `flags`, then `sh -c script`.
fn exec(flags: &[&str], script: &str) -> (Output, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).expect("mkdir");
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "").expect("write policy");
    let out = cordon()
        .arg("exec")
        .arg("-w")
        .arg(&ws)
        .arg(format!("--policy={}", policy.display()))
        .args(flags)
        .args(["--", "sh", "-c", script])
        .output()
        .expect("cordon exec");
    (out, dir)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn exec_reaches_an_allowed_name_through_its_proxy_and_nothing_else() {
    let port = upstream();
    let allow = format!("--allow=allowed.test:{port}");
    let script = format!(
        "curl -sS http://allowed.test:{port}/ok; \
         curl -sS -o /dev/null -w '%{{http_code}} ' -D - http://denied.test:{port}/ | grep -i x-cordon-reason; \
         curl -sS --noproxy '*' --max-time 5 http://allowed.test:{port}/ 2>/dev/null || echo noproxy-failed; \
         curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{port}/ 2>/dev/null || echo direct-failed"
    );
    let (out, _dir) = exec(
        &[
            &allow,
            "--resolve=allowed.test=127.0.0.1",
            "--resolve=denied.test=127.0.0.1",
            "--allow-private=127.0.0.0/8",
        ],
        &script,
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}{stdout}", text(&out.stderr));
    assert!(stdout.starts_with("hello from upstream\n"), "{stdout}");
    assert!(
        stdout.contains("X-Cordon-Reason: not_allowed"),
        "the denied name got the reason: {stdout}"
    );
    assert!(stdout.contains("noproxy-failed"), "{stdout}");
    assert!(stdout.contains("direct-failed"), "{stdout}");
}

#[test]
fn exec_names_each_refused_destination_with_the_fix_after_the_command() {
    let port = upstream();
    let (out, _dir) = exec(
        &[
            &format!("--allow=allowed.test:{port}"),
            "--resolve=allowed.test=127.0.0.1",
            "--resolve=other.test=127.0.0.1",
            "--allow-private=127.0.0.0/8",
        ],
        &format!(
            "curl -sS http://allowed.test:{port}/ >/dev/null; \
             for i in 1 2 3; do curl -sS http://other.test:{port}/ >/dev/null; done; \
             curl -sS http://192.0.2.7:81/ >/dev/null; echo done"
        ),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // The command's own output first; then one line per distinct refusal, none for the allowed.
    assert!(text(&out.stdout).ends_with("done\n"));
    let refused: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("cordon: refused "))
        .collect();
    assert_eq!(
        refused,
        [
            format!(
                "cordon: refused other.test:{port} (not_allowed): allow it with `--allow other.test:{port}`"
            ),
            "cordon: refused 192.0.2.7:81 (ip_literal): allow the address with `--allow ip:192.0.2.7:81`"
                .to_owned(),
        ],
        "{stderr}"
    );
    // Control: a command that is refused nothing gets no such line.
    let (out, _dir) = exec(
        &[
            &format!("--allow=allowed.test:{port}"),
            "--resolve=allowed.test=127.0.0.1",
            "--allow-private=127.0.0.0/8",
        ],
        &format!("curl -sS http://allowed.test:{port}/ >/dev/null"),
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(
        !text(&out.stderr).contains("refused"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn exec_audit_writes_a_line_per_decision_and_close() {
    let port = upstream();
    let dir = tempfile::tempdir().expect("tempdir");
    let audit = dir.path().join("audit.jsonl");
    let (out, _ws) = exec(
        &[
            &format!("--allow=allowed.test:{port}"),
            "--resolve=allowed.test=127.0.0.1",
            "--allow-private=127.0.0.0/8",
            &format!("--audit={}", audit.display()),
        ],
        &format!(
            "curl -sS http://allowed.test:{port}/ >/dev/null; curl -sS http://other.test/ >/dev/null; true"
        ),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&audit)
        .expect("the audit file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let decisions: Vec<(String, String)> = lines
        .iter()
        .map(|l| {
            (
                l["host"].as_str().unwrap_or_default().to_owned(),
                l["decision"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert!(
        decisions.contains(&("allowed.test".to_owned(), "allow".to_owned())),
        "{decisions:?}"
    );
    assert!(
        decisions.contains(&("other.test".to_owned(), "deny".to_owned())),
        "{decisions:?}"
    );
    assert_eq!(lines[0]["listener"], "exec");
}

#[test]
fn exec_net_open_reaches_loopback_only_when_allow_private_covers_it() {
    let port = upstream();
    let script = format!("curl -sS -D - http://named.test:{port}/ 2>&1; true");
    let resolve = "--resolve=named.test=127.0.0.1";
    let (refused, _a) = exec(&["--net", "open", resolve], &script);
    assert_eq!(refused.status.code(), Some(0), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stdout).contains("X-Cordon-Reason: private_address"),
        "{}",
        text(&refused.stdout)
    );
    let (reached, _b) = exec(
        &["--net", "open", resolve, "--allow-private=127.0.0.0/8"],
        &script,
    );
    assert!(
        text(&reached.stdout).contains("hello from upstream"),
        "{}",
        text(&reached.stdout)
    );
}

#[test]
fn exec_refuses_bad_egress_options_with_125() {
    for (flags, needle) in [
        (&["--allow=10.0.0.1"][..], "write an ip: rule"),
        (&["--net", "sideways"][..], "is not a network mode"),
        (
            &["--allow-private=nonsense"][..],
            "--allow-private nonsense",
        ),
    ] {
        let (out, _dir) = exec(flags, "true");
        assert_eq!(out.status.code(), Some(125), "{flags:?}");
        let err = text(&out.stderr);
        assert!(err.contains(needle), "{flags:?}: {err}");
    }
}

#[test]
fn exec_refuses_a_policy_file_inside_the_workspace() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("policy.toml"), "").expect("write");
    let out = cordon()
        .arg("exec")
        .arg("-w")
        .arg(dir.path())
        .arg(format!(
            "--policy={}",
            dir.path().join("policy.toml").display()
        ))
        .args(["--allow=example.com", "--", "true"])
        .output()
        .expect("cordon exec");
    assert_eq!(out.status.code(), Some(125));
    let err = text(&out.stderr);
    assert!(
        err.contains("is inside the workspace") && err.contains("move it outside"),
        "{err}"
    );
}

#[test]
fn exec_refuses_an_audit_file_the_sandboxed_command_could_rewrite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).expect("mkdir");
    // Inside the workspace, directly and through a symlink from outside it.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&ws, &link).expect("symlink");
    // An empty operator policy, so the machine's own file plays no part.
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "").expect("write policy");
    let policy = format!("--policy={}", policy.display());
    for audit in [ws.join("audit.jsonl"), link.join("audit.jsonl")] {
        let out = cordon()
            .arg("exec")
            .arg("-w")
            .arg(&ws)
            .arg(format!("--audit={}", audit.display()))
            .arg(&policy)
            .args(["--allow=example.test", "--", "true"])
            .output()
            .expect("cordon exec");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{stderr}");
        assert!(
            stderr.contains("is inside the workspace") && stderr.contains("move it outside"),
            "{stderr}"
        );
        assert!(
            !ws.join("audit.jsonl").exists(),
            "the audit file was created"
        );
    }
    // The control: the same run with the audit file beside the workspace.
    let beside = dir.path().join("audit.jsonl");
    let out = cordon()
        .arg("exec")
        .arg("-w")
        .arg(&ws)
        .arg(format!("--audit={}", beside.display()))
        .arg(&policy)
        .args(["--allow=example.test", "--", "true"])
        .output()
        .expect("cordon exec");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(beside.exists());
}

#[test]
fn an_audit_file_that_cannot_be_written_is_an_error_also_without_egress() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no/such/dir/audit.jsonl");
    let (out, _ws) = exec(&[&format!("--audit={}", missing.display())], "true");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("the audit file") && stderr.contains("pass a writable path to `--audit`"),
        "{stderr}"
    );
    // The control: a writable path offline gets an empty file (nothing was decided).
    let fine = dir.path().join("audit.jsonl");
    let (out, _ws) = exec(&[&format!("--audit={}", fine.display())], "true");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&fine).expect("the audit file"), "");
}

#[test]
fn egress_suggest_reads_an_audit_file_and_refuses_one_that_is_not() {
    let port = upstream();
    let dir = tempfile::tempdir().expect("tempdir");
    let audit = dir.path().join("audit.jsonl");
    let (out, _ws) = exec(
        &[
            "--net=open",
            "--resolve=open.test=127.0.0.1",
            "--allow-private=127.0.0.0/8",
            &format!("--audit={}", audit.display()),
        ],
        // The IP literal is refused (`ip_literal`), which no allow pattern of a name lifts.
        &format!(
            "curl -sS http://open.test:{port}/ >/dev/null; curl -sS http://127.0.0.1:{port}/ >/dev/null; true"
        ),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = cordon()
        .args(["egress", "suggest", "--audit"])
        .arg(&audit)
        .output()
        .expect("cordon egress suggest");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("# exec: "), "{stdout}");
    assert!(
        stdout.ends_with(&format!("network:\n  allow:\n    - \"open.test:{port}\"\n")),
        "{stdout}"
    );
    // A file that holds no records: exit 2, naming what to pass.
    let junk = dir.path().join("junk.txt");
    std::fs::write(&junk, "not json\n").expect("write");
    let out = cordon()
        .args(["egress", "suggest", "--audit"])
        .arg(&junk)
        .output()
        .expect("cordon egress suggest");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("holds no egress records; pass the file `--audit` wrote"),
        "{}",
        text(&out.stderr)
    );
    // A missing file, a FIFO (which would block a plain open) and a sparse file past the bound
    // are each refused at once, with what to pass instead.
    let fifo = dir.path().join("fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo")
            .success()
    );
    let huge = dir.path().join("huge.jsonl");
    std::fs::File::create(&huge)
        .expect("create")
        .set_len(1 << 40)
        .expect("sparse");
    for (file, why) in [
        (dir.path().join("missing.jsonl"), "it does not exist"),
        (fifo, "not a regular file"),
        (huge, "is larger than 256 MiB; pass a smaller one"),
    ] {
        let out = cordon()
            .args(["egress", "suggest", "--audit"])
            .arg(&file)
            .output()
            .expect("cordon egress suggest");
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains(why), "{}", text(&out.stderr));
    }
}
