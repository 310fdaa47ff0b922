//! The agent step driver: runs one attempt of an agent step in its sandbox session with
//! `cordon-agent`'s loop, then decides the verdict (DESIGN §3, §6).
//!
//! [`LoopDriver::prepare`] builds the run's provider before any sandbox starts (a missing key is
//! a usage error naming the variable); it lives for the whole run because the replay provider
//! remembers which turns it served, and `restore` replays that memory on resume (the engine
//! answers the tool calls an interrupted attempt left open). [`SessionHost`] is the loop's
//! [`ToolHost`]: every tool process runs through the step's [`StepSession`], so the agent is
//! confined exactly like a command step.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_agent::provider::{self, HttpOptions, Inputs, Recorder, SetupError};
use cordon_agent::tools::{FileText, read_text};
use cordon_agent::verdict::{Judgement, judge};
use cordon_agent::{
    AgentError, AgentOutcome, AgentSpec, BashOutput, BashRun, ContextFile, Grants, Hooks, Journal,
    NoGrants, OutputBuffer, Provider, ProviderError, Task, ToolHost, ToolHostError, TruncateLimits,
};
use cordon_pipeline::{AgentStep, Pipeline, RelPath};
use cordon_protocol::event::OutputStream;
use cordon_protocol::{Attempt, Event, Record, StepName};

use sha2::{Digest, Sha256};

use crate::agent::{AgentDriver, AgentTask, AgentVerdict, DriverError};
use crate::executor::{ExecError, StepSession};

/// The model name used in events when a replay pipeline names none.
const REPLAY_MODEL: &str = "replay";
/// How much of one tool process's output is kept (head and tail) before truncation for the model.
const TOOL_OUTPUT_LIMIT: usize = 4 << 20;
/// Stdin bytes passed inline as one base64 argument; more is staged through `/tmp` in chunks
/// (one argument may hold at most 128 KiB).
const INLINE_STDIN: usize = 64 << 10;
/// Grace after a tool timeout before `timeout` sends SIGKILL.
const KILL_AFTER_SECS: u64 = 5;

/// The agent side of a run: its provider and the context files from the tooling snapshot.
/// The provider and the grant bounds are shared with the drivers [`AgentDriver::fork`] makes for
/// an outcome run's parallel tasks: each model call holds the provider for that call only (a
/// replay serves each turn once, and one recording is written), so parallel tasks' tool calls
/// and commands overlap while their model calls take turns.
pub struct LoopDriver {
    provider: Arc<Mutex<Box<dyn Provider>>>,
    context: Vec<ContextFile>,
    /// How `request_egress` is decided; refuses until the grants work supplies the bounds.
    grants: Arc<Mutex<Box<dyn Grants + Send>>>,
    /// Made by `fork`: the provider it shares was restored already.
    forked: bool,
}

/// The shared provider, held for one model call at a time.
struct Locked<'p>(&'p Mutex<Box<dyn Provider>>);

impl Provider for Locked<'_> {
    fn complete(
        &mut self,
        request: &cordon_agent::Request,
    ) -> Result<cordon_agent::Response, ProviderError> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .complete(request)
    }

    fn skip_answered(&mut self, step: &StepName, attempt: Attempt) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .skip_answered(step, attempt);
    }
}

/// The shared grant bounds, held for one decision at a time.
struct LockedGrants<'g>(&'g Mutex<Box<dyn Grants + Send>>);

impl Grants for LockedGrants<'_> {
    fn request(
        &mut self,
        pattern: &cordon_egress::Pattern,
        reason: &str,
    ) -> cordon_agent::GrantDecision {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .request(pattern, reason)
    }
}

impl From<AgentError> for DriverError {
    fn from(err: AgentError) -> DriverError {
        match err {
            AgentError::Provider(err @ ProviderError::Auth { .. }) => DriverError::Auth(err),
            AgentError::Provider(err) => DriverError::Provider(err),
            AgentError::Host(ToolHostError::Refused(refusal)) => DriverError::Refused(refusal),
            AgentError::Host(err) => DriverError::Host(err),
            AgentError::Journal(err) => DriverError::Journal(err),
        }
    }
}

