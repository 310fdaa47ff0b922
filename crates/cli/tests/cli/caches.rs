//! Persistent download caches (DESIGN §11, §18): `isolation.caches` and `cordon exec --cache`
//! keep a tool's downloads between runs of one pipeline (or execs in one workspace) and nowhere
//! else; `isolation.cache_limit` empties one that grew past it; `cordon cache ls|clear` manage
//! them, and clearing never follows what a sandbox planted. Judged on the host: the files in the
//! state directory and a canary beside it.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use crate::run::{Fixture, stderr};
use crate::support::cordon;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A step that reports whether an earlier session left `$PIP_CACHE_DIR/http/seen`, then leaves it.
const SEEN: &str = r#"name: cached
isolation:
  caches: [pip]
steps:
  - name: look
    command: [sh, -c, 'if [ -f "$PIP_CACHE_DIR/http/seen" ]; then echo seen=yes; else echo seen=no; fi; touch "$PIP_CACHE_DIR/http/seen"']
"#;

/// The `look` step's verdict on the last run, from its logs.
fn seen(f: &Fixture) -> String {
    let out = f.cordon(&["logs", "--last"]).output().expect("cordon logs");
    let logs = text(&out.stdout) + &text(&out.stderr);
    if logs.contains("seen=yes") {
        "yes".into()
    } else if logs.contains("seen=no") {
        "no".into()
    } else {
        panic!("no verdict in the logs: {logs}")
    }
}

/// Every cache directory named `name` in the state directory `state`.
fn cache_dirs(state: &Path, name: &str) -> Vec<PathBuf> {
    let Ok(keys) = std::fs::read_dir(state.join("caches")) else {
        return Vec::new();
    };
    keys.flatten()
        .map(|key| key.path().join(name))
        .filter(|dir| dir.is_dir())
        .collect()
}

#[test]
fn a_pipeline_cache_survives_two_runs_and_is_invisible_to_another_pipeline() {
    let a = Fixture::new(SEEN);
    let out = a.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(seen(&a), "no", "the first run starts empty");
    let out = a.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        seen(&a),
        "yes",
        "the second run finds the first run's download"
    );

    // The file is on the host, in the state directory, owned by the sandbox's uid: as root an
    // unowned uid, never root.
    let dirs = cache_dirs(&a.state, "pip");
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let file = dirs[0].join("http/seen");
    let owner = std::fs::metadata(&file)
        .expect("the cache file is on the host")
        .uid();
    let me = std::fs::metadata("/proc/self").expect("proc").uid();
    if me == 0 {
        assert_ne!(owner, 0, "nothing the sandbox writes is root's");
    } else {
        assert_eq!(owner, me, "unprivileged, the sandbox is the user");
    }

    // Another pipeline with the same state directory: its own, empty cache.
    let mut b = Fixture::new(SEEN);
    b.state = a.state.clone();
    let out = b.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        seen(&b),
        "no",
        "another pipeline never sees this one's cache"
    );
    assert_eq!(cache_dirs(&a.state, "pip").len(), 2);
}

/// `cordon exec --cache …` with the state directory `state`.
fn exec(state: &Path, ws: &Path, options: &[&str], script: &str) -> Output {
    cordon()
        .env("CORDON_STATE_DIR", state)
        .arg("exec")
        .arg("-w")
        .arg(ws)
        .args(options)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .expect("cordon exec")
}

fn cache(state: &Path, args: &[&str]) -> Output {
    cordon()
        .arg("cache")
        .args(args)
        .arg("--state-dir")
        .arg(state)
        .output()
        .expect("cordon cache")
}

struct Dirs {
    _dir: tempfile::TempDir,
    state: PathBuf,
    one: PathBuf,
    two: PathBuf,
    /// Beside the caches: stands for the rest of the host.
    canary: PathBuf,
}

fn dirs() -> Dirs {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    let (one, two, canary) = (root.join("one"), root.join("two"), root.join("canary"));
    for d in [&one, &two, &canary] {
        std::fs::create_dir(d).expect("mkdir");
    }
    std::fs::write(canary.join("id_ed25519"), "canary").expect("write");
    Dirs {
        state: root.join("state"),
        _dir: dir,
        one,
        two,
        canary,
    }
}

const LOOK: &str = "if [ -f \"$GOMODCACHE/mod\" ]; then echo seen=yes; else echo seen=no; fi";

