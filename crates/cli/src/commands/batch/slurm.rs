//! The Slurm backend (DESIGN §16): the batch's tasks become one `sbatch` array job whose tasks
//! run `cordon batch work` on the cluster's nodes against the shared store. Slurm places and
//! requeues them; cordon schedules nothing. A requeued task finds its run in the store and
//! resumes it once the previous holder's lease is gone; `scancel` (which `cordon batch` sends when
//! interrupted) gives each worker `SIGTERM`, which stops its run resumably.

use std::io::BufRead as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cordon_protocol::RunId;
use cordon_store::TaskRow;

use super::{Job, Report};

/// Where Slurm's client commands may be: never the user's `PATH`.
const SLURM_DIRS: &[&str] = &["/usr/bin", "/usr/local/bin", "/opt/slurm/bin"];
/// How often the tasks whose runs ended are looked for while the job runs.
const REPORT_EVERY: Duration = Duration::from_secs(2);
/// How long the workers are given to stop on their own after an interrupt.
const WORKERS_STOP: Duration = Duration::from_secs(30);
/// How long `sbatch --wait` is given to return after an interrupt.
const AFTER_CANCEL: Duration = Duration::from_secs(90);

/// What `scancel` is given to cancel the batch's whole job: its id, or — when sbatch never
/// printed one (it may fail after the controller accepted the job, a timeout on the answer) —
/// the job's name, which holds the batch's unique id.
fn whole_job(id: Option<&str>, batch: RunId) -> String {
    match id {
        Some(id) => id.to_owned(),
        None => format!("--name={}", job_name(batch)),
    }
}

/// The name the batch's job is submitted under.
fn job_name(batch: RunId) -> String {
    format!("cordon-batch-{batch}")
}

/// `scancel ARGS`, its output dropped (a job already gone is no error here).
fn scancel(program: &Path, args: &[&str]) {
    let _ = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn program(name: &str) -> Result<PathBuf, String> {
    SLURM_DIRS
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|path| path.is_file())
        .ok_or_else(|| {
            format!(
                "the slurm backend runs `{name}` from {}, and there is none; install Slurm's \
                 client commands",
                SLURM_DIRS.join(", ")
            )
        })
}

/// `<logs>/slurm-%a.log` as sbatch's `--output` pattern: a `%` of the directory doubled, so
/// Slurm does not expand it.
fn output_pattern(logs: &Path) -> std::ffi::OsString {
    use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
    let mut bytes = Vec::new();
    for &byte in logs.as_os_str().as_bytes() {
        bytes.push(byte);
        if byte == b'%' {
            bytes.push(b'%');
        }
    }
    bytes.extend_from_slice(b"/slurm-%a.log");
    std::ffi::OsString::from_vec(bytes)
}

/// A shared store and Slurm's client commands, or what is missing.
pub(super) fn preflight(state_dir: &cordon_store::StateDir) -> Result<(), String> {
    if state_dir.store().is_none() {
        return Err(
            "the slurm backend needs a shared store: its workers run on other nodes, where they \
             read their tasks and write their runs; pass --store postgres://USER@HOST/DB (or set \
             $CORDON_STORE)"
                .to_owned(),
        );
    }
    program("sbatch").and(program("scancel")).map(|_| ())
}

/// `text` as one single-quoted shell word, byte for byte (a path need not be UTF-8, and a
/// replaced byte would name another file).
fn quoted(text: &std::ffi::OsStr) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt as _;
    let mut word = vec![b'\''];
    for &byte in text.as_bytes() {
        if byte == b'\'' {
            word.extend_from_slice(b"'\\''");
        } else {
            word.push(byte);
        }
    }
    word.push(b'\'');
    word
}

