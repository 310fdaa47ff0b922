//! Bounded audit records (DESIGN §10): repeats of one (record kind, protocol, decision, reason,
//! host, port)
//! within a second become one record with a `count`, and one session keeps at most a fixed number
//! of records; past it, records are counted as dropped.
//!
//! The first record of a burst is passed on at once (a refusal is visible while the client still
//! retries); the repeats that follow within [`WINDOW`] are merged into one record — `count`
//! requests, the bytes summed, the longest duration, the last timestamp — passed on when the
//! window ends (the next record after it, [`Coalescer::expire`], or [`Coalescer::finish`]). So the
//! counts of all records add up to the requests made, and a client looping on a refused request
//! costs one or two records a second, not one per request.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::audit::{AuditDecision, AuditKind, AuditRecord, Proto};

/// How long repeats are merged.
pub const WINDOW: Duration = Duration::from_secs(1);
/// The most records one session stores (DESIGN §10).
pub const SESSION_RECORDS: usize = 10_000;
/// The most bursts tracked at once; a record beyond it is passed on uncoalesced (it still counts
/// against the cap).
const MAX_OPEN: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    close: bool,
    /// Kept apart too, so a coalesced record's `proto` is true of every request it counts.
    http: bool,
    allow: bool,
    reason: Option<&'static str>,
    host: Option<String>,
    port: Option<u16>,
}

struct Burst {
    started: Instant,
    repeats: Option<(AuditKind, AuditRecord)>,
}

/// The coalescing and cap of one session's (or one audit file's) records.
pub struct Coalescer {
    open: HashMap<Key, Burst>,
    cap: usize,
    /// Records kept: allow decisions apart from the rest, each against the cap, so a flood of
    /// refusals cannot leave the connections it did open unrecorded.
    passed: usize,
    passed_allows: usize,
    dropped: u64,
    last_sweep: Option<Instant>,
}

impl Coalescer {
    /// Keeps at most `cap` records (`usize::MAX`: no cap).
    pub fn new(cap: usize) -> Coalescer {
        Coalescer {
            open: HashMap::new(),
            cap,
            passed: 0,
            passed_allows: 0,
            dropped: 0,
            last_sweep: None,
        }
    }

    /// Refuses `record` rather than admit it: an allow decision once the allow budget is spent.
    /// A sink returns the error, and a connection that could not be recorded is not opened.
    pub fn check_room(&self, kind: AuditKind, record: &AuditRecord) -> std::io::Result<()> {
        if kind == AuditKind::Decision
            && record.decision == AuditDecision::Allow
            && self.passed_allows >= self.cap
        {
            return Err(std::io::Error::other(
                "the session's budget of audit records for allowed connections is spent",
            ));
        }
        Ok(())
    }

    /// Takes `record`, made at `now`; returns what to store now, oldest first.
    pub fn admit(
        &mut self,
        kind: AuditKind,
        record: &AuditRecord,
        now: Instant,
    ) -> Vec<(AuditKind, AuditRecord)> {
        let mut out = self.expire(now);
        let key = Key {
            close: kind == AuditKind::Close,
            http: record.proto == Proto::Http,
            allow: record.decision == AuditDecision::Allow,
            reason: record.reason,
            host: record.host.clone(),
            port: record.port,
        };
        match self.open.get_mut(&key) {
            Some(burst) if now.duration_since(burst.started) < WINDOW => match &mut burst.repeats {
                Some((_, merged)) => {
                    merged.count += record.count;
                    merged.bytes_up += record.bytes_up;
                    merged.bytes_down += record.bytes_down;
                    merged.duration_ms = merged.duration_ms.max(record.duration_ms);
                    merged.ts.clone_from(&record.ts);
                }
                None => burst.repeats = Some((kind, record.clone())),
            },
            _ => {
                // A burst whose window has ended hands over its repeats before the next starts.
                if let Some(Burst {
                    repeats: Some(merged),
                    ..
                }) = self.open.remove(&key)
                {
                    let kept = self.capped(vec![merged]);
                    out.extend(kept);
                }
                if self.open.len() < MAX_OPEN {
                    self.open.insert(
                        key,
                        Burst {
                            started: now,
                            repeats: None,
                        },
                    );
                }
                let kept = self.capped(vec![(kind, record.clone())]);
                out.extend(kept);
            }
        }
        out
    }