#[test]
fn exec_caches_are_kept_per_workspace_listed_and_cleared_one_workspace_at_a_time() {
    let d = dirs();
    for ws in [&d.one, &d.two] {
        let out = exec(
            &d.state,
            ws,
            &["--cache", "go"],
            "echo module > \"$GOMODCACHE/mod\"",
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let out = exec(&d.state, &d.one, &["--cache", "go"], LOOK);
    assert_eq!(text(&out.stdout), "seen=yes\n", "{}", text(&out.stderr));
    // Control: without `--cache` the variable is unset and nothing is there.
    let out = exec(
        &d.state,
        &d.one,
        &[],
        "test -z \"$GOMODCACHE\" && echo unset",
    );
    assert_eq!(text(&out.stdout), "unset\n", "{}", text(&out.stderr));

    let listed = cache(&d.state, &["ls"]);
    let listing = text(&listed.stdout);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    for ws in [&d.one, &d.two] {
        let line = format!("exec {}", ws.display());
        assert!(
            listing
                .lines()
                .any(|l| l.starts_with("go ") && l.ends_with(&line)),
            "{listing}"
        );
    }
    let json = text(&cache(&d.state, &["ls", "--json"]).stdout);
    let first: serde_json::Value =
        serde_json::from_str(json.lines().next().expect("a line")).expect("json");
    assert_eq!(first["name"], "go");
    assert!(first["bytes"].as_u64().is_some_and(|b| b > 0), "{json}");

    let one = d.one.display().to_string();
    let out = cache(&d.state, &["clear", "go", "--workspace", &one]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("cleared go ("),
        "{}",
        text(&out.stderr)
    );
    let out = exec(&d.state, &d.one, &["--cache", "go"], LOOK);
    assert_eq!(text(&out.stdout), "seen=no\n", "cleared");
    let out = exec(&d.state, &d.two, &["--cache", "go"], LOOK);
    assert_eq!(
        text(&out.stdout),
        "seen=yes\n",
        "the other workspace's cache is kept"
    );
}

#[test]
fn clearing_a_cache_removes_what_the_sandbox_planted_and_never_follows_it() {
    let d = dirs();
    let canary = d.canary.display();
    // Links to the canary (and to its directory), a read-only module tree like Go's own, an
    // unreadable directory, a FIFO, and a chain deeper than the host holds open at once.
    let script = format!(
        "cd \"$GOMODCACHE\" && ln -s {canary} dir && ln -s {canary}/id_ed25519 key && \
         mkdir -p ro/pkg && echo x > ro/pkg/file && chmod -R a-w ro && \
         mkdir -p none/inner && chmod 000 none && mkfifo fifo && \
         p=deep; i=0; while [ $i -lt 100 ]; do p=$p/d; i=$((i+1)); done; mkdir -p $p && \
         ln -s {canary} $p/up && echo planted"
    );
    let out = exec(&d.state, &d.one, &["--cache", "go"], &script);
    assert_eq!(text(&out.stdout), "planted\n", "{}", text(&out.stderr));
    let out = cache(&d.state, &["clear"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(cache_dirs(&d.state, "go").is_empty(), "the cache is gone");
    // The canary and its directory are untouched; the host can still read it (the control).
    assert_eq!(
        std::fs::read_to_string(d.canary.join("id_ed25519")).expect("canary"),
        "canary"
    );
    assert_eq!(std::fs::read_dir(&d.canary).expect("canary dir").count(), 1);
}

#[test]
fn a_cache_over_its_limit_is_emptied_when_the_next_run_opens_it() {
    let f = Fixture::new(
        r#"name: big
isolation:
  caches: [pip]
  cache_limit: 64K
steps:
  - name: fill
    command: [sh, -c, 'if [ -f "$PIP_CACHE_DIR/wheels/big" ]; then echo seen=yes; else echo seen=no; fi; head -c 1048576 /dev/zero > "$PIP_CACHE_DIR/wheels/big"']
"#,
    );
    let out = f.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("emptied"),
        "an empty cache is not emptied"
    );
    assert_eq!(seen(&f), "no");
    let out = f.run(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("the pip cache held 1.0 MiB")
            && err.contains("over isolation.cache_limit (64 KiB): emptied it"),
        "{err}"
    );
    assert_eq!(seen(&f), "no", "the step found the cache emptied");
}

#[test]
fn a_cache_a_running_session_holds_is_not_cleared() {
    let d = dirs();
    let mut child = cordon()
        .env("CORDON_STATE_DIR", &d.state)
        .arg("exec")
        .arg("-w")
        .arg(&d.one)
        .args(["--cache", "uv", "--timeout", "60", "--"])
        .args(["sh", "-c", "touch \"$UV_CACHE_DIR/held\"; sleep 30"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cache_dirs(&d.state, "uv")
        .iter()
        .any(|p| p.join("held").exists())
    {
        assert!(
            Instant::now() < deadline,
            "the session never wrote its file"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = cache(&d.state, &["clear", "uv"]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("in use by a running session; not cleared"),
        "{}",
        text(&out.stderr)
    );
    assert!(cache_dirs(&d.state, "uv")[0].join("held").exists());
    // Control: once the session has ended, the same command clears it.
    let out = cache(&d.state, &["clear", "uv"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(cache_dirs(&d.state, "uv").is_empty());
}

#[test]
fn an_unknown_cache_name_is_refused_with_the_names_that_exist() {
    let d = dirs();
    let out = exec(&d.state, &d.one, &["--cache", "maven"], "true");
    assert_eq!(out.status.code(), Some(125));
    assert_eq!(
        text(&out.stderr),
        "cordon: `--cache maven` is not a cache; use cargo, pip, npm, go or uv\n"
    );
    let out = cache(&d.state, &["clear", "--workspace", "/nonexistent/ws"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cannot find the workspace /nonexistent/ws"),
        "{}",
        text(&out.stderr)
    );
    let out = cache(&d.state, &["clear", "maven"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("`maven` is not a cache; use cargo, pip"));
    let f = Fixture::new(
        "name: x\nisolation:\n  caches: [pipp]\nsteps:\n  - name: a\n    command: true\n",
    );
    let out = cordon()
        .args(["validate", "pipeline.yaml"])
        .current_dir(&f.ws)
        .output()
        .expect("validate");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out)
            .contains("`caches` names `pipp`, which cordon does not know; did you mean `pip`?"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_cache_the_sandbox_made_unreadable_is_still_listed_sized_and_cleared() {
    let d = dirs();
    let out = exec(
        &d.state,
        &d.one,
        &["--cache", "go"],
        "head -c 65536 /dev/zero > \"$GOMODCACHE/big\" && chmod 000 \"$GOMODCACHE\" && echo hid",
    );
    assert_eq!(text(&out.stdout), "hid\n", "{}", text(&out.stderr));
    let listed = text(&cache(&d.state, &["ls"]).stdout);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("go ") && l.contains("KiB")),
        "the cache is listed with its size: {listed}"
    );
    let out = cache(&d.state, &["clear", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(cache_dirs(&d.state, "go").is_empty());
}
