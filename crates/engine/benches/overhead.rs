//! Engine overhead per command step: a 50-step pipeline of `true` run by the engine (events,
//! fsyncs, diffs, routing) against the same 50 sessions opened and run directly, and
//! against 50 `cordon exec -- true` processes when `CORDON_BIN` names a cordon binary (the
//! binary is also the sessions' init program; default `target/dist/cordon`, `cargo build --profile dist -p cordon-cli`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cordon_engine::executor::sandbox::SandboxExecutor;
use cordon_engine::{Control, Engine, RunContext, Secrets};
use cordon_protocol::event::Timestamp;
use cordon_protocol::{Record, RunId};
use cordon_sandbox::{ExecRequest, InitProgram, Session, SessionConfig, Workspace};
use cordon_store::{RunRow, StateDir, Store};

const STEPS: u32 = 50;

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

fn engine_run(ws: &Path, state: &Path, init: &InitProgram, round: u128) -> Duration {
    let mut yaml = String::from("name: bench\nsteps:\n");
    for i in 0..STEPS {
        yaml.push_str(&format!("  - {{name: s{i}, command: [\"true\"]}}\n"));
    }
    let files = std::collections::BTreeMap::<PathBuf, String>::new();
    let pipeline = cordon_pipeline::load_str("pipeline.yaml", &yaml, Path::new(""), &files)
        .expect("pipeline")
        .pipeline;
    let store = Store::open(&StateDir::new(state.to_path_buf())).expect("store");
    let run = RunId::from_parts(1_769_860_800_000, round);
    store
        .create_run(&RunRow {
            id: run,
            pipeline: "bench".into(),
            pipeline_file: ws.join("pipeline.yaml"),
            workspace: ws.to_path_buf(),
            started: Timestamp(0),
            snapshot: None,
        })
        .expect("run");
    let env = |_: &str| None;
    let host = cordon_engine::run::open_workspace(
        ws,
        &pipeline,
        Some(&state.join(format!("scratch-{round}"))),
        &env,
    )
    .expect("git");
    let mut executor = SandboxExecutor::new(
        Workspace::open(ws).expect("ws"),
        init.clone(),
        vec![state.to_path_buf()],
    );
    let secrets = Secrets::default();
    let mut observer = |_: &Record| Control::Continue;
    let start = Instant::now();
    let cx = RunContext {
        store: &store,
        run,
        pipeline: &pipeline,
        workspace: &host,
        executor: &mut executor,
        secrets: &secrets,
        refresh: false,
        tooling: Vec::new(),
        agents: None,
        meter: cordon_engine::budget::Meter::unlimited(),
        images: cordon_engine::images::RunImages::default(),
        plan: None,
    };
    let mut engine = Engine::new(cx, &mut observer).expect("engine");
    engine.start(3, None).expect("start");
    engine.drive().expect("drive");
    start.elapsed()
}

fn direct_sessions(ws: &Path, init: &InitProgram) -> Duration {
    let start = Instant::now();
    for _ in 0..STEPS {
        let mut session = Session::open(SessionConfig::new(
            Workspace::open(ws).expect("ws"),
            init.clone(),
        ))
        .expect("session");
        let outcome = session
            .exec(&ExecRequest::new(vec!["true".into()]), &mut |_, _| {})
            .expect("exec");
        assert_eq!(outcome.exit_code(), 0);
        session.close();
    }
    start.elapsed()
}

fn exec_processes(ws: &Path, bin: &Path) -> Duration {
    let start = Instant::now();
    for _ in 0..STEPS {
        let status = Command::new(bin)
            .args(["exec", "-w"])
            .arg(ws)
            .args(["--", "true"])
            .status()
            .expect("cordon exec");
        assert!(status.success());
    }
    start.elapsed()
}

fn main() {
    let bin = cordon_bin();
    let init = InitProgram::open(&bin)
        .unwrap_or_else(|e| panic!("set CORDON_BIN to a cordon binary ({}): {e}", bin.display()));
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).expect("mkdir");
    let ws = ws.canonicalize().expect("canonical");
    git(&ws, &["init", "-q"]);
    std::fs::write(ws.join("README.md"), "bench\n").expect("write");
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "bench"]);
    let state = dir.path().join("state");
    let rounds = 3;
    let (mut engine, mut direct, mut exec) = (Duration::MAX, Duration::MAX, Duration::MAX);
    for round in 0..rounds {
        engine = engine.min(engine_run(&ws, &state, &init, round));
        direct = direct.min(direct_sessions(&ws, &init));
        exec = exec.min(exec_processes(&ws, &bin));
    }
    let per = |d: Duration| d.as_secs_f64() * 1e3 / f64::from(STEPS);
    println!("{STEPS} steps of `true`, best of {rounds}:");
    println!(
        "  engine (cordon run's loop)   {:8.1} ms  {:6.2} ms/step",
        engine.as_secs_f64() * 1e3,
        per(engine)
    );
    println!(
        "  sessions opened directly     {:8.1} ms  {:6.2} ms/step",
        direct.as_secs_f64() * 1e3,
        per(direct)
    );
    println!(
        "  `cordon exec -- true` x{STEPS}    {:8.1} ms  {:6.2} ms/step",
        exec.as_secs_f64() * 1e3,
        per(exec)
    );
    println!(
        "  engine overhead per step vs direct sessions: {:.2} ms (ratio {:.2})",
        per(engine) - per(direct),
        engine.as_secs_f64() / direct.as_secs_f64()
    );
    println!(
        "  engine vs cordon exec: ratio {:.2}",
        engine.as_secs_f64() / exec.as_secs_f64()
    );
}