impl LoopDriver {
    /// The driver of a pipeline with agent steps (`None` without any). `files` returns a tooling
    /// file's text from the run's snapshot by its path relative to the pipeline file; `env`
    /// reads the host environment (the key variable, `SSL_CERT_FILE`). With `record`, every
    /// answered turn is written there as a replay transcript line (`--record FILE`).
    pub fn prepare(
        pipeline: &Pipeline,
        files: &dyn Fn(&RelPath) -> Option<String>,
        env: &dyn Fn(&str) -> Option<OsString>,
        record: Option<Box<dyn Write + Send>>,
    ) -> Result<Option<LoopDriver>, DriverError> {
        let has_agents = !pipeline.agent_steps().is_empty();
        let Some(llm) = pipeline.llm.as_ref().filter(|_| has_agents) else {
            return Ok(None);
        };
        let transcript = match llm {
            cordon_pipeline::Llm::Replay { transcript, .. } => Some((
                transcript.to_string(),
                files(transcript).ok_or_else(|| {
                    SetupError::Transcript(provider::TranscriptError::NotRead {
                        file: transcript.to_string(),
                    })
                })?,
            )),
            _ => None,
        };
        let provider = provider::from_llm(
            llm,
            Inputs {
                transcript: transcript
                    .as_ref()
                    .map(|(name, text)| (name.as_str(), text.as_str())),
                env,
                http: HttpOptions::default(),
            },
        )?;
        let provider: Box<dyn Provider> = match record {
            Some(out) => Box::new(Recorder::new(provider, out)),
            None => provider,
        };
        let context = pipeline
            .context_files
            .iter()
            .map(|path| {
                files(path)
                    .map(|text| ContextFile {
                        path: path.to_string(),
                        text,
                    })
                    .ok_or_else(|| DriverError::ContextFile(path.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(LoopDriver::with_provider(provider, context)))
    }

    /// Adds the run's documents (`--context`) to the context files every task message holds.
    pub fn add_documents(&mut self, documents: impl IntoIterator<Item = ContextFile>) {
        self.context.extend(documents);
    }

    /// A driver over a given provider (tests).
    pub fn with_provider(provider: Box<dyn Provider>, context: Vec<ContextFile>) -> LoopDriver {
        LoopDriver {
            provider: Arc::new(Mutex::new(provider)),
            context,
            grants: Arc::new(Mutex::new(Box::new(NoGrants))),
            forked: false,
        }
    }

    /// Decides `request_egress` calls with `grants` from now on (the operator's `[grants]`).
    pub fn set_grants(&mut self, grants: Box<dyn Grants + Send>) {
        self.grants = Arc::new(Mutex::new(grants));
    }
}

impl AgentDriver for LoopDriver {
    /// On resume: tells the provider which model calls finished step attempts already had
    /// answered, in log order, so replay serves them no second time. The interrupted attempt is
    /// left out: it gets its turns from the start again.
    fn restore(&mut self, records: &[Record]) {
        if self.forked {
            return;
        }
        let mut current: BTreeMap<StepName, Attempt> = BTreeMap::new();
        let mut answered: Vec<(StepName, Attempt)> = Vec::new();
        let mut finished = std::collections::BTreeSet::new();
        for record in records {
            let Some(step) = &record.step else { continue };
            match &record.event {
                Event::StepStarted { attempt } => {
                    // A re-run of an interrupted attempt was served from the start again: only
                    // the calls of its last run count.
                    answered.retain(|(s, a)| !(s == step && a == attempt));
                    current.insert(step.clone(), *attempt);
                }
                Event::StepFinished { attempt, .. } => {
                    finished.insert((step.clone(), *attempt));
                }
                Event::LlmResponse { .. } => {
                    if let Some(attempt) = current.get(step) {
                        answered.push((step.clone(), *attempt));
                    }
                }
                _ => {}
            }
        }
        let mut provider = Locked(&self.provider);
        for (step, attempt) in answered {
            if finished.contains(&(step.clone(), attempt)) {
                provider.skip_answered(&step, attempt);
            }
        }
    }

    fn fork(&self) -> Option<Box<dyn AgentDriver + Send>> {
        Some(Box::new(LoopDriver {
            provider: Arc::clone(&self.provider),
            context: self.context.clone(),
            grants: Arc::clone(&self.grants),
            forked: true,
        }))
    }

    /// Runs one attempt of an agent step in `session`, reporting through `journal`, and decides
    /// its verdict: the loop's end, then `produces`, then the `VERDICT:` line (artifact first).
    fn run(
        &mut self,
        input: &AgentTask<'_>,
        session: &mut dyn StepSession,
        journal: &mut dyn Journal,
    ) -> Result<AgentVerdict, DriverError> {
        let step = input.agent;
        let agent = input
            .pipeline
            .agents
            .get(&step.agent)
            .ok_or_else(|| DriverError::UnknownAgent(step.agent.to_string()))?;
        let workspace = input.workspace.display().to_string();
        let task = task(input, step, &self.context, &workspace);
        let model = step
            .model
            .clone()
            .or_else(|| {
                input
                    .pipeline
                    .llm
                    .as_ref()
                    .and_then(|l| l.model().map(str::to_owned))
            })
            .unwrap_or_else(|| REPLAY_MODEL.to_owned());
        let spec = AgentSpec {
            step: input.step.name.clone(),
            attempt: input.attempt,
            model,
            system_prompt: agent.system_prompt.clone(),
            task: journal.scrub(&task.render()),
            tools: agent.tools.clone(),
            max_iterations: step.max_iterations,
            temperature: agent.temperature.map(|t| t.as_f64()),
            timeout: step
                .sandbox
                .timeout
                .map(|t| Duration::from_secs(t.seconds())),
            workspace,
            limits: TruncateLimits::default(),
        };
        let mut none = cordon_agent::NoCustomTools;
        let mut custom = input.custom.map(std::cell::RefCell::borrow_mut);
        let custom: &mut dyn cordon_agent::CustomTools = match custom.as_deref_mut() {
            Some(tools) => tools,
            None => &mut none,
        };
        // The step's MCP servers start in its session before the first model call; one that
        // cannot fails the attempt with its stderr.
        let deadline = spec.timeout.map(|t| std::time::Instant::now() + t);
        let mut mcp = match crate::mcp::McpTools::start(
            &step.mcp,
            &agent.mcp_tools,
            session,
            input.secrets,
            deadline,
            custom,
        ) {
            Ok(tools) => tools,
            Err(err) => return Ok(AgentVerdict::fail(err.0)),
        };
        let execs = ExecLog::default();
        let mut host = SessionHost {
            session,
            execs: execs.clone(),
        };
        let mut journal = WithExecs {
            inner: journal,
            execs,
        };
        let journal = &mut journal;
        let outcome = cordon_agent::run(
            &spec,
            Hooks {
                provider: &mut Locked(&self.provider),
                host: &mut host,
                journal: &mut *journal,
                grants: &mut LockedGrants(&self.grants),
                custom: &mut mcp,
            },
        );
        mcp.close();
        journal.flush().map_err(DriverError::Journal)?;
        let outcome = outcome?;
        let final_text = match outcome {
            AgentOutcome::Failed { reason } => return Ok(AgentVerdict::fail(reason)),
            AgentOutcome::Finished { text } => text,
        };
        let missing = missing_files(&mut host, &step.sandbox.produces)
            .map_err(|e| DriverError::from(AgentError::Host(e)))?;
        for path in step
            .sandbox
            .produces
            .iter()
            .filter(|p| !missing.contains(&p.to_string()))
        {
            journal
                .event(Event::ArtifactWritten {
                    path: path.to_string(),
                })
                .map_err(DriverError::Journal)?;
        }
        if !missing.is_empty() {
            journal.flush().map_err(DriverError::Journal)?;
            return Ok(AgentVerdict::fail(format!(
                "expected output missing: {}",
                missing.join(", ")
            )));
        }
        let verdict = decide(step, &final_text, &mut host, journal);
        journal.flush().map_err(DriverError::Journal)?;
        verdict.map(|mut verdict| {
            verdict.text = Some(final_text);
            verdict
        })
    }
}

/// The task message of an attempt.
fn task(input: &AgentTask<'_>, step: &AgentStep, context: &[ContextFile], workspace: &str) -> Task {
    Task {
        pipeline: input.pipeline.name.clone(),
        step: input.step.name.to_string(),
        attempt: input.attempt.get(),
        workspace: workspace.to_owned(),
        context_files: context.to_vec(),
        produces: step
            .sandbox
            .produces
            .iter()
            .map(ToString::to_string)
            .collect(),
        artifact: step.artifact.as_ref().map(ToString::to_string),
        verdicts: step.verdicts.clone(),
        prompt: step.prompt.clone(),
        feedback: input.feedback.to_vec(),
    }
}

/// The verdict of a finished agent: without `verdicts` it passes; with them the last
/// `VERDICT:` line of the artifact (read inside the sandbox) or of the final message decides.
fn decide(
    step: &AgentStep,
    final_text: &str,
    host: &mut SessionHost<'_>,
    journal: &mut dyn Journal,
) -> Result<AgentVerdict, DriverError> {
    let Some(verdicts) = &step.verdicts else {
        return Ok(AgentVerdict::pass());
    };
    let judgement = match &step.artifact {
        None => judge(verdicts, final_text, "the agent's final message"),
        Some(path) => match read_text(host, path.as_str())
            .map_err(|e| DriverError::from(AgentError::Host(e)))?
        {
            FileText::Text(text) => {
                journal
                    .event(Event::ArtifactWritten {
                        path: path.to_string(),
                    })
                    .map_err(DriverError::Journal)?;
                judge(verdicts, &text, &format!("`{path}`"))
            }
            FileText::Missing => Judgement::Fail(format!(
                "the agent finished without writing its artifact `{path}`, which must end with `VERDICT: {}` or `VERDICT: {}`",
                verdicts.pass, verdicts.fail
            )),
            FileText::Unusable(message) => {
                Judgement::Fail(format!("the artifact cannot be read: {message}"))
            }
        },
    };
    Ok(match judgement {
        Judgement::Pass => AgentVerdict::pass(),
        Judgement::Fail(reason) => AgentVerdict::fail(reason),
        Judgement::Unverifiable(reason) => AgentVerdict::unverifiable(reason),
    })
}

/// The `produces` paths that do not exist, checked inside the sandbox.
fn missing_files(
    host: &mut dyn ToolHost,
    produces: &[RelPath],
) -> Result<Vec<String>, ToolHostError> {
    if produces.is_empty() {
        return Ok(Vec::new());
    }
    let run = BashRun {
        script: r#"for f; do [ -e "$f" ] || printf '%s\n' "$f"; done"#.to_owned(),
        name: "produces".to_owned(),
        args: produces.iter().map(ToString::to_string).collect(),
        stdin: Vec::new(),
        timeout: Duration::from_secs(60),
    };
    let output = host.bash(&run)?;
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
}

/// The loop's tool host over the step's session. The session runs an argv with the session's
/// environment; standard input and per-call timeouts are built inside the sandbox from
/// standard tools (`base64`, `timeout`), so nothing is resolved or written on the host.
pub struct SessionHost<'s> {
    pub session: &'s mut dyn StepSession,
    /// A `sandbox.exec` event per process, for the journal to append in order.
    pub execs: ExecLog,
}

/// `sandbox.exec` events waiting to be appended (shared by the host and the journal wrapper).
pub type ExecLog = std::rc::Rc<std::cell::RefCell<Vec<Event>>>;

/// The engine's journal with the host's `sandbox.exec` events appended before each event of the
/// loop, so every tool process is accounted for between its `tool.call` and `tool.result`.
struct WithExecs<'j> {
    inner: &'j mut dyn Journal,
    execs: ExecLog,
}

impl WithExecs<'_> {
    fn flush(&mut self) -> Result<(), cordon_agent::JournalError> {
        let pending: Vec<Event> = self.execs.borrow_mut().drain(..).collect();
        for event in pending {
            self.inner.event(event)?;
        }
        Ok(())
    }
}

