//! [`GuardedSession`]: a step's session with the guardrail watching every command run through
//! it — how an agent step's tool calls are sampled, since the agent loop, not the engine, runs
//! them. Its samples and warnings queue with the session's own events (appended after each tool
//! process, before its `sandbox.exec`); once the disk is exhausted, the running process is
//! killed and every later command is refused with the reason.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

use cordon_protocol::event::OutputStream;

use super::{Monitor, Reading, ResourceGuard};
use crate::executor::{CommandResult, ExecError, Gauges, StepSession, Tick, Watch};
use crate::side::SideEvents;

pub struct GuardedSession {
    inner: Box<dyn StepSession>,
    monitor: Rc<RefCell<Monitor>>,
    guard: ResourceGuard,
    workspace: PathBuf,
    /// The inner session's own queue when it has one (so the order with egress events is kept),
    /// else a queue of its own.
    events: SideEvents,
}

impl GuardedSession {
    pub fn new(
        inner: Box<dyn StepSession>,
        monitor: Rc<RefCell<Monitor>>,
        guard: ResourceGuard,
        workspace: PathBuf,
    ) -> GuardedSession {
        let events = inner.side_events().unwrap_or_default();
        GuardedSession {
            inner,
            monitor,
            guard,
            workspace,
            events,
        }
    }
}

impl ResourceGuard {
    /// A reading of the workspace filesystem (sampled now) with a session's gauges.
    pub fn reading(&self, workspace: &std::path::Path, gauges: &Gauges) -> Reading {
        Reading {
            workspace: (self.sample)(workspace).ok(),
            tmp: gauges.tmp_percent,
            memory: gauges.memory,
        }
    }
}

impl StepSession for GuardedSession {
    fn run(
        &mut self,
        argv: &[String],
        on_output: &mut dyn FnMut(OutputStream, &[u8]),
    ) -> Result<CommandResult, ExecError> {
        if let Some(reason) = self.monitor.borrow().exhausted() {
            return Err(ExecError::Failed(reason.to_owned()));
        }
        let GuardedSession {
            inner,
            monitor,
            guard,
            workspace,
            events,
        } = self;
        let mut tick = |gauges: &Gauges| {
            let reading = guard.reading(workspace, gauges);
            let mut monitor = monitor.borrow_mut();
            let found = monitor.observe(&reading, Instant::now());
            for event in found {
                events.push(event);
            }
            match monitor.exhausted() {
                Some(_) => Tick::Stop,
                None => Tick::Continue,
            }
        };
        let watch = Watch {
            every: guard.every,
            tick: &mut tick,
        };
        inner.run_watched(argv, watch, on_output)
    }

    fn gauges(&self) -> Gauges {
        self.inner.gauges()
    }

    fn side_events(&self) -> Option<SideEvents> {
        Some(self.events.clone())
    }

    // A background process (an MCP server) is the session's like any workload: the session's
    // memory cap and tmpfs bound it, and the guard samples the session as a whole.
    fn spawn_background(
        &mut self,
        argv: &[String],
        env: &[(String, String)],
    ) -> Result<crate::executor::Background, ExecError> {
        if let Some(reason) = self.monitor.borrow().exhausted() {
            return Err(ExecError::Failed(reason.to_owned()));
        }
        self.inner.spawn_background(argv, env)
    }

    fn host_proxy(&self) -> Option<crate::executor::HostProxy> {
        self.inner.host_proxy()
    }

    fn close(self: Box<Self>) {
        self.inner.close();
    }
}
