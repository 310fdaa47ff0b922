//! Fakes for the loop: a tool host that runs the tools' bash processes on this machine in a
//! temporary workspace (the real engine runs them in the sandbox), and a journal that keeps
//! events and blobs in memory.

use std::io::Write;
use std::num::NonZeroU32;
use std::process::{Command, Stdio};

use cordon_agent::provider::{HttpOptions, RetryPolicy};
use cordon_agent::{
    AgentOutcome, AgentSpec, BashOutput, BashRun, Hooks, Journal, JournalError, NoGrants, Provider,
    ToolHost, ToolHostError, TruncateLimits,
};
use cordon_pipeline::Tool;
use cordon_protocol::event::BlobId;
use cordon_protocol::{Attempt, Event, StepName};

/// Runs the tools' bash processes in a temporary directory, with an empty environment but
/// `PATH`, and keeps every run it was asked for.
pub struct LocalHost {
    pub dir: tempfile::TempDir,
    pub runs: Vec<BashRun>,
}

impl LocalHost {
    pub fn new() -> LocalHost {
        LocalHost {
            dir: tempfile::tempdir().expect("temp dir"),
            runs: Vec::new(),
        }
    }

    pub fn workspace(&self) -> String {
        self.dir.path().display().to_string()
    }

    pub fn write(&self, path: &str, text: &str) {
        std::fs::write(self.dir.path().join(path), text).expect("write a workspace file");
    }

    pub fn read(&self, path: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(path)).unwrap_or_default()
    }
}

impl ToolHost for LocalHost {
    fn bash(&mut self, run: &BashRun) -> Result<BashOutput, ToolHostError> {
        self.runs.push(run.clone());
        let argv = run.argv();
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .current_dir(self.dir.path())
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| ToolHostError::Failed {
                message: format!("spawn bash: {e}"),
                source: None,
            })?;
        let mut stdin = child.stdin.take().expect("stdin");
        let input = run.stdin.clone();
        let feeder = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let output = child
            .wait_with_output()
            .map_err(|e| ToolHostError::Failed {
                message: format!("wait for bash: {e}"),
                source: None,
            })?;
        let _ = feeder.join();
        let mut combined = output.stdout.clone();
        combined.extend_from_slice(&output.stderr);
        Ok(BashOutput {
            exit_code: output.status.code().unwrap_or(128),
            timed_out: false,
            combined,
            stdout: output.stdout,
            stderr: output.stderr,
        })
    }
}

/// Events and blobs in memory; scrubs `SECRET-VALUE-123` like the engine scrubs secrets.
#[derive(Default)]
pub struct Memory {
    pub events: Vec<Event>,
    pub blobs: Vec<Vec<u8>>,
}

impl Journal for Memory {
    fn event(&mut self, event: Event) -> Result<(), JournalError> {
        self.events.push(event);
        Ok(())
    }

    fn blob(&mut self, bytes: &[u8]) -> Result<BlobId, JournalError> {
        self.blobs.push(bytes.to_vec());
        Ok(BlobId(self.blobs.len() as u64))
    }

    fn scrub(&self, text: &str) -> String {
        text.replace("SECRET-VALUE-123", "[secret:token]")
    }
}

impl Memory {
    /// The event kinds in order, without the console's `step.output`.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.events
            .iter()
            .map(Event::kind)
            .filter(|k| *k != "step.output")
            .collect()
    }

    /// The console text (`step.output`) in order.
    pub fn console(&self) -> String {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::StepOutput { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Every tool result's output, in order.
    pub fn results(&self) -> Vec<(bool, String)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::ToolResult { ok, output, .. } => Some((*ok, output.clone())),
                _ => None,
            })
            .collect()
    }

    /// Every event as its JSON data.
    pub fn json(&self) -> String {
        self.events
            .iter()
            .map(|e| format!("{} {}\n", e.kind(), e.data_json()))
            .collect()
    }
}

/// An attempt spec for `step` with every tool.
pub fn spec(host: &LocalHost, max_iterations: u32) -> AgentSpec {
    AgentSpec {
        step: StepName::parse("dev").expect("step"),
        attempt: Attempt::FIRST,
        model: "test-model".to_owned(),
        system_prompt: "You fix bugs.".to_owned(),
        task: "Fix the bug.".to_owned(),
        tools: Tool::ALL.to_vec(),
        max_iterations: NonZeroU32::new(max_iterations).expect("positive"),
        temperature: None,
        timeout: None,
        workspace: host.workspace(),
        limits: TruncateLimits::default(),
    }
}

/// Runs the loop with the fakes.
pub fn run(
    spec: &AgentSpec,
    provider: &mut dyn Provider,
    host: &mut LocalHost,
    journal: &mut Memory,
) -> AgentOutcome {
    cordon_agent::run(
        spec,
        Hooks {
            provider,
            host,
            journal,
            grants: &mut NoGrants,
            custom: &mut cordon_agent::NoCustomTools,
        },
    )
    .expect("the loop runs")
}

/// HTTP options with millisecond retries, so retry tests stay fast.
pub fn fast_http() -> HttpOptions {
    HttpOptions {
        retry: RetryPolicy {
            retries: 2,
            first_delay: std::time::Duration::from_millis(1),
            max_delay: std::time::Duration::from_millis(5),
        },
        ..HttpOptions::default()
    }
}
