//! The shared PostgreSQL store (DESIGN §16) from the command line, against the real server CI
//! starts (`$CORDON_TEST_POSTGRES`, each test in a schema of its own): runs kept there are seen
//! from any state directory, a holder that another took the run from is stopped before it can
//! append, the URL never carries the password, and no sandbox reaches the store.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::run::{Fixture, stderr};
use crate::support::upstream;

/// A schema of its own on the test server, dropped with it.
pub struct Pg {
    name: String,
    pub url: String,
    client: postgres::Client,
}

impl Pg {
    pub fn new() -> Option<Pg> {
        let base = match std::env::var("CORDON_TEST_POSTGRES") {
            Ok(url) if !url.is_empty() => url,
            _ if std::env::var("CORDON_TEST_MISSING").is_ok_and(|m| m.contains("postgres")) => {
                return None;
            }
            _ => panic!(
                "built with scale-out but $CORDON_TEST_POSTGRES is unset: start a server with \
                 `.ci/postgres` and export what it prints, or list `postgres` in \
                 CORDON_TEST_MISSING"
            ),
        };
        let password = std::env::var("CORDON_STORE_PASSWORD_FILE")
            .ok()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .expect("CORDON_STORE_PASSWORD_FILE names the test server's password");
        let mut config: postgres::Config = base.parse().expect("server URL");
        config.password(password.trim());
        let mut client = config.connect(postgres::NoTls).expect("connect");
        let name = format!("cli_{}_{}", std::process::id(), crate::support::unique());
        client
            .batch_execute(&format!("CREATE SCHEMA {name}; SET search_path TO {name}"))
            .expect("schema");
        let join = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{join}options=-csearch_path%3D{name}");
        Some(Pg { name, url, client })
    }

    pub fn rows(&mut self, sql: &str) -> Vec<String> {
        self.client
            .simple_query(sql)
            .expect("query")
            .into_iter()
            .filter_map(|m| match m {
                postgres::SimpleQueryMessage::Row(row) => {
                    Some(row.get(0).unwrap_or_default().to_owned())
                }
                _ => None,
            })
            .collect()
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        let _ = self
            .client
            .batch_execute(&format!("DROP SCHEMA {} CASCADE", self.name));
    }
}

const PIPELINE: &str = "name: demo
steps:
  - name: build
    command: echo built >> built.txt
";

#[test]
fn runs_kept_in_a_shared_store_are_listed_and_read_from_any_state_directory() {
    let Some(pg) = Pg::new() else { return };
    let f = Fixture::new(PIPELINE);
    let out = f.run(&["--no-ui", "--store", &pg.url]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        !f.state.join("cordon.db").exists(),
        "the run is in the store, not the state directory's database"
    );
    // Another machine: a state directory of its own, the same store.
    let elsewhere = f.dir.path().join("elsewhere");
    let runs = crate::support::cordon()
        .args(["runs", "--json", "--store", &pg.url, "--state-dir"])
        .arg(&elsewhere)
        .output()
        .expect("cordon runs");
    let text = String::from_utf8_lossy(&runs.stdout);
    let line: serde_json::Value = serde_json::from_str(text.trim()).expect("one run");
    assert_eq!(line["status"], "success", "{text}");
    let id = line["id"].as_str().expect("id").to_owned();
    let logs = crate::support::cordon()
        .args(["logs", &id, "--json", "--type", "step.finished"])
        .env("CORDON_STORE", &pg.url)
        .env("CORDON_STATE_DIR", &elsewhere)
        .output()
        .expect("cordon logs");
    let text = String::from_utf8_lossy(&logs.stdout);
    assert_eq!(text.lines().count(), 1, "{text}{}", stderr(&logs));
    assert!(text.contains("\"step\":\"build\""), "{text}");
    // Without the store, the other state directory has no runs (control).
    let none = crate::support::cordon()
        .args(["runs", "--json", "--state-dir"])
        .arg(&elsewhere)
        .env_remove("CORDON_STORE")
        .output()
        .expect("cordon runs");
    assert_eq!(String::from_utf8_lossy(&none.stdout), "");
}

