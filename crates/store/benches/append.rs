//! Store append latency, SQLite vs PostgreSQL side by side (DESIGN §16): the same run of events
//! (one boundary event in ten, as a command step's output and verdicts come) appended to the
//! state directory's SQLite database and to the PostgreSQL server `$CORDON_TEST_POSTGRES` (a
//! fresh schema, dropped after), each append timed. Run with
//! `cargo bench -p cordon-store --features scale-out --bench append` after `.ci/postgres`.

use std::time::{Duration, Instant};

use cordon_protocol::event::{OutputStream, Timestamp};
use cordon_protocol::{Attempt, Event, RunId};
use cordon_store::{RunRow, StateDir, Store};

const EVENTS: usize = 2000;

fn event(i: usize) -> Event {
    if i % 10 == 9 {
        // A boundary: durable before `append` returns.
        Event::StepStarted {
            attempt: Attempt::FIRST,
        }
    } else {
        Event::StepOutput {
            stream: OutputStream::Stdout,
            text: format!("line {i} of the step's output\n"),
        }
    }
}

/// Per-append latencies of [`EVENTS`] appends to one run of `store`, sorted.
fn appends(store: &Store, lease: bool) -> Vec<Duration> {
    let run = RunId::from_u128(1);
    store
        .create_run(&RunRow {
            id: run,
            pipeline: "bench".to_owned(),
            pipeline_file: "/w/pipeline.yaml".into(),
            workspace: "/w".into(),
            started: Timestamp(0),
            snapshot: None,
        })
        .expect("run");
    let _lock = lease.then(|| store.lock_run(run).expect("lock"));
    let mut times: Vec<Duration> = (0..EVENTS)
        .map(|i| {
            let event = event(i);
            let start = Instant::now();
            store.append(run, None, &event).expect("append");
            start.elapsed()
        })
        .collect();
    times.sort();
    times
}

fn at(times: &[Duration], q: f64) -> Duration {
    times[((times.len() - 1) as f64 * q) as usize]
}

fn report(name: &str, times: &[Duration]) -> Duration {
    let total: Duration = times.iter().sum();
    let mean = total / u32::try_from(times.len()).unwrap_or(1);
    println!(
        "{name:<11} mean {:>7.1} µs  p50 {:>7.1} µs  p99 {:>7.1} µs  ({} appends, {:.0}/s)",
        mean.as_secs_f64() * 1e6,
        at(times, 0.5).as_secs_f64() * 1e6,
        at(times, 0.99).as_secs_f64() * 1e6,
        times.len(),
        times.len() as f64 / total.as_secs_f64()
    );
    mean
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = Store::open(&StateDir::new(dir.path().join("sqlite"))).expect("sqlite");
    let sqlite_mean = report("sqlite", &appends(&sqlite, true));

    let Ok(base) = std::env::var("CORDON_TEST_POSTGRES") else {
        println!("postgres    skipped: start a server with .ci/postgres and export what it prints");
        return;
    };
    let password = std::env::var("CORDON_STORE_PASSWORD_FILE")
        .ok()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    let mut config: postgres::Config = base.parse().expect("server URL");
    config.password(password.trim());
    let mut admin = config.connect(postgres::NoTls).expect("connect");
    let schema = format!("bench_{}", std::process::id());
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .expect("schema");
    let join = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{join}options=-csearch_path%3D{schema}");
    let pg = Store::open(&StateDir::new(dir.path().join("pg")).with_store(Some(url))).expect("pg");
    let pg_mean = report("postgres", &appends(&pg, true));
    drop(pg);
    let _ = admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE"));
    println!(
        "postgres / sqlite mean append latency: {:.2}×",
        pg_mean.as_secs_f64() / sqlite_mean.as_secs_f64()
    );
}
