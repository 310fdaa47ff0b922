//! `cordon batch --backend slurm` against the real single-node Slurm cluster CI starts
//! (`.ci/slurm`: controller, node daemon and munge on this machine) and the real PostgreSQL
//! server: a batch runs to success with its events in the store, a requeued task resumes its run
//! with one contiguous log, and an interrupted batch is cancelled with its runs resumable.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::batch::{Batch, text};
use crate::store::Pg;

/// Whether the cluster is up (`$CORDON_TEST_SLURM`); a build with `scale-out` needs it unless
/// `slurm` is listed in `CORDON_TEST_MISSING`.
fn cluster() -> bool {
    if std::env::var_os("CORDON_TEST_SLURM").is_some_and(|v| !v.is_empty()) {
        return true;
    }
    if std::env::var("CORDON_TEST_MISSING").is_ok_and(|m| m.contains("slurm")) {
        return false;
    }
    panic!(
        "built with scale-out but $CORDON_TEST_SLURM is unset: start a cluster with `.ci/slurm` \
         and export what it prints, or list `slurm` in CORDON_TEST_MISSING"
    );
}

const SLOW: &str = "name: slow
steps:
  - name: wait
    command: test -f second || (touch second && sleep 120)
";

/// The `slurm job ID` line of a batch's stderr, read as it is printed.
fn job_id(lines: &std::sync::mpsc::Receiver<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines
            .recv_timeout(left)
            .expect("no `slurm job ID` line within 60 s");
        if let Some(id) = line.strip_prefix("slurm job ") {
            return id.to_owned();
        }
    }
}

/// Starts `cordon batch` on SLOW's one task, returning the child, its stderr lines (also kept
/// whole in the returned vector when it ends) and the Slurm job id.
fn start_slow(
    b: &Batch,
    pg: &Pg,
) -> (
    std::process::Child,
    std::sync::mpsc::Receiver<String>,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    String,
) {
    let tasks = b.tasks("{\"id\":\"a\",\"repo\":\"repo\"}\n");
    let mut child = b.spawn(&tasks, &["--backend", "slurm", "--store", &pg.url]);
    let (send, lines) = std::sync::mpsc::channel();
    let kept = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = std::sync::Arc::clone(&kept);
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            keep.lock().expect("lock").push(line.clone());
            let _ = send.send(line);
        }
    });
    let id = job_id(&lines);
    (child, lines, kept, id)
}

fn wait_bounded(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("cordon batch did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_batch_of_three_runs_to_success_on_slurm_with_its_events_in_postgres() {
    let Some(mut pg) = Pg::new() else { return };
    if !cluster() {
        return;
    }
    let b = Batch::new(
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
    let out = b.submit(&tasks, &["--backend", "slurm", "--store", &pg.url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let id = Batch::id(&out);
    let stderr = text(&out);
    assert!(stderr.contains("slurm job "), "{stderr}");
    assert!(
        stderr.contains(&format!("batch {id}: 3 of 3 tasks succeeded")),
        "{stderr}"
    );
    for (index, (task, n)) in [("a", "1"), ("b", "2"), ("c", "3")].iter().enumerate() {
        let built = std::fs::read_to_string(b.clone_of(&id, task).join("built.txt"));
        assert_eq!(
            built.ok().as_deref(),
            Some(format!("built {n}\n").as_str()),
            "{task}"
        );
        // Slurm ran the task: its output file is the array task's.
        let slurm_log = b
            .state
            .join("batches")
            .join(&id)
            .join(format!("slurm-{index}.log"));
        assert!(slurm_log.exists(), "{task}: no Slurm output file");
    }
    let finished = pg.rows(&format!(
        "SELECT count(*) FROM events e JOIN batch_tasks t ON t.run = e.run \
         WHERE t.batch = '{id}' AND e.type = 'run.finished'"
    ));
    assert_eq!(finished, ["3"]);
    assert!(!b.state.join("cordon.db").exists());
}

#[test]
fn a_requeued_slurm_task_resumes_its_run_with_one_contiguous_log() {
    let Some(mut pg) = Pg::new() else { return };
    if !cluster() {
        return;
    }
    let b = Batch::new(SLOW);
    let (mut child, _lines, kept, job) = start_slow(&b, &pg);
    b.wait_marked(&mut child, &["a"], Duration::from_secs(120));
    std::thread::sleep(Duration::from_millis(500));
    let requeue = Command::new("scontrol")
        .args(["requeue", &format!("{job}_0")])
        .output()
        .expect("scontrol");
    assert!(requeue.status.success(), "{}", text(&requeue));
    let status = wait_bounded(&mut child, Duration::from_secs(240));
    let stderr = kept.lock().expect("lock").join("\n");
    assert_eq!(status.code(), Some(0), "{stderr}");
    let id = stderr
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("batch "))
        .expect("batch line")
        .to_owned();
    let run = pg.rows(&format!("SELECT run FROM batch_tasks WHERE batch = '{id}'"));
    assert_eq!(run.len(), 1);
    let run = &run[0];
    let seqs = pg.rows(&format!(
        "SELECT seq FROM events WHERE run = '{run}' ORDER BY seq"
    ));
    let want: Vec<String> = (1..=seqs.len()).map(|n| n.to_string()).collect();
    assert_eq!(seqs, want, "one contiguous log");
    let types = pg.rows(&format!(
        "SELECT type FROM events WHERE run = '{run}' ORDER BY seq"
    ));
    assert_eq!(
        types.iter().filter(|t| *t == "run.started").count(),
        1,
        "{types:?}"
    );
    assert_eq!(
        types.iter().filter(|t| *t == "run.resumed").count(),
        1,
        "{types:?}"
    );
    assert_eq!(
        types.last().map(String::as_str),
        Some("run.finished"),
        "{types:?}"
    );
}

#[test]
fn an_interrupted_slurm_batch_is_cancelled_and_its_runs_stop_resumably() {
    let Some(pg) = Pg::new() else { return };
    if !cluster() {
        return;
    }
    let b = Batch::new(SLOW);
    let (mut child, _lines, kept, job) = start_slow(&b, &pg);
    b.wait_marked(&mut child, &["a"], Duration::from_secs(120));
    std::thread::sleep(Duration::from_millis(500));
    // ^C in a terminal: SIGINT to the whole foreground process group, `sbatch` included.
    let group = format!("-{}", child.id());
    assert!(
        Command::new("kill")
            .args(["-INT", "--", &group])
            .status()
            .expect("kill")
            .success()
    );
    let status = wait_bounded(&mut child, Duration::from_secs(150));
    let stderr = kept.lock().expect("lock").join("\n");
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("continue with `cordon batch resume"),
        "{stderr}"
    );
    let id = stderr
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("batch "))
        .expect("batch line")
        .to_owned();
    // The job is gone from the cluster, and the run is interrupted, not running.
    let queue = Command::new("squeue")
        .args(["-h", "-j", &job])
        .output()
        .expect("squeue");
    assert_eq!(
        String::from_utf8_lossy(&queue.stdout).trim(),
        "",
        "{}",
        text(&queue)
    );
    let state = b.status_in(&id, &pg.url);
    assert_eq!(state[0].1, "interrupted", "{state:?}");
    // `batch resume` finishes it on the cluster, the same run.
    let resumed = b
        .cordon(&[
            "batch",
            "resume",
            &id,
            "--backend",
            "slurm",
            "--store",
            &pg.url,
        ])
        .output()
        .expect("resume");
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed));
    let after = b.status_in(&id, &pg.url);
    assert_eq!((after[0].1.as_str(), &after[0].2), ("success", &state[0].2));
}