    /// The merged repeats of every burst whose window has ended by `now`.
    pub fn expire(&mut self, now: Instant) -> Vec<(AuditKind, AuditRecord)> {
        if self
            .last_sweep
            .is_some_and(|last| now.duration_since(last) < WINDOW / 4)
        {
            return Vec::new();
        }
        self.last_sweep = Some(now);
        let ended: Vec<Key> = self
            .open
            .iter()
            .filter(|(_, burst)| now.duration_since(burst.started) >= WINDOW)
            .map(|(key, _)| key.clone())
            .collect();
        let mut out: Vec<(Instant, (AuditKind, AuditRecord))> = Vec::new();
        for key in ended {
            if let Some(Burst {
                started,
                repeats: Some(merged),
            }) = self.open.remove(&key)
            {
                out.push((started, merged));
            }
        }
        out.sort_by_key(|(started, _)| *started);
        let out = out.into_iter().map(|(_, record)| record).collect();
        self.capped(out)
    }

    /// Everything still held, and how many requests the cap dropped (0: none).
    pub fn finish(&mut self) -> (Vec<(AuditKind, AuditRecord)>, u64) {
        let mut held: Vec<(Instant, (AuditKind, AuditRecord))> = self
            .open
            .drain()
            .filter_map(|(_, burst)| burst.repeats.map(|r| (burst.started, r)))
            .collect();
        held.sort_by_key(|(started, _)| *started);
        let out = self.capped(held.into_iter().map(|(_, r)| r).collect());
        (out, self.dropped)
    }

    fn capped(&mut self, records: Vec<(AuditKind, AuditRecord)>) -> Vec<(AuditKind, AuditRecord)> {
        let mut kept = Vec::with_capacity(records.len());
        for record in records {
            let allow =
                record.0 == AuditKind::Decision && record.1.decision == AuditDecision::Allow;
            let passed = if allow {
                &mut self.passed_allows
            } else {
                &mut self.passed
            };
            if *passed < self.cap {
                *passed += 1;
                kept.push(record);
            } else {
                self.dropped += record.1.count;
            }
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(host: &str, reason: Option<&'static str>) -> AuditRecord {
        AuditRecord {
            ts: "2026-01-31T12:00:00.000Z".to_owned(),
            listener: "l".to_owned(),
            step: None,
            attempt: None,
            proto: Proto::Connect,
            raw_target: format!("{host}:443"),
            host: Some(host.to_owned()),
            port: Some(443),
            resolved: Vec::new(),
            dialed: None,
            decision: if reason.is_some() {
                AuditDecision::Deny
            } else {
                AuditDecision::Allow
            },
            reason,
            bytes_up: 1,
            bytes_down: 2,
            duration_ms: 3,
            count: 1,
        }
    }

    #[test]
    fn repeats_within_a_second_become_one_record_with_their_count() {
        let mut c = Coalescer::new(SESSION_RECORDS);
        let t0 = Instant::now();
        let denied = record("a.test", Some("not_allowed"));
        let first = c.admit(AuditKind::Decision, &denied, t0);
        assert_eq!(first.len(), 1);
        for i in 1..500u32 {
            let out = c.admit(
                AuditKind::Decision,
                &denied,
                t0 + Duration::from_millis(u64::from(i)),
            );
            assert!(out.is_empty());
        }
        // Another destination is its own burst.
        assert_eq!(
            c.admit(
                AuditKind::Decision,
                &record("b.test", Some("not_allowed")),
                t0
            )
            .len(),
            1
        );
        let later = c.expire(t0 + WINDOW);
        assert_eq!(later.len(), 1);
        assert_eq!(later[0].1.count, 499);
        assert_eq!(later[0].1.bytes_up, 499);
        // The next repeat after the window starts a burst of its own.
        assert_eq!(
            c.admit(AuditKind::Decision, &denied, t0 + WINDOW * 2).len(),
            1
        );
        let (rest, dropped) = c.finish();
        assert!(rest.is_empty());
        assert_eq!(dropped, 0);
    }

    #[test]
    fn decisions_and_closes_and_reasons_are_kept_apart() {
        let mut c = Coalescer::new(SESSION_RECORDS);
        let t0 = Instant::now();
        let allowed = record("a.test", None);
        assert_eq!(c.admit(AuditKind::Decision, &allowed, t0).len(), 1);
        assert_eq!(c.admit(AuditKind::Close, &allowed, t0).len(), 1);
        assert_eq!(
            c.admit(AuditKind::Decision, &record("a.test", Some("self")), t0)
                .len(),
            1
        );
        assert!(c.admit(AuditKind::Close, &allowed, t0).is_empty());
        let (held, _) = c.finish();
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].0, AuditKind::Close);
    }

