//! The agent loop of one step attempt: a fresh conversation (system prompt = the agent file's
//! body, one task message), model calls until the model answers without tool calls or the
//! `max_iterations` budget is spent, every tool call answered by exactly one result, and the
//! `llm.*` / `tool.*` events reported through the [`Journal`].

use std::collections::HashSet;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use cordon_pipeline::Tool;
use cordon_protocol::event::{LlmSource, OutputStream};
use cordon_protocol::{Attempt, Event, StepName};

use crate::console;
use crate::custom::CustomTools;
use crate::grants::Grants;
use crate::journal::{Journal, JournalError};
use crate::message::{Message, Request, ToolCall};
use crate::output::TruncateLimits;
use crate::provider::{Provider, ProviderError};
use crate::tool_host::{ToolHost, ToolHostError};
use crate::tools::{Context, Outcome, Toolbox};

/// What one attempt of an agent step is.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentSpec {
    pub step: StepName,
    pub attempt: Attempt,
    pub model: String,
    /// The agent file's body.
    pub system_prompt: String,
    /// The rendered [`Task`](crate::Task).
    pub task: String,
    /// The tools the agent file allows, in its order.
    pub tools: Vec<Tool>,
    pub max_iterations: NonZeroU32,
    pub temperature: Option<f64>,
    /// The step's `timeout`: the whole attempt's wall-clock budget, which also caps each bash
    /// call.
    pub timeout: Option<Duration>,
    /// The workspace path, where the first bash call starts.
    pub workspace: String,
    pub limits: TruncateLimits,
}

/// The engine's side: the provider, the sandbox, the store, the grant bounds.
pub struct Hooks<'a> {
    pub provider: &'a mut dyn Provider,
    pub host: &'a mut dyn ToolHost,
    pub journal: &'a mut dyn Journal,
    pub grants: &'a mut dyn Grants,
    /// Tools the engine answers itself (`submit_tasks`, `submit_plan`); [`NoCustomTools`] for
    /// none.
    ///
    /// [`NoCustomTools`]: crate::NoCustomTools
    pub custom: &'a mut dyn CustomTools,
}

/// How an attempt ended, when nothing broke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentOutcome {
    /// The model answered without tool calls; its final text (verdicts may be read from it).
    Finished { text: String },
    /// The attempt failed for a reason that goes into the feedback (`max_iterations`, timeout,
    /// replay exhausted).
    Failed { reason: String },
}

/// Something outside the agent's control broke; the step cannot finish.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The provider failed (auth: exit 2; otherwise the run stops, resumable).
    #[error(transparent)]
    Provider(ProviderError),
    #[error(transparent)]
    Host(ToolHostError),
    #[error(transparent)]
    Journal(JournalError),
}

/// Runs one attempt of an agent step.
pub fn run(spec: &AgentSpec, hooks: Hooks<'_>) -> Result<AgentOutcome, AgentError> {
    let Hooks {
        provider,
        host,
        journal,
        grants,
        custom,
    } = hooks;
    let started = Instant::now();
    let deadline = spec.timeout.map(|t| started + t);
    let mut toolbox = Toolbox::new(
        &spec.tools,
        &spec.workspace,
        custom.specs().into_iter().map(|s| s.name).collect(),
    );
    let mut request = Request {
        step: spec.step.clone(),
        attempt: spec.attempt,
        model: spec.model.clone(),
        system: spec.system_prompt.clone(),
        messages: vec![Message::User {
            text: spec.task.clone(),
        }],
        tools: toolbox.specs().into_iter().chain(custom.specs()).collect(),
        temperature: spec.temperature,
    };
    let mut ids = HashSet::new();
    let mut repeats = Repeats::default();
    let max = spec.max_iterations.get();
    for iteration in 1..=max {
        if let Some(reason) = out_of_time(deadline, spec.timeout) {
            return Ok(AgentOutcome::Failed { reason });
        }
        journal
            .event(Event::LlmRequest {
                model: spec.model.clone(),
                source: LlmSource::Agent,
                task: (iteration == 1).then(|| bounded_task(&spec.task)),
            })
            .map_err(AgentError::Journal)?;
        let asked = Instant::now();
        let response = match provider.complete(&request) {
            Ok(response) => response,
            Err(err @ ProviderError::ReplayExhausted { .. }) => {
                return Ok(AgentOutcome::Failed {
                    reason: err.to_string(),
                });
            }
            Err(err) => return Err(AgentError::Provider(err)),
        };
        // An upstream that reports no usage (every real call has input) is counted by
        // estimate, marked so, so budgets still bound it.
        let unreported = response.usage.input_tokens == 0 && response.usage.output_tokens == 0;
        let (input_tokens, output_tokens) = if unreported {
            (request.estimated_tokens(), response.estimated_tokens())
        } else {
            (response.usage.input_tokens, response.usage.output_tokens)
        };
        journal
            .event(Event::LlmResponse {
                model: response.model.clone(),
                input_tokens,
                output_tokens,
                latency_ms: u64::try_from(asked.elapsed().as_millis()).unwrap_or(u64::MAX),
                source: LlmSource::Agent,
                estimated: unreported.then_some(true),
            })
            .map_err(AgentError::Journal)?;
        if let Some(text) = response.text.as_deref().filter(|t| !t.trim().is_empty()) {
            console(journal, console::text_lines(text))?;
        }
        let calls = with_unique_ids(response.tool_calls, iteration, &mut ids);
        request.messages.push(Message::Assistant {
            text: response.text.clone(),
            tool_calls: calls.clone(),
        });
        if calls.is_empty() {
            return Ok(AgentOutcome::Finished {
                text: response.text.unwrap_or_default(),
            });
        }
        let mut cx = Context {
            host: &mut *host,
            journal: &mut *journal,
            grants: &mut *grants,
            custom: &mut *custom,
            deadline,
        };
        for call in calls {
            let output = match answer(&mut toolbox, &call, &mut cx, &spec.limits)? {
                Answer::Message(message) => message,
                Answer::Fatal(reason) => return Ok(AgentOutcome::Failed { reason }),
            };
            let stuck = repeats.see(&call, &output);
            request.messages.push(output);
            if let Some(reason) = stuck {
                return Ok(AgentOutcome::Failed { reason });
            }
        }
    }
    Ok(AgentOutcome::Failed {
        reason: format!(
            "the agent used all {max} model calls of `max_iterations` without finishing; raise \
             `max_iterations` or narrow the task"
        ),
    })
}