impl Journal for WithExecs<'_> {
    fn event(&mut self, event: Event) -> Result<(), cordon_agent::JournalError> {
        self.flush()?;
        self.inner.event(event)
    }

    fn blob(
        &mut self,
        bytes: &[u8],
    ) -> Result<cordon_protocol::event::BlobId, cordon_agent::JournalError> {
        self.inner.blob(bytes)
    }

    fn scrub(&self, text: &str) -> String {
        self.inner.scrub(text)
    }
}

impl SessionHost<'_> {
    fn exec(
        &mut self,
        argv: &[String],
    ) -> Result<(crate::CommandResult, BashOutput), ToolHostError> {
        let mut buffer = OutputBuffer::new(TOOL_OUTPUT_LIMIT);
        let result = self
            .session
            .run(argv, &mut |stream, bytes| {
                let stream = match stream {
                    OutputStream::Stdout => cordon_agent::Stream::Stdout,
                    OutputStream::Stderr => cordon_agent::Stream::Stderr,
                };
                buffer.push(stream, bytes);
            })
            .map_err(|err| match err {
                ExecError::Refused(refusal) => ToolHostError::Refused(refusal),
                ExecError::Failed(message) => ToolHostError::failed(message),
            })?;
        // Egress decisions the process caused go in before its `sandbox.exec`.
        if let Some(side) = self.session.side_events() {
            self.execs.borrow_mut().extend(side.drain());
        }
        self.execs.borrow_mut().push(Event::SandboxExec {
            argv_digest: crate::setup::hex(&Sha256::digest(argv.join("\0").as_bytes())),
            exit_code: result.exit_code,
            duration_ms: u64::try_from(result.duration.as_millis()).unwrap_or(u64::MAX),
            timed_out: result.timed_out,
        });
        let (combined, stdout, stderr) = buffer.finish();
        let output = BashOutput {
            exit_code: result.exit_code,
            timed_out: result.timed_out,
            combined,
            stdout,
            stderr,
        };
        Ok((result, output))
    }

    /// Writes `bytes` to a fresh file under the sandbox's `/tmp`, in argument-sized chunks.
    fn stage(&mut self, bytes: &[u8]) -> Result<String, ToolHostError> {
        static STAGED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let serial = STAGED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("/tmp/.cordon-stdin-{}-{serial}", std::process::id());
        let mut first = true;
        for chunk in bytes.chunks(INLINE_STDIN) {
            let redirect = if first { ">" } else { ">>" };
            first = false;
            let script = format!(r#"umask 077; printf '%s' "$2" | base64 -d {redirect} "$1""#);
            let argv = vec![
                cordon_agent::tools::BASH.to_owned(),
                "-c".to_owned(),
                script,
                "stdin".to_owned(),
                name.clone(),
                base64(chunk),
            ];
            let (_, output) = self.exec(&argv)?;
            if output.exit_code != 0 {
                return Err(ToolHostError::failed(format!(
                    "could not stage a tool's input in the sandbox's /tmp: {}",
                    String::from_utf8_lossy(&output.stderr).trim()
                )));
            }
        }
        Ok(name)
    }
}