/// Submits the array of `waiting` and waits for it, printing each task as its run ends. `Err`
/// is a usage problem (no shared store, no Slurm).
pub(super) fn run(
    job: &Job<'_>,
    waiting: &[TaskRow],
    jobs: u32,
    signal: &AtomicUsize,
    report: &mut Report<'_>,
) -> anyhow::Result<Result<(), String>> {
    if let Err(message) = preflight(job.state_dir) {
        return Ok(Err(message));
    }
    if waiting.is_empty() {
        return Ok(Ok(()));
    }
    let (sbatch, scancel_program) = match (program("sbatch"), program("scancel")) {
        (Ok(sbatch), Ok(scancel)) => (sbatch, scancel),
        (Err(err), _) | (_, Err(err)) => return Ok(Err(err)),
    };
    // The job script: the worker with its arguments, the task index from Slurm.
    let mut script = b"#!/bin/sh\nexec".to_vec();
    for arg in std::iter::once(job.exe.clone().into_os_string()).chain(job.args("@TASK@")) {
        script.push(b' ');
        if arg == "@TASK@" {
            script.extend_from_slice(b"\"$SLURM_ARRAY_TASK_ID\"");
        } else {
            script.extend_from_slice(&quoted(&arg));
        }
    }
    script.push(b'\n');
    let path = job.logs.join("slurm-job.sh");
    let _ = std::fs::remove_file(&path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(&path)
        .and_then(|mut file| std::io::Write::write_all(&mut file, &script))?;
    let indexes: Vec<u32> = waiting.iter().map(|t| t.index).collect();
    let array: Vec<String> = indexes.iter().map(u32::to_string).collect();
    let mut command = Command::new(&sbatch);
    // Its own process group: a terminal's ^C reaches cordon, which cancels the job; were it to
    // reach `sbatch --wait` too, sbatch would end at once and leave the job running.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = command
        .arg("--parsable")
        .arg("--wait")
        .arg("--requeue")
        .arg(format!("--job-name={}", job_name(job.batch)))
        .arg(format!("--array={}%{jobs}", array.join(",")))
        .arg("--output")
        .arg(output_pattern(job.logs))
        .arg("--open-mode=append")
        .arg("--chdir")
        .arg(job.logs)
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // `--parsable`: the job id (`ID` or `ID;CLUSTER`) is the first line, printed at submission.
    let (send, receive) = std::sync::mpsc::channel();
    let stdout = child.stdout.take();
    std::thread::spawn(move || {
        if let Some(stdout) = stdout {
            let mut reader = std::io::BufReader::new(std::io::Read::take(stdout, 64 << 10));
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = send.send(line);
            // The rest is read (and dropped), so sbatch never blocks on a full pipe.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        }
    });
    let stderr = child.stderr.take();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(stderr) = stderr {
            let _ = std::io::Read::read_to_string(
                &mut std::io::Read::take(stderr, 64 << 10),
                &mut text,
            );
        }
        text
    });
    let mut id: Option<String> = None;
    // When the interrupt came, and whether the workers were told (which needs the job's id).
    let mut cancelled: Option<Instant> = None;
    let mut told = false;
    let mut forced = false;
    let log = |task: &TaskRow| {
        job.logs
            .join(format!("slurm-{}.log", task.index))
            .display()
            .to_string()
    };
    let mut polled = Instant::now();
    let status = loop {
        if id.is_none()
            && let Ok(line) = receive.try_recv()
        {
            let job_id = line.trim().split(';').next().unwrap_or_default().to_owned();
            if job_id.bytes().all(|b| b.is_ascii_digit()) && !job_id.is_empty() {
                eprintln!("slurm job {job_id}");
                id = Some(job_id);
            }
        }
        if signal.load(Ordering::SeqCst) != 0 && cancelled.is_none() {
            cancelled = Some(Instant::now());
        }
        if cancelled.is_some()
            && !told
            && let Some(job_id) = &id
        {
            // The tasks not started are dropped; each running worker (the batch shell: the job
            // script `exec`s it) gets SIGTERM alone, appends `run.interrupted`, releases its
            // lease and ends, which ends its array task. An interrupt before the id was printed
            // is acted on as soon as it is.
            scancel(&scancel_program, &["--state=PENDING", job_id]);
            scancel(&scancel_program, &["--signal=TERM", "--batch", job_id]);
            told = true;
        }
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if let Some(at) = cancelled {
            if at.elapsed() > WORKERS_STOP && !forced {
                // A worker that did not end, or no id yet: the job is cancelled whole (SIGTERM
                // to every process, then SIGKILL after the cluster's KillWait).
                scancel(&scancel_program, &[&whole_job(id.as_deref(), job.batch)]);
                forced = true;
            }
            if at.elapsed() > AFTER_CANCEL {
                let _ = child.kill();
                break child.wait()?;
            }
        }
        // The ended tasks are printed every 2 s: one read of the batch's tasks each time.
        if polled.elapsed() >= REPORT_EVERY {
            report.tasks(&indexes, &log, true)?;
            polled = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let stderr = stderr.join().unwrap_or_default();
    if id.is_none() && !status.success() {
        // sbatch may have failed after the job was accepted: whatever was, is cancelled, so no
        // task of the batch runs unseen.
        scancel(&scancel_program, &[&whole_job(None, job.batch)]);
        anyhow::bail!(
            "sbatch refused the batch's job: {}; any job it may have left (named {}) was \
             cancelled, and `cordon batch resume {}` submits the batch again",
            cordon_protocol::text::escape_line(stderr.trim()),
            job_name(job.batch),
            job.batch
        );
    }
    report.tasks(&indexes, &log, false)?;
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt as _;

    #[test]
    fn the_whole_job_is_named_by_its_id_or_without_one_by_the_batchs_unique_name() {
        let batch = cordon_protocol::RunId::from_u128(7);
        assert_eq!(super::whole_job(Some("42"), batch), "42");
        assert_eq!(
            super::whole_job(None, batch),
            format!("--name=cordon-batch-{batch}")
        );
    }

    #[test]
    fn a_word_is_quoted_byte_for_byte_its_quotes_closed_and_reopened() {
        for (text, want) in [
            (&b"plain"[..], &b"'plain'"[..]),
            (b"it's", b"'it'\\''s'"),
            (b"$(x) `y` \n#SBATCH", b"'$(x) `y` \n#SBATCH'"),
            (b"st\xff4", b"'st\xff4'"),
        ] {
            assert_eq!(super::quoted(std::ffi::OsStr::from_bytes(text)), want);
        }
    }

    #[test]
    fn a_percent_in_the_log_directory_is_not_expanded_by_slurm() {
        let pattern = super::output_pattern(std::path::Path::new("/srv/50%/b"));
        assert_eq!(pattern.as_bytes(), b"/srv/50%%/b/slurm-%a.log");
    }
}
