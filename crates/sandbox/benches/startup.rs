//! Start-up benchmark: how long it takes to run `/bin/true` bare, under bubblewrap with every
//! namespace, through `cordon exec`, and inside an already open (warm) session through the library.
//! Each variant runs `CORDON_BENCH_RUNS` times (default 200), interleaved round by round so drift
//! in machine load hits every variant alike; medians and ratios are printed, never asserted. Then
//! the phases of a cold library session, and the time to load the seccomp filter.
//!
//! `bench/sandbox-startup.sh` builds everything in release, installs bubblewrap and runs this as
//! root and as uid 65534. Environment: `CORDON_BIN` (the `cordon` binary; the `cordon exec` row is
//! skipped without it), `CORDON_BENCH_IMAGE` (an image reference: adds a `cordon exec --image`
//! row, `/bin/true` being the image's own, with `CORDON_STATE_DIR` naming its store),
//! `CORDON_BENCH_INIT` (the init program for the warm session; default: this build's
//! `cordon-sandbox-init`), `CORDON_BENCH_RUNS`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cordon_sandbox::{ExecRequest, ExitStatus, InitProgram, Session, SessionConfig, Workspace};

const BWRAP_ARGS: [&str; 12] = [
    "--unshare-all",
    "--die-with-parent",
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--tmpfs",
    "/tmp",
    "/bin/true",
];

/// One way of running `/bin/true`, timed once per call.
enum Variant {
    Bare,
    Bwrap(PathBuf),
    CordonExec(PathBuf),
    /// `cordon exec --image REF`: the binary and the image reference.
    CordonExecImage(PathBuf, String),
    WarmSession(Box<Session>),
}

impl Variant {
    fn name(&self) -> &'static str {
        match self {
            Variant::Bare => "bare /bin/true",
            Variant::Bwrap(_) => "bwrap --unshare-all … /bin/true",
            Variant::CordonExec(_) => "cordon exec -- /bin/true",
            Variant::CordonExecImage(..) => "cordon exec --image -- /bin/true",
            Variant::WarmSession(_) => "warm session exec /bin/true",
        }
    }

    fn run_once(&mut self, workspace: &Path) -> Result<Duration, String> {
        let start = Instant::now();
        let ok = match self {
            Variant::Bare => spawn(Command::new("/bin/true"))?,
            Variant::Bwrap(bwrap) => {
                let mut cmd = Command::new(&*bwrap);
                cmd.args(BWRAP_ARGS);
                spawn(cmd)?
            }
            Variant::CordonExec(cordon) => {
                let mut cmd = Command::new(&*cordon);
                cmd.args(["exec", "-w"])
                    .arg(workspace)
                    .args(["--", "/bin/true"]);
                spawn(cmd)?
            }
            Variant::CordonExecImage(cordon, image) => {
                let mut cmd = Command::new(&*cordon);
                cmd.args(["exec", "-w"]).arg(workspace).args([
                    "--image",
                    image.as_str(),
                    "--",
                    "/bin/true",
                ]);
                spawn(cmd)?
            }
            Variant::WarmSession(session) => {
                let request = ExecRequest::new(vec!["/bin/true".to_owned()]);
                let outcome = session
                    .exec(&request, &mut |_, _| {})
                    .map_err(|e| format!("exec: {e}"))?;
                outcome.status == ExitStatus::Code(0)
            }
        };
        let elapsed = start.elapsed();
        if ok {
            Ok(elapsed)
        } else {
            Err(format!("{} did not exit 0", self.name()))
        }
    }
}

fn spawn(mut cmd: Command) -> Result<bool, String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let status = cmd.status().map_err(|e| format!("spawn {cmd:?}: {e}"))?;
    Ok(status.success())
}

fn find_in_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn percentile(samples: &[Duration], p: usize) -> Duration {
    samples[(samples.len() - 1) * p / 100]
}

/// Set in the environment of this benchmark re-executed as the child that loads the seccomp
/// filter once and prints how long the load took, in nanoseconds.
const SECCOMP_CHILD: &str = "CORDON_BENCH_SECCOMP_CHILD";