    #[test]
    fn expired_repeats_count_once_against_the_cap() {
        let mut c = Coalescer::new(3);
        let t0 = Instant::now();
        let denied = record("a.test", Some("not_allowed"));
        let mut kept = c.admit(AuditKind::Decision, &denied, t0).len();
        kept += c.admit(AuditKind::Decision, &denied, t0).len();
        // The merged repeat comes out with the next record after the window: two records.
        kept += c
            .admit(
                AuditKind::Decision,
                &record("b.test", Some("not_allowed")),
                t0 + WINDOW,
            )
            .len();
        assert_eq!(kept, 3);
        kept += c
            .admit(
                AuditKind::Decision,
                &record("c.test", Some("not_allowed")),
                t0 + WINDOW,
            )
            .len();
        assert_eq!(kept, 3, "the cap of 3 holds");
        assert_eq!(c.finish().1, 1);
    }

    #[test]
    fn a_session_keeps_at_most_its_cap_and_counts_the_rest() {
        let mut c = Coalescer::new(3);
        let t0 = Instant::now();
        let mut kept = 0;
        for i in 0..10 {
            kept += c
                .admit(
                    AuditKind::Decision,
                    &record(&format!("h{i}.test"), Some("not_allowed")),
                    t0,
                )
                .len();
        }
        let denied = record("h0.test", Some("not_allowed"));
        for _ in 0..5 {
            c.admit(AuditKind::Decision, &denied, t0);
        }
        let (held, dropped) = c.finish();
        assert_eq!(kept + held.len(), 3);
        assert_eq!(dropped, 7 + 5);
    }

    #[test]
    fn a_flood_of_refusals_never_leaves_an_allowed_connection_unrecorded() {
        let mut c = Coalescer::new(3);
        let t0 = Instant::now();
        // Refusals to distinct names spend their budget...
        for i in 0..10 {
            let denied = record(&format!("d{i}.test"), Some("not_allowed"));
            assert!(c.check_room(AuditKind::Decision, &denied).is_ok());
            c.admit(AuditKind::Decision, &denied, t0);
        }
        // ...not the allowed connections': they are still recorded.
        let allowed = record("ok.test", None);
        assert!(c.check_room(AuditKind::Decision, &allowed).is_ok());
        assert_eq!(c.admit(AuditKind::Decision, &allowed, t0).len(), 1);
        for i in 0..2 {
            let allowed = record(&format!("ok{i}.test"), None);
            assert!(c.check_room(AuditKind::Decision, &allowed).is_ok());
            c.admit(AuditKind::Decision, &allowed, t0);
        }
        // Past their own budget a new allowed connection is refused (the sink fails, the proxy
        // drops it) rather than opened unrecorded; a refusal is still only counted.
        assert!(
            c.check_room(AuditKind::Decision, &record("late.test", None))
                .is_err()
        );
        assert!(
            c.check_room(
                AuditKind::Decision,
                &record("late.test", Some("not_allowed"))
            )
            .is_ok()
        );
    }
}