/// How many identical calls in a row (the same tool, arguments and result) end an attempt as
/// stuck (DESIGN §12).
const STUCK_AFTER: u32 = 3;

/// The last call and how many times in a row it was made with the same result.
#[derive(Default)]
struct Repeats {
    last: Option<(String, String, String)>,
    count: u32,
}

impl Repeats {
    /// Notes `call` and its `result`; the reason to stop when it is the [`STUCK_AFTER`]th
    /// identical one in a row — the call and its result in it, for the next attempt's feedback.
    fn see(&mut self, call: &ToolCall, result: &Message) -> Option<String> {
        let output = match result {
            Message::Tool { output, .. } => output.clone(),
            _ => String::new(),
        };
        let key = (call.name.clone(), call.arguments_json().to_string(), output);
        if self.last.as_ref() == Some(&key) {
            self.count += 1;
        } else {
            self.last = Some(key);
            self.count = 1;
        }
        if self.count < STUCK_AFTER {
            return None;
        }
        let (name, arguments, output) = self.last.as_ref()?;
        let shown: String = output.chars().take(2000).collect();
        Some(format!(
            "stuck: the same {name} call {STUCK_AFTER} times in a row\n\nThe call, each time: \
             {name} {arguments}\nIts result, each time:\n{shown}\nTry something else."
        ))
    }
}

/// Runs one call and records its `tool.call` / `tool.result` pair; the result goes back to the
/// model. A host or store failure still records a result before it stops the step.
fn answer(
    toolbox: &mut Toolbox,
    call: &ToolCall,
    cx: &mut Context<'_>,
    limits: &TruncateLimits,
) -> Result<Answer, AgentError> {
    console(cx.journal, console::call_line(call))?;
    cx.journal
        .event(Event::ToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments_json(),
            server: cx.custom.server(&call.name),
        })
        .map_err(AgentError::Journal)?;
    let outcome = match toolbox.call(call, cx) {
        Ok(outcome) => outcome,
        Err(err) => {
            let _ = cx.journal.event(Event::ToolResult {
                id: call.id.clone(),
                ok: false,
                interrupted: None,
                output: format!("error: {err}"),
            });
            return Err(err);
        }
    };
    let Outcome { output, ok, fatal } = outcome;
    let output = cx.journal.scrub(&output);
    let shown = if limits.exceeded_by(&output) {
        let blob = cx
            .journal
            .blob(output.as_bytes())
            .map_err(AgentError::Journal)?;
        limits.cut(&output, &format!("blob {}", blob.0))
    } else {
        output
    };
    cx.journal
        .event(Event::ToolResult {
            id: call.id.clone(),
            ok,
            interrupted: None,
            output: shown.clone(),
        })
        .map_err(AgentError::Journal)?;
    if !ok {
        console(cx.journal, console::failure_line(&shown))?;
    }
    if fatal {
        return Ok(Answer::Fatal(shown));
    }
    Ok(Answer::Message(Message::Tool {
        call_id: call.id.clone(),
        output: shown,
        is_error: !ok,
    }))
}

/// A call's answer for the model, or the end of the attempt.
enum Answer {
    Message(Message),
    /// The attempt cannot go on; the reason (a dead MCP server and its stderr).
    Fatal(String),
}

/// One `step.output` chunk of the agent's console.
fn console(journal: &mut dyn Journal, text: String) -> Result<(), AgentError> {
    journal
        .event(Event::StepOutput {
            stream: OutputStream::Stdout,
            text,
        })
        .map_err(AgentError::Journal)
}

/// Gives every call a non-empty id unique in the conversation (some local servers send none).
fn with_unique_ids(
    calls: Vec<ToolCall>,
    iteration: u32,
    seen: &mut HashSet<String>,
) -> Vec<ToolCall> {
    calls
        .into_iter()
        .enumerate()
        .map(|(k, mut call)| {
            if call.id.is_empty() || seen.contains(&call.id) {
                call.id = format!("call_{iteration}_{}", k + 1);
            }
            seen.insert(call.id.clone());
            call
        })
        .collect()
}

fn out_of_time(deadline: Option<Instant>, timeout: Option<Duration>) -> Option<String> {
    let (deadline, timeout) = (deadline?, timeout?);
    (Instant::now() >= deadline).then(|| {
        format!(
            "the agent step ran out of its {} s `timeout`; raise `timeout` or narrow the task",
            timeout.as_secs()
        )
    })
}

/// The most bytes of the task message `llm.request{task}` records.
pub const MAX_RECORDED_TASK: usize = 64 << 10;

/// `task`, cut to [`MAX_RECORDED_TASK`] bytes at a character boundary with a marker.
fn bounded_task(task: &str) -> String {
    if task.len() <= MAX_RECORDED_TASK {
        return task.to_owned();
    }
    let mut cut = MAX_RECORDED_TASK;
    while !task.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}\n[cordon: {} more bytes not recorded]",
        &task[..cut],
        task.len() - cut
    )
}
