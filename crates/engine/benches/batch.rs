//! Batch throughput (`cordon batch`, DESIGN §16): 16 tasks of a one-step pipeline, each a fresh
//! clone of a small repository, run by `cordon batch --backend local` with `--jobs 1` and
//! `--jobs 2`, side by side with the same work done by hand — `git clone` then `cordon run`, one
//! task after another — and with the floor of no cordon at all (`git clone` then the step's
//! command). With `CORDON_BENCH_STORE` naming a PostgreSQL store, also `--jobs 2` against it and,
//! with a Slurm cluster up (`.ci/slurm`, `SLURM_CONF`), `--backend slurm`. Prints runs per
//! minute and the ratios. `CORDON_BIN` names the binary (default `target/dist/cordon`, `cargo
//! build --profile dist -p cordon-cli --features scale-out`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const TASKS: usize = 16;
const ROUNDS: usize = 3;
const STEP: &str = "echo built > built.txt";

fn cordon_bin() -> PathBuf {
    std::env::var_os("CORDON_BIN").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/dist/cordon"),
        PathBuf::from,
    )
}

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "b")
        .env("GIT_AUTHOR_EMAIL", "b@example.test")
        .env("GIT_COMMITTER_NAME", "b")
        .env("GIT_COMMITTER_EMAIL", "b@example.test")
        .status()
        .expect("git");
    assert!(status.success());
}

fn ok(command: &mut Command) {
    let out = command.output().expect("start");
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn per_minute(elapsed: Duration) -> f64 {
    TASKS as f64 * 60.0 / elapsed.as_secs_f64()
}

fn main() {
    let bin = cordon_bin();
    assert!(
        bin.is_file(),
        "no cordon binary at {}; build it or set CORDON_BIN",
        bin.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    let repo = root.join("repo");
    std::fs::create_dir(&repo).expect("mkdir");
    git(&repo, &["init", "-q", "-b", "main"]);
    for i in 0..50 {
        std::fs::write(
            repo.join(format!("file{i}.txt")),
            format!("{i}\n").repeat(100),
        )
        .expect("write");
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "init"]);
    let pipeline = format!("name: bench\nsteps:\n  - name: build\n    command: {STEP}\n");
    let tooling = root.join("tooling");
    std::fs::create_dir(&tooling).expect("mkdir");
    std::fs::write(tooling.join("pipeline.yaml"), &pipeline).expect("write");
    let tasks: String = (0..TASKS)
        .map(|i| format!("{{\"id\":\"t{i}\",\"repo\":\"{}\"}}\n", repo.display()))
        .collect();
    std::fs::write(root.join("tasks.jsonl"), tasks).expect("tasks");
    let store = std::env::var("CORDON_BENCH_STORE")
        .ok()
        .filter(|u| !u.is_empty());
    let slurm = std::env::var_os("SLURM_CONF").is_some() && Path::new("/usr/bin/sbatch").is_file();
    let mut rows: Vec<(&str, Vec<Duration>)> = Vec::new();
    for round in 0..ROUNDS {
        let mut time = |name: &'static str, work: &mut dyn FnMut(&Path)| {
            let scratch = root.join(format!("{name}-{round}").replace(' ', "_"));
            std::fs::create_dir(&scratch).expect("scratch");
            let started = Instant::now();
            work(&scratch);
            let elapsed = started.elapsed();
            match rows.iter_mut().find(|(n, _)| *n == name) {
                Some((_, times)) => times.push(elapsed),
                None => rows.push((name, vec![elapsed])),
            }
        };
        time("no cordon (git clone, then the command)", &mut |scratch| {
            for i in 0..TASKS {
                let clone = scratch.join(format!("t{i}"));
                ok(Command::new("git")
                    .args(["clone", "-q", "--no-local"])
                    .arg(&repo)
                    .arg(&clone));
                ok(Command::new("sh").args(["-c", STEP]).current_dir(&clone));
            }
        });
        time("by hand (git clone, then cordon run)", &mut |scratch| {
            for i in 0..TASKS {
                let clone = scratch.join(format!("t{i}"));
                ok(Command::new("git")
                    .args(["clone", "-q", "--no-local"])
                    .arg(&repo)
                    .arg(&clone));
                std::fs::write(clone.join("pipeline.yaml"), &pipeline).expect("write");
                git(&clone, &["add", "pipeline.yaml"]);
                git(&clone, &["commit", "-q", "-m", "pipeline"]);
                ok(Command::new(&bin)
                    .args(["run", "--no-ui", "--quiet", "--state-dir"])
                    .arg(scratch.join("state"))
                    .arg(clone.join("pipeline.yaml")));
            }
        });
        let mut variants: Vec<(&'static str, Vec<String>)> = vec![
            ("cordon batch --jobs 1", vec!["--jobs".into(), "1".into()]),
            ("cordon batch --jobs 2", vec!["--jobs".into(), "2".into()]),
        ];
        // With a PostgreSQL store (`CORDON_BENCH_STORE`, its password as for any run): the local
        // backend against it, and the Slurm backend when a cluster is up (`.ci/slurm`).
        if let Some(url) = &store {
            let shared = |backend: &str| -> Vec<String> {
                ["--backend", backend, "--jobs", "2", "--store", url]
                    .iter()
                    .map(|s| (*s).to_owned())
                    .collect()
            };
            variants.push(("cordon batch --jobs 2, PostgreSQL store", shared("local")));
            if slurm {
                variants.push(("cordon batch --backend slurm, PostgreSQL", shared("slurm")));
            }
        }
        for (name, args) in variants {
            time(name, &mut |scratch| {
                ok(Command::new(&bin)
                    .arg("batch")
                    .arg(tooling.join("pipeline.yaml"))
                    .arg("--tasks")
                    .arg(root.join("tasks.jsonl"))
                    .args(&args)
                    .arg("--state-dir")
                    .arg(scratch.join("state")));
            });
        }
    }
    let floor = rows[0].1.iter().min().copied().unwrap_or_default();
    println!(
        "{TASKS} tasks a batch, {ROUNDS} rounds; runs per minute (best, worst) and best time vs no cordon"
    );
    for (name, times) in &rows {
        let best = times.iter().min().copied().unwrap_or_default();
        let worst = times.iter().max().copied().unwrap_or_default();
        println!(
            "{name:<42} {:>7.0} – {:>7.0} runs/min   {:>5.2}×",
            per_minute(worst),
            per_minute(best),
            best.as_secs_f64() / floor.as_secs_f64()
        );
    }
}