impl ToolHost for SessionHost<'_> {
    fn bash(&mut self, run: &BashRun) -> Result<BashOutput, ToolHostError> {
        let secs = run.timeout.as_secs().max(1);
        // `timeout` kills the tool's process tree at its own limit; the session's timeout (the
        // step's) still applies on top.
        let mut inner = vec![
            "timeout".to_owned(),
            format!("--kill-after={KILL_AFTER_SECS}"),
            format!("{secs}"),
        ];
        inner.extend(run.argv());
        let argv = if run.stdin.is_empty() {
            let mut argv = vec![
                cordon_agent::tools::BASH.to_owned(),
                "-c".to_owned(),
                r#""$@" < /dev/null"#.to_owned(),
                "tool".to_owned(),
            ];
            argv.extend(inner);
            argv
        } else if run.stdin.len() <= INLINE_STDIN {
            let mut argv = vec![
                cordon_agent::tools::BASH.to_owned(),
                "-c".to_owned(),
                r#"d=$1; shift; printf '%s' "$d" | base64 -d | "$@""#.to_owned(),
                "tool".to_owned(),
                base64(&run.stdin),
            ];
            argv.extend(inner);
            argv
        } else {
            let staged = self.stage(&run.stdin)?;
            let mut argv = vec![
                cordon_agent::tools::BASH.to_owned(),
                "-c".to_owned(),
                r#"f=$1; shift; "$@" < "$f"; s=$?; rm -f -- "$f"; exit $s"#.to_owned(),
                "tool".to_owned(),
                staged,
            ];
            argv.extend(inner);
            argv
        };
        let (result, mut output) = self.exec(&argv)?;
        // `timeout` exits 124 (137 after the kill grace) when it fired.
        let fired =
            matches!(output.exit_code, 124 | 137) && result.duration >= Duration::from_secs(secs);
        output.timed_out |= fired;
        Ok(output)
    }
}