fn main() -> Result<(), String> {
    if std::env::var_os(SECCOMP_CHILD).is_some() {
        let start = Instant::now();
        cordon_sandbox::seccomp::program()
            .install()
            .map_err(|e| format!("install the filter: {e}"))?;
        println!("{}", start.elapsed().as_nanos());
        return Ok(());
    }
    // `cargo bench` passes `--bench`; a harness-less target ignores its arguments.
    let runs: usize = std::env::var("CORDON_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(200);
    let workspace = tempfile::Builder::new()
        .prefix("cordon-bench-")
        .tempdir()
        .map_err(|e| format!("create a workspace: {e}"))?;

    let mut variants = vec![Variant::Bare];
    match find_in_path("bwrap") {
        Some(bwrap) => variants.push(Variant::Bwrap(bwrap)),
        None => eprintln!("bwrap not found on PATH: its row is skipped (install bubblewrap)"),
    }
    match std::env::var_os("CORDON_BIN") {
        Some(cordon) => {
            variants.push(Variant::CordonExec(PathBuf::from(&cordon)));
            match std::env::var("CORDON_BENCH_IMAGE") {
                Ok(image) => variants.push(Variant::CordonExecImage(cordon.into(), image)),
                Err(_) => eprintln!(
                    "CORDON_BENCH_IMAGE is not set: the `cordon exec --image` row is skipped"
                ),
            }
        }
        None => eprintln!("CORDON_BIN is not set: the `cordon exec` rows are skipped"),
    }
    let init = std::env::var_os("CORDON_BENCH_INIT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cordon-sandbox-init")));
    let config = SessionConfig::new(
        Workspace::open(workspace.path()).map_err(|e| format!("workspace: {e}"))?,
        InitProgram::open(&init).map_err(|e| format!("init program: {e}"))?,
    );
    let session = Session::open(config).map_err(|e| format!("open a session: {e}"))?;
    variants.push(Variant::WarmSession(Box::new(session)));

    // One untimed warm-up round (page cache, first-exec costs), then the timed rounds.
    for variant in &mut variants {
        variant.run_once(workspace.path())?;
    }
    let mut samples: Vec<Vec<Duration>> =
        variants.iter().map(|_| Vec::with_capacity(runs)).collect();
    for _ in 0..runs {
        for (variant, times) in variants.iter_mut().zip(&mut samples) {
            times.push(variant.run_once(workspace.path())?);
        }
    }

    let uid = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
    println!(
        "start-up of /bin/true, {runs} runs each, uid {}",
        uid.map_or(-1, i64::from)
    );
    println!(
        "{:<34} {:>10} {:>10} {:>10}",
        "variant", "median", "p10", "p90"
    );
    let mut medians = Vec::new();
    for (variant, times) in variants.iter().zip(&mut samples) {
        let m = median(times);
        println!(
            "{:<34} {:>8.3}ms {:>8.3}ms {:>8.3}ms",
            variant.name(),
            m.as_secs_f64() * 1e3,
            percentile(times, 10).as_secs_f64() * 1e3,
            percentile(times, 90).as_secs_f64() * 1e3,
        );
        medians.push((variant.name(), m));
    }
    let get = |name: &str| {
        medians
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, m)| m.as_secs_f64())
    };
    let ratio = |a: &str, b: &str, target: &str| {
        if let (Some(a_m), Some(b_m)) = (get(a), get(b)) {
            println!("ratio {a} / {b}: {:.2} (target {target})", a_m / b_m);
        }
    };
    ratio(
        "cordon exec -- /bin/true",
        "bwrap --unshare-all … /bin/true",
        "≤ 1.00",
    );
    ratio("warm session exec /bin/true", "bare /bin/true", "≤ 1.50");
    ratio(
        "cordon exec --image -- /bin/true",
        "cordon exec -- /bin/true",
        "≤ 1.10",
    );
    for variant in variants {
        if let Variant::WarmSession(session) = variant {
            session.close();
        }
    }
    phases(runs, workspace.path(), &init)?;
    seccomp_load(runs)
}

/// How long loading the seccomp filter takes (every workload's child does it right before
/// `execve`): the kernel checks and JIT-compiles the program and, with interrupts off, runs it
/// once per call number to find the calls it always allows. Each load is timed in a fresh child
/// (this benchmark re-executed), since a process keeps every filter it loads.
fn seccomp_load(runs: usize) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("find this benchmark: {e}"))?;
    let mut loads = Vec::with_capacity(runs);
    for _ in 0..runs {
        let output = Command::new(&exe)
            .env(SECCOMP_CHILD, "1")
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("run the seccomp child: {e}"))?;
        let nanos: u64 = String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .map_err(|_| "the seccomp child printed no time (did the load fail?)".to_owned())?;
        loads.push(Duration::from_nanos(nanos));
    }
    println!(
        "seccomp filter load ({} instructions, a fresh child each): median {:.1}µs",
        cordon_sandbox::seccomp::program().instructions().len(),
        median(&mut loads).as_secs_f64() * 1e6,
    );
    Ok(())
}

/// Where a cold session's time goes: `Session::open`, its first exec, `close` (kill and reap).
fn phases(runs: usize, workspace: &Path, init: &Path) -> Result<(), String> {
    let mut open = Vec::with_capacity(runs);
    let mut exec = Vec::with_capacity(runs);
    let mut close = Vec::with_capacity(runs);
    let request = ExecRequest::new(vec!["/bin/true".to_owned()]);
    for _ in 0..runs {
        let config = SessionConfig::new(
            Workspace::open(workspace).map_err(|e| format!("workspace: {e}"))?,
            InitProgram::open(init).map_err(|e| format!("init program: {e}"))?,
        );
        let start = Instant::now();
        let mut session = Session::open(config).map_err(|e| format!("open a session: {e}"))?;
        open.push(start.elapsed());
        let start = Instant::now();
        let outcome = session
            .exec(&request, &mut |_, _| {})
            .map_err(|e| format!("exec: {e}"))?;
        exec.push(start.elapsed());
        if outcome.status != ExitStatus::Code(0) {
            return Err("/bin/true did not exit 0 in a cold session".to_owned());
        }
        let start = Instant::now();
        session.close();
        close.push(start.elapsed());
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "cold session phases (library, medians): open {:.3}ms, first exec {:.3}ms, close {:.3}ms",
        ms(median(&mut open)),
        ms(median(&mut exec)),
        ms(median(&mut close)),
    );
    Ok(())
}
