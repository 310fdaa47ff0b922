//! `SideEvents`: the events a session produces on its own — its egress proxy's audit records,
//! its model lane's calls, the resource guard's samples of a tool call — queued from other
//! threads and appended by the engine on its own (the store has one writer).
//!
//! Audit records are bounded here (DESIGN §10): repeats of one (decision, reason, host, port)
//! within a second become one record with a `count`, and a session stores at most
//! [`SESSION_RECORDS`] of them, then one `egress.dropped{count}` when it ends.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use cordon_egress::proxy::{AuditDecision, AuditKind, AuditRecord, Coalescer, SESSION_RECORDS};
use cordon_protocol::Event;

/// One session's queue (cloned handles share it).
#[derive(Clone)]
pub struct SideEvents(Arc<Mutex<Queue>>);

struct Queue {
    events: Vec<Event>,
    egress: Coalescer,
}

impl Default for SideEvents {
    fn default() -> SideEvents {
        SideEvents::new(Vec::new())
    }
}

impl SideEvents {
    /// A queue holding `first` already.
    pub fn new(first: Vec<Event>) -> SideEvents {
        SideEvents(Arc::new(Mutex::new(Queue {
            events: first,
            egress: Coalescer::new(SESSION_RECORDS),
        })))
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues an event as it is.
    pub fn push(&self, event: Event) {
        self.queue().events.push(event);
    }

    /// Queues an audit record, coalesced and capped.
    pub fn audit(&self, kind: AuditKind, record: &AuditRecord) -> std::io::Result<()> {
        let mut queue = self.queue();
        queue.egress.check_room(kind, record)?;
        let due = queue.egress.admit(kind, record, Instant::now());
        for (kind, record) in due {
            let event = event(kind, &record)?;
            queue.events.push(event);
        }
        Ok(())
    }

    /// Takes every queued event, oldest first (coalesced repeats whose second has passed
    /// included).
    pub fn drain(&self) -> Vec<Event> {
        let mut queue = self.queue();
        let due = queue.egress.expire(Instant::now());
        for (kind, record) in due {
            if let Ok(event) = event(kind, &record) {
                queue.events.push(event);
            }
        }
        std::mem::take(&mut queue.events)
    }

    /// Takes everything, once the session has ended: what coalescing still held, and
    /// `egress.dropped` when the cap was reached.
    pub fn finish(&self) -> Vec<Event> {
        let mut queue = self.queue();
        let (held, dropped) = queue.egress.finish();
        for (kind, record) in held {
            if let Ok(event) = event(kind, &record) {
                queue.events.push(event);
            }
        }
        if dropped > 0 {
            queue.events.push(Event::EgressDropped { count: dropped });
        }
        std::mem::take(&mut queue.events)
    }
}

/// The event of one audit record: the same Appendix A fields, through their JSON form.
fn event(kind: AuditKind, record: &AuditRecord) -> std::io::Result<Event> {
    let value = serde_json::to_value(record).map_err(std::io::Error::other)?;
    let data: cordon_protocol::event::AuditRecord =
        serde_json::from_value(value).map_err(std::io::Error::other)?;
    Ok(match (kind, record.decision) {
        (AuditKind::Close, _) => Event::EgressClose(data),
        (AuditKind::Decision, AuditDecision::Allow) => Event::EgressAllow(data),
        (AuditKind::Decision, AuditDecision::Deny) => Event::EgressDeny(data),
    })
}