/// Standard base64 (what `base64 -d` reads).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &[u8], expected: &str) {
        assert_eq!(base64(input), expected, "{input:?}");
    }

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        check(b"", "");
        check(b"f", "Zg==");
        check(b"fo", "Zm8=");
        check(b"foo", "Zm9v");
        check(b"foobar", "Zm9vYmFy");
        check(&[0xff, 0xfe, 0x00], "//4A");
    }

    /// Runs each argv on this machine in a temporary directory: what the real session does,
    /// minus the sandbox.
    struct Local {
        dir: tempfile::TempDir,
        argvs: Vec<Vec<String>>,
    }

    impl StepSession for Local {
        fn run(
            &mut self,
            argv: &[String],
            on_output: &mut dyn FnMut(OutputStream, &[u8]),
        ) -> Result<crate::CommandResult, ExecError> {
            self.argvs.push(argv.to_vec());
            let started = std::time::Instant::now();
            let output = std::process::Command::new(&argv[0])
                .args(&argv[1..])
                .current_dir(self.dir.path())
                .output()
                .map_err(|e| ExecError::Failed(e.to_string()))?;
            on_output(OutputStream::Stdout, &output.stdout);
            on_output(OutputStream::Stderr, &output.stderr);
            Ok(crate::CommandResult {
                exit_code: output.status.code().unwrap_or(128),
                timed_out: false,
                stopped: false,
                duration: started.elapsed(),
            })
        }

        fn close(self: Box<Self>) {}
    }

    fn local() -> Local {
        Local {
            dir: tempfile::tempdir().expect("temp dir"),
            argvs: Vec::new(),
        }
    }

    fn cat_to(path: &str, stdin: Vec<u8>) -> BashRun {
        BashRun {
            script: r#"cat > "$1""#.to_owned(),
            name: "t".to_owned(),
            args: vec![path.to_owned()],
            stdin,
            timeout: Duration::from_secs(30),
        }
    }

    #[test]
    fn tool_input_reaches_the_process_inline_or_staged_in_chunks() {
        let mut session = local();
        let small = b"line one\n\x00binary\xff".to_vec();
        let large: Vec<u8> = (0..(INLINE_STDIN * 2 + 17))
            .map(|i| (i % 251) as u8)
            .collect();
        let execs = ExecLog::default();
        {
            let mut host = SessionHost {
                session: &mut session,
                execs: execs.clone(),
            };
            let out = host.bash(&cat_to("small", small.clone())).expect("runs");
            assert_eq!(out.exit_code, 0, "{}", String::from_utf8_lossy(&out.stderr));
            let out = host.bash(&cat_to("large", large.clone())).expect("runs");
            assert_eq!(out.exit_code, 0, "{}", String::from_utf8_lossy(&out.stderr));
        }
        assert_eq!(
            std::fs::read(session.dir.path().join("small")).expect("written"),
            small
        );
        assert_eq!(
            std::fs::read(session.dir.path().join("large")).expect("written"),
            large
        );
        // One call for the small input; three chunks and the call for the large one.
        assert_eq!(session.argvs.len(), 5);
        assert!(
            session
                .argvs
                .iter()
                .all(|argv| argv.iter().all(|a| a.len() <= 128 * 1024))
        );
        // Every process is accounted for.
        assert_eq!(execs.borrow().len(), 5);
        assert!(
            execs
                .borrow()
                .iter()
                .all(|e| matches!(e, Event::SandboxExec { exit_code: 0, .. }))
        );
        // The staged file is gone afterwards.
        let staged = &session.argvs[1][4];
        assert!(!std::path::Path::new(staged).exists(), "{staged}");
    }

    #[test]
    fn a_tool_timeout_kills_the_process_and_is_reported() {
        let mut session = local();
        let mut host = SessionHost {
            session: &mut session,
            execs: ExecLog::default(),
        };
        let run = BashRun {
            script: "echo started; exec sleep 30".to_owned(),
            name: "t".to_owned(),
            args: Vec::new(),
            stdin: Vec::new(),
            timeout: Duration::from_secs(1),
        };
        let out = host.bash(&run).expect("runs");
        assert!(out.timed_out, "{out:?}");
        assert_eq!(out.exit_code, 124);
        assert_eq!(out.stdout, b"started\n");
    }

    const PIPELINE: &str = "\
name: demo
llm: {provider: replay, transcript: t.jsonl}
context_files: [README.md]
steps:
  - name: review
    agent: review
    artifact: review.md
    produces: [notes.md]
    verdicts: {pass: APPROVED, fail: NEEDS CHANGES}