#[test]
fn a_holder_that_comes_back_after_another_machine_took_its_run_appends_nothing() {
    let Some(mut pg) = Pg::new() else { return };
    let f = Fixture::new(
        "name: demo
steps:
  - name: work
    command: sleep 2; echo worked >> worked.txt
",
    );
    let (mut first, id, _stderr) =
        f.spawn(&["run", "pipeline.yaml", "--no-ui", "--store", &pg.url]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while pg
        .rows(&format!(
            "SELECT 1 FROM leases WHERE run = '{id}' AND expires > now()"
        ))
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "the first holder never took the lease"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The first holder freezes (a suspended laptop, a partitioned node) and its lease runs out.
    let signal = |sig: &str, pid: u32| {
        let status = Command::new("kill").args([sig, &pid.to_string()]).status();
        assert!(status.expect("kill").success());
    };
    signal("-STOP", first.id());
    pg.rows(&format!(
        "UPDATE leases SET expires = now() WHERE run = '{id}' RETURNING run"
    ));
    // Another machine resumes the run to its end.
    let second = crate::support::cordon()
        .args([
            "run",
            "--resume",
            &id,
            "--no-ui",
            "--store",
            &pg.url,
            "--state-dir",
        ])
        .arg(f.dir.path().join("second"))
        .current_dir(&f.ws)
        .output()
        .expect("resume");
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    let before: Vec<String> = pg.rows(&format!(
        "SELECT seq FROM events WHERE run = '{id}' ORDER BY seq"
    ));
    // The first comes back: its lease is gone, so it stops with exit 1 and appends nothing.
    signal("-CONT", first.id());
    let status = first.wait().expect("first");
    assert_eq!(status.code(), Some(1), "the stale holder stops with exit 1");
    let after: Vec<String> = pg.rows(&format!(
        "SELECT seq FROM events WHERE run = '{id}' ORDER BY seq"
    ));
    assert_eq!(after, before, "nothing appended by the stale holder");
    let contiguous: Vec<String> = (1..=after.len()).map(|n| n.to_string()).collect();
    assert_eq!(after, contiguous, "one contiguous log");
    let finished = pg.rows(&format!(
        "SELECT count(*) FROM events WHERE run = '{id}' AND type = 'run.finished'"
    ));
    assert_eq!(finished, ["1"]);
    let generation = pg.rows(&format!("SELECT generation FROM leases WHERE run = '{id}'"));
    assert_eq!(
        generation,
        ["2"],
        "the second machine held the second generation"
    );
}

#[test]
fn a_store_url_with_a_password_is_refused_before_anything_runs() {
    let f = Fixture::new(PIPELINE);
    let out = f.run(&[
        "--no-ui",
        "--store",
        "postgres://cordon:hunter2@127.0.0.1:1/db",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(
        text.contains(
            "the store URL `postgres://cordon@127.0.0.1:1/db` carries a password, which every \
             user of this machine can read in the process list; remove it from the URL and put \
             it in a file named by $CORDON_STORE_PASSWORD_FILE (or in $PGPASSWORD)"
        ),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
    assert!(!f.ws.join("built.txt").exists(), "nothing ran");
    // A password holding `/`, `?` or `#`, and `cordon runs` through the environment: the same.
    for url in [
        "postgres://u:hunter2/x@127.0.0.1:1/db",
        "postgres://u:hun?ter2@127.0.0.1:1/db",
    ] {
        let out = crate::support::cordon()
            .args(["runs", "--state-dir"])
            .arg(&f.state)
            .env("CORDON_STORE", url)
            .output()
            .expect("cordon runs");
        assert_eq!(out.status.code(), Some(2), "{url}: {}", stderr(&out));
        let text = stderr(&out);
        assert!(text.contains("carries a password"), "{text}");
        assert!(
            !text.contains("hunter2") && !text.contains(":hun"),
            "{text}"
        );
    }
}

#[test]
fn no_sandbox_reaches_the_store_even_where_allow_private_admits_its_address() {
    let Some(pg) = Pg::new() else { return };
    let config: postgres::Config = pg.url.parse().expect("url");
    let store_port = config.get_ports()[0];
    let open = upstream();
    let f = Fixture::new(&format!(
        "name: demo
steps:
  - name: probe
    network: {{allow: ['ip:127.0.0.1:{store_port}', 'ip:127.0.0.1:{open}']}}
    command: |
      curl -sS --noproxy '' -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{store_port}/ > store.txt
      curl -sS --noproxy '' http://127.0.0.1:{open}/hello > open.txt
"
    ));
    let policy = f.dir.path().join("policy.toml");
    std::fs::write(&policy, "allow_private = [\"127.0.0.0/8\"]\n").expect("policy");
    let out = f.run(&[
        "--no-ui",
        "--store",
        &pg.url,
        &format!("--policy={}", policy.display()),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let read = |name: &str| std::fs::read_to_string(f.ws.join(name)).unwrap_or_default();
    assert_eq!(read("store.txt"), "403", "the store is refused");
    assert_eq!(
        read("open.txt"),
        "hello from upstream\n",
        "another loopback port is reached (control)"
    );
    let logs = crate::support::cordon()
        .args([
            "logs",
            "--last",
            "--json",
            "--type",
            "egress.deny",
            "--store",
            &pg.url,
            "--state-dir",
        ])
        .arg(&f.state)
        .output()
        .expect("logs");
    let text = String::from_utf8_lossy(&logs.stdout);
    assert!(text.contains("\"reason\":\"self\""), "{text}");
}

#[test]
fn the_ui_over_a_shared_store_shows_the_runs_of_every_machine() {
    use std::io::{BufRead as _, BufReader};
    let Some(pg) = Pg::new() else { return };
    // Two machines, two state directories, one store.
    let mut ids = Vec::new();
    for f in [Fixture::new(PIPELINE), Fixture::new(PIPELINE)] {
        let out = f.run(&["--no-ui", "--store", &pg.url]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let first = stderr(&out).lines().next().unwrap_or_default().to_owned();
        ids.push(first.strip_prefix("run ").unwrap_or_default().to_owned());
    }
    let watcher = tempfile::tempdir().expect("tempdir");
    let mut child = crate::support::cordon()
        .args([
            "ui",
            "--addr",
            "127.0.0.1:0",
            "--store",
            &pg.url,
            "--state-dir",
        ])
        .arg(watcher.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("cordon ui");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("first line");
    let rest = first
        .trim()
        .strip_prefix("http://")
        .unwrap_or_default()
        .to_owned();
    let (addr, token) = rest.split_once("/?token=").unwrap_or_default();
    let text = crate::support::read_all(crate::support::get(
        addr,
        &format!("/api/runs?token={token}"),
        None,
    ));
    // Stops the server this test started, by its pid.
    let _ = child.kill();
    let _ = child.wait();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let runs: serde_json::Value = serde_json::from_str(body).expect("JSON runs");
    let mut shown: Vec<String> = runs
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|r| r["id"].as_str().map(str::to_owned))
        .collect();
    shown.sort();
    ids.sort();
    assert_eq!(shown, ids, "{body}");
}

#[test]
fn an_interrupted_run_releases_its_lease_so_it_resumes_at_once() {
    let Some(mut pg) = Pg::new() else { return };
    let f = Fixture::new(
        "name: demo
steps:
  - name: wait
    command: if [ -f go ]; then echo went; else sleep 60; fi
",
    );
    let (mut child, id, _stderr) =
        f.spawn(&["run", "pipeline.yaml", "--no-ui", "--store", &pg.url]);
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    assert_eq!(child.wait().expect("reaped").code(), Some(130));
    let live = pg.rows(&format!(
        "SELECT 1 FROM leases WHERE run = '{id}' AND expires > now()"
    ));
    assert!(live.is_empty(), "the lease was released on the interrupt");
    std::fs::write(f.ws.join("go"), "").expect("go");
    let out = f.run(&["--resume", &id, "--no-ui", "--store", &pg.url]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_parallel_outcome_run_appends_from_every_task_under_its_one_lease() {
    let Some(mut pg) = Pg::new() else { return };
    let (_dir, ws, state, head) = crate::outcome::parallel_workspace();
    let out = crate::outcome::cordon(
        &ws,
        &state,
        &["do", "Write two files.", "--no-ui", "--store", &pg.url],
    )
    .output()
    .expect("cordon do");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let log = crate::run::git(
        &ws,
        &["log", "--format=%s", &format!("{}..HEAD", head.trim())],
    );
    assert_eq!(log.lines().count(), 2, "one commit per task: {log}");
    let runs = pg.rows("SELECT id FROM runs");
    assert_eq!(runs.len(), 1);
    let id = &runs[0];
    // Both tasks' threads appended on connections of their own, under the run's one lease.
    let seqs = pg.rows(&format!(
        "SELECT seq FROM events WHERE run = '{id}' ORDER BY seq"
    ));
    let contiguous: Vec<String> = (1..=seqs.len()).map(|n| n.to_string()).collect();
    assert_eq!(seqs, contiguous);
    let tasks = pg.rows(&format!(
        "SELECT DISTINCT convert_from(data, 'UTF8')::json->>'task' FROM events \
         WHERE run = '{id}' AND type = 'task.state' ORDER BY 1"
    ));
    assert_eq!(tasks, ["t1", "t2"]);
    let lease = pg.rows(&format!(
        "SELECT generation::text || ' ' || (expires <= now())::text FROM leases WHERE run = '{id}'"
    ));
    assert_eq!(lease, ["1 true"], "one generation, released at the end");
}

#[test]
fn a_batch_keeps_its_tasks_and_runs_in_the_shared_store_for_every_machine_to_read() {
    let Some(mut pg) = Pg::new() else { return };
    let b = crate::batch::Batch::new(
        "name: demo
steps:
  - name: build
    command: echo \"built $CORDON_VAR_n\" > built.txt
",
    );
    let tasks = b.tasks(
        "{\"id\":\"a\",\"repo\":\"repo\",\"vars\":{\"n\":\"1\"}}\n\
         {\"id\":\"b\",\"repo\":\"repo\",\"vars\":{\"n\":\"2\"}}\n\
         {\"id\":\"c\",\"repo\":\"repo\",\"vars\":{\"n\":\"3\"}}\n",
    );
    let out = b.submit(&tasks, &["--jobs", "3", "--store", &pg.url]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = crate::batch::Batch::id(&out);
    assert!(
        !b.state.join("cordon.db").exists(),
        "nothing in the state directory's database"
    );
    // The tasks, their runs and the runs' events are the store's.
    let runs = pg.rows(&format!(
        "SELECT run FROM batch_tasks WHERE batch = '{id}' AND run IS NOT NULL ORDER BY idx"
    ));
    assert_eq!(runs.len(), 3, "{runs:?}");
    for run in &runs {
        let finished = pg.rows(&format!(
            "SELECT count(*) FROM events WHERE run = '{run}' AND type = 'run.finished'"
        ));
        assert_eq!(finished, ["1"], "{run}");
    }
    // Another machine's state directory, the same store: the same batch.
    let elsewhere = b.dir.path().join("elsewhere");
    let status = crate::support::cordon()
        .args([
            "batch",
            "status",
            &id,
            "--json",
            "--store",
            &pg.url,
            "--state-dir",
        ])
        .arg(&elsewhere)
        .output()
        .expect("status");
    let text = String::from_utf8_lossy(&status.stdout);
    assert_eq!(
        text.matches("\"status\":\"success\"").count(),
        3,
        "{text}{}",
        stderr(&status)
    );
}