#[test]
fn the_slurm_backend_without_a_shared_store_is_refused_with_the_fix() {
    let b = Batch::new(SLOW);
    let tasks = b.tasks("{\"id\":\"a\",\"repo\":\"repo\"}\n");
    let out = b.submit(&tasks, &["--backend", "slurm"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("the slurm backend needs a shared store"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_task_requeued_onto_a_node_without_its_clone_rebuilds_it_from_the_store_and_finishes() {
    let Some(mut pg) = Pg::new() else { return };
    if !cluster() {
        return;
    }
    // `wait` sleeps while the ignored `flag.tmp` is there: a clone rebuilt from the store has
    // none (ignored files stay behind), so the resumed run goes on.
    let b = Batch::new(
        "name: moved
steps:
  - name: make
    command: echo '*.tmp' > .gitignore && touch flag.tmp && echo made > made.txt
  - name: wait
    command: test ! -f flag.tmp || (touch second && sleep 120)
  - name: check
    command: test \"$(cat made.txt)\" = made && test ! -e second
",
    );
    let (mut child, _lines, kept, job) = start_slow(&b, &pg);
    let id = b.wait_marked(&mut child, &["a"], Duration::from_secs(120));
    // Requeued and held: the worker stops its run resumably, and the task waits in the queue
    // while its node loses the clone.
    let task = format!("{job}_0");
    let held = Command::new("scontrol")
        .args(["requeuehold", &task])
        .output()
        .expect("scontrol");
    assert!(held.status.success(), "{}", text(&held));
    let run = pg.rows(&format!("SELECT run FROM batch_tasks WHERE batch = '{id}'"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while pg.rows(&format!(
        "SELECT count(*) FROM events WHERE run = '{}' AND type = 'run.interrupted'",
        run[0]
    )) != ["1"]
    {
        assert!(
            Instant::now() < deadline,
            "the worker never stopped its run"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(1));
    std::fs::remove_dir_all(b.clone_of(&id, "a")).expect("remove the clone");
    let released = Command::new("scontrol")
        .args(["release", &task])
        .output()
        .expect("scontrol");
    assert!(released.status.success(), "{}", text(&released));
    let status = wait_bounded(&mut child, Duration::from_secs(240));
    let stderr = kept.lock().expect("lock").join("\n");
    assert_eq!(status.code(), Some(0), "{stderr}");
    let log = std::fs::read_to_string(b.state.join("batches").join(&id).join("slurm-0.log"))
        .expect("the task's Slurm output");
    assert!(
        log.contains(&format!(
            "rebuilt run {}'s workspace from its record",
            run[0]
        )),
        "{log}"
    );
    let seqs = pg.rows(&format!(
        "SELECT seq FROM events WHERE run = '{}' ORDER BY seq",
        run[0]
    ));
    let want: Vec<String> = (1..=seqs.len()).map(|n| n.to_string()).collect();
    assert_eq!(seqs, want, "one contiguous log");
}