";

    const AGENT: &str = "---\nname: review\n---\nYou review.\n";

    /// The demo pipeline and a driver replaying `transcript`.
    fn driver(transcript: &str) -> Result<(Pipeline, Option<LoopDriver>), DriverError> {
        let files: BTreeMap<std::path::PathBuf, String> = [
            ("/p/agents/review.agent.md", AGENT),
            ("/p/t.jsonl", transcript),
            ("/p/README.md", "# Demo\n"),
        ]
        .into_iter()
        .map(|(k, v)| (std::path::PathBuf::from(k), v.to_owned()))
        .collect();
        let pipeline = cordon_pipeline::load_str(
            "pipeline.yaml",
            PIPELINE,
            std::path::Path::new("/p"),
            &files,
        )
        .expect("the demo pipeline loads")
        .pipeline;
        let lookup = |rel: &RelPath| {
            files
                .get(&std::path::Path::new("/p").join(rel.as_path()))
                .cloned()
        };
        let driver = LoopDriver::prepare(&pipeline, &lookup, &|_| None, None)?;
        Ok((pipeline, driver))
    }

    #[derive(Default)]
    struct Memory(Vec<Event>);

    impl Journal for Memory {
        fn event(&mut self, event: Event) -> Result<(), cordon_agent::JournalError> {
            self.0.push(event);
            Ok(())
        }
        fn blob(
            &mut self,
            _: &[u8],
        ) -> Result<cordon_protocol::event::BlobId, cordon_agent::JournalError> {
            Ok(cordon_protocol::event::BlobId(1))
        }
    }

    fn agent_of(pipeline: &Pipeline) -> &AgentStep {
        match &pipeline.steps[0].kind {
            cordon_pipeline::StepKind::Agent(agent) => agent,
            cordon_pipeline::StepKind::Command(_) | cordon_pipeline::StepKind::Action(_) => {
                panic!("the demo's step is an agent")
            }
        }
    }

    fn attempt(transcript: &str, files: &[(&str, &str)]) -> (AgentVerdict, Memory) {
        let (pipeline, driver) = driver(transcript).expect("prepares");
        let mut driver = driver.expect("the pipeline has an agent step");
        let mut session = local();
        for (path, text) in files {
            std::fs::write(session.dir.path().join(path), text).expect("write");
        }
        let workspace = session.dir.path().to_path_buf();
        let mut journal = Memory::default();
        let input = AgentTask {
            pipeline: &pipeline,
            step: &pipeline.steps[0],
            agent: agent_of(&pipeline),
            attempt: Attempt::FIRST,
            workspace: &workspace,
            feedback: &["the tests failed".to_owned()],
            custom: None,
            secrets: &crate::Secrets::default(),
        };
        let verdict = driver
            .run(&input, &mut session, &mut journal)
            .expect("the attempt runs");
        (verdict, journal)
    }

    fn write(path: &str, content: &str) -> String {
        serde_json::json!({"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]}).to_string()
    }

    #[test]
    fn the_artifact_verdict_decides_after_produces_are_checked() {
        let approve = format!(
            "{}\n{}\n{{\"text\":\"done\"}}\n",
            write("notes.md", "n"),
            write("review.md", "ok\nVERDICT: APPROVED\n")
        );
        let (verdict, journal) = attempt(&approve, &[]);
        assert_eq!(
            verdict,
            AgentVerdict {
                text: Some("done".to_owned()),
                ..AgentVerdict::pass()
            },
            "the final message comes back with the verdict"
        );
        let kinds: Vec<&str> = journal.0.iter().map(Event::kind).collect();
        let first_call = kinds
            .iter()
            .position(|k| *k == "tool.call")
            .expect("a call");
        assert_eq!(
            kinds[first_call..first_call + 3],
            ["tool.call", "sandbox.exec", "tool.result"]
        );
        let written: Vec<&Event> = journal
            .0
            .iter()
            .filter(|e| matches!(e, Event::ArtifactWritten { .. }))
            .collect();
        assert_eq!(written.len(), 2);

        let reject = format!(
            "{}\n{}\n{{\"text\":\"done\"}}\n",
            write("notes.md", "n"),
            write("review.md", "VERDICT: NEEDS CHANGES\n")
        );
        assert_eq!(
            attempt(&reject, &[]).0,
            AgentVerdict {
                text: Some("done".to_owned()),
                ..AgentVerdict::fail("`review.md` says `VERDICT: NEEDS CHANGES`")
            }
        );

        let no_artifact = format!(
            "{}\n{{\"text\":\"VERDICT: APPROVED\"}}\n",
            write("notes.md", "n")
        );
        assert_eq!(
            attempt(&no_artifact, &[]).0,
            AgentVerdict {
                text: Some("VERDICT: APPROVED".to_owned()),
                ..AgentVerdict::fail(
                    "the agent finished without writing its artifact `review.md`, which must end with `VERDICT: APPROVED` or `VERDICT: NEEDS CHANGES`"
                )
            }
        );

        let nothing = "{\"text\":\"done\"}\n";
        assert_eq!(
            attempt(nothing, &[]).0,
            AgentVerdict::fail("expected output missing: notes.md")
        );
        assert_eq!(
            attempt("", &[]).0,
            AgentVerdict::fail("replay transcript exhausted at review attempt 1")
        );
    }

    type Seen = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

    /// A provider that keeps each request's task message and answers "done".
    struct Spy(Seen);

    impl Provider for Spy {
        fn complete(
            &mut self,
            request: &cordon_agent::Request,
        ) -> Result<cordon_agent::Response, ProviderError> {
            if let Some(cordon_agent::Message::User { text }) = request.messages.first()
                && let Ok(mut seen) = self.0.lock()
            {
                seen.push(text.clone());
            }
            Ok(cordon_agent::Response {
                text: Some("done".to_owned()),
                ..Default::default()
            })
        }
    }

    #[test]
    fn the_task_message_carries_context_files_and_feedback() {
        let (pipeline, _) = driver("").expect("prepares");
        let seen = Seen::default();
        let mut driver = LoopDriver::with_provider(
            Box::new(Spy(seen.clone())),
            vec![ContextFile {
                path: "README.md".to_owned(),
                text: "# Demo\n".to_owned(),
            }],
        );
        let mut session = local();
        let workspace = session.dir.path().to_path_buf();
        let input = AgentTask {
            pipeline: &pipeline,
            step: &pipeline.steps[0],
            agent: agent_of(&pipeline),
            attempt: Attempt::new(2).expect("attempt"),
            workspace: &workspace,
            feedback: &["step `test` failed in attempt 1: exit 1\nAssertionError".to_owned()],
            custom: None,
            secrets: &crate::Secrets::default(),
        };
        driver
            .run(&input, &mut session, &mut Memory::default())
            .expect("runs");
        let seen = seen.lock().expect("lock").clone();
        assert_eq!(seen.len(), 1);
        let task = &seen[0];
        assert!(
            task.contains("step `review` of the cordon pipeline `demo` (attempt 2)"),
            "{task}"
        );
        assert!(task.contains("### README.md\n\n```\n# Demo\n```"), "{task}");
        assert!(
            task.contains("step `test` failed in attempt 1: exit 1\nAssertionError"),
            "{task}"
        );
        assert!(
            task.contains("the last line of `review.md` must be exactly `VERDICT: APPROVED`"),
            "{task}"
        );
    }

    #[test]
    fn the_runs_documents_reach_every_task_message_of_a_driver_and_of_its_forks() {
        let (pipeline, _) = driver("").expect("prepares");
        let seen = Seen::default();
        let mut driver = LoopDriver::with_provider(Box::new(Spy(seen.clone())), Vec::new());
        driver.add_documents([
            ContextFile {
                path: "notes/design.md".to_owned(),
                text: "Keep the API stable.\n".to_owned(),
            },
            ContextFile {
                path: "PLAN.md".to_owned(),
                text: "# Plan\n- step one\n".to_owned(),
            },
        ]);
        // An outcome run's phase step (`t1.execute`), run by a fork as parallel tasks are.
        let mut phase = pipeline.steps[0].clone();
        phase.name = cordon_protocol::StepName::task_phase("t1", "execute").expect("name");
        let mut fork = driver.fork().expect("forks");
        for (step, runner) in [
            (&pipeline.steps[0], &mut driver as &mut dyn AgentDriver),
            (&phase, fork.as_mut()),
        ] {
            let mut session = local();
            let workspace = session.dir.path().to_path_buf();
            let input = AgentTask {
                pipeline: &pipeline,
                step,
                agent: agent_of(&pipeline),
                attempt: Attempt::FIRST,
                workspace: &workspace,
                feedback: &[],
                custom: None,
                secrets: &crate::Secrets::default(),
            };
            runner
                .run(&input, &mut session, &mut Memory::default())
                .expect("runs");
        }
        let seen = seen.lock().expect("lock").clone();
        assert_eq!(seen.len(), 2);
        for task in &seen {
            assert!(
                task.contains("### notes/design.md\n\n```\nKeep the API stable.\n```")
                    && task.contains("### PLAN.md\n\n```\n# Plan\n- step one\n```"),
                "{task}"
            );
        }
        assert!(seen[1].contains("t1.execute"), "{}", seen[1]);
    }

    #[test]
    fn a_missing_key_fails_before_any_session_and_names_the_variable() {
        let yaml = PIPELINE.replace(
            "{provider: replay, transcript: t.jsonl}",
            "{provider: openai, model: m, api_key_env: CORDON_TEST_NO_SUCH_KEY}",
        );
        let files: BTreeMap<std::path::PathBuf, String> =
            [("/p/agents/review.agent.md", AGENT), ("/p/README.md", "x")]
                .into_iter()
                .map(|(k, v)| (std::path::PathBuf::from(k), v.to_owned()))
                .collect();
        let pipeline =
            cordon_pipeline::load_str("pipeline.yaml", &yaml, std::path::Path::new("/p"), &files)
                .expect("loads")
                .pipeline;
        let err = LoopDriver::prepare(&pipeline, &|_| Some(String::new()), &|_| None, None)
            .err()
            .expect("no key");
        assert_eq!(err.class(), crate::ErrorClass::Usage);
        assert!(
            err.to_string()
                .starts_with("the API key variable `CORDON_TEST_NO_SUCH_KEY` is not set"),
            "{err}"
        );
    }

    #[test]
    fn restore_skips_the_answered_turns_of_finished_attempts_only() {
        let step = |name: &'static str| Some(name);
        let response = || Event::LlmResponse {
            model: "m".to_owned(),
            input_tokens: 0,
            output_tokens: 0,
            latency_ms: 0,
            source: cordon_protocol::event::LlmSource::Agent,
            estimated: None,
        };
        let finished = Event::StepFinished {
            attempt: Attempt::FIRST,
            verdict: cordon_protocol::event::Verdict::Pass,
            exit_code: None,
            reason: None,
            diff: None,
            output_omitted_bytes: None,
        };
        let records = [
            // A first process answered one call, then died; the second started the attempt
            // over, answered two calls and finished it; then `dev` was interrupted.
            record(
                1,
                step("review"),
                Event::StepStarted {
                    attempt: Attempt::FIRST,
                },
            ),
            record(2, step("review"), response()),
            record(
                3,
                step("review"),
                Event::StepStarted {
                    attempt: Attempt::FIRST,
                },
            ),
            record(4, step("review"), response()),
            record(5, step("review"), response()),
            record(6, step("review"), finished),
            record(
                7,
                step("dev"),
                Event::StepStarted {
                    attempt: Attempt::FIRST,
                },
            ),
            record(8, step("dev"), response()),
        ];
        let (_, driver) = driver("{\"text\":\"one\"}\n{\"text\":\"two\"}\n{\"text\":\"three\"}\n")
            .expect("prepares");
        let mut driver = driver.expect("agent step");
        driver.restore(&records);
        let request = cordon_agent::Request {
            step: StepName::parse("review").expect("step"),
            attempt: Attempt::FIRST,
            model: "m".to_owned(),
            system: String::new(),
            messages: Vec::new(),
            tools: Vec::new(),
            temperature: None,
        };
        let answer = Locked(&driver.provider).complete(&request).expect("a turn");
        assert_eq!(answer.text.as_deref(), Some("three"));
    }

    fn record(seq: u64, step: Option<&str>, event: Event) -> Record {
        Record {
            run: "01j0000000000000000000000a".parse().expect("run id"),
            seq,
            ts: cordon_protocol::event::Timestamp(0),
            step: step.map(|s| StepName::parse(s).expect("step")),
            event,
        }
    }
}
