//! Leases: a shared store's run locks (DESIGN §16, §18).
//!
//! A lease is a row `(run, holder, generation, expires)`. Taking it succeeds when there is no
//! row or its `expires` has passed by the database's clock (never a machine's own, which may be
//! off), and bumps `generation`. The holder renews it every [`LeaseTimes::renew_every`] on a
//! connection of its own; the lease runs [`LeaseTimes::expiry`] past each renewal. A holder
//! that has not renewed for [`LeaseTimes::give_up`] (shorter than the expiry) stops itself: its
//! lease is marked lost here, its appends are refused from then on, and the process's hook
//! ([`on_lease_lost`]) runs, so it stops before another machine can take the run. If it comes back
//! after another did, the fence (`cordon_append` comparing generations) refuses its appends.
//!
//! The generations this process holds are in one process-wide table, so every connection of the
//! process (an interrupt handler's, a parallel task's) appends under the lease it holds.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cordon_protocol::RunId;

use super::session::Session as Client;
use super::target::Target;
use crate::StoreError;

/// A lease's timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTimes {
    /// How long a lease runs past its last renewal (DESIGN: 30 s).
    pub expiry: Duration,
    /// How often the holder renews it.
    pub renew_every: Duration,
    /// How long the holder goes on without a renewal before it stops itself (DESIGN: 20 s).
    pub give_up: Duration,
}

impl Default for LeaseTimes {
    fn default() -> LeaseTimes {
        LeaseTimes {
            expiry: Duration::from_secs(30),
            renew_every: Duration::from_secs(5),
            give_up: Duration::from_secs(20),
        }
    }
}

static TIMES: Mutex<Option<LeaseTimes>> = Mutex::new(None);
static LOST_HOOK: OnceLock<fn(RunId)> = OnceLock::new();
/// The leases this process holds: (store URL, run) → what it holds.
static HELD: Mutex<Held> = Mutex::new(BTreeMap::new());

struct Holding {
    generation: i64,
    lost: Arc<AtomicBool>,
    target: Arc<Target>,
}

/// Sets the lease timing for leases taken from now on (tests and benchmarks shorten it; a
/// `give_up` that is not shorter than `expiry` is clamped to half of it).
pub fn set_lease_times(times: LeaseTimes) {
    let mut times = times;
    if times.give_up >= times.expiry {
        times.give_up = times.expiry / 2;
    }
    *TIMES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(times);
}

fn times() -> LeaseTimes {
    TIMES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .unwrap_or_default()
}

/// What the process does when one of its leases is lost (the CLI prints why and exits 1, so no
/// step of the run goes on here). Set once; later calls are ignored.
pub fn on_lease_lost(hook: fn(RunId)) {
    let _ = LOST_HOOK.set(hook);
}

type Held = BTreeMap<(String, RunId), Holding>;

fn held() -> std::sync::MutexGuard<'static, Held> {
    HELD.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The generation this process holds for `run` (`None`: it holds no lease on it); a lost lease
/// is `LeaseLost`.
pub(crate) fn held_generation(target: &Target, run: RunId) -> Result<Option<i64>, StoreError> {
    match held().get(&(target.key.clone(), run)) {
        Some(holding) if holding.lost.load(Ordering::SeqCst) => {
            Err(StoreError::LeaseLost(run.to_string()))
        }
        Some(holding) => Ok(Some(holding.generation)),
        None => Ok(None),
    }
}

/// Expires every lease this process holds, at once (each on a new connection, bounded by the
/// connect timeout): for a process about to exit without running destructors (an interrupt), so
/// `cordon run --resume` need not wait out the lease.
pub fn release_leases() {
    // Marked lost first: the renewers stop, no append goes out under them, and a renewal racing
    // with the release finds the lease expired (`RENEW` renews only a live one).
    let holdings: Vec<(RunId, i64, Arc<Target>)> = held()
        .iter()
        .map(|((_, run), h)| {
            h.lost.store(true, Ordering::SeqCst);
            (*run, h.generation, Arc::clone(&h.target))
        })
        .collect();
    for (run, generation, target) in holdings {
        if let Ok(mut client) = target.connect_within(Duration::from_secs(2)) {
            let _ = client.execute(RELEASE, &[&run.to_string(), &generation]);
        }
    }
}

/// A held lease; dropping it stops the renewals and expires it at once, keeping its generation.
pub(crate) struct Lease {
    key: (String, RunId),
    run: RunId,
    generation: i64,
    stop: Option<mpsc::Sender<()>>,
    renewer: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

const TAKE: &str = "INSERT INTO leases (run, holder, generation, expires) \
     VALUES ($1, $2, 1, now() + make_interval(secs => $3)) \
     ON CONFLICT (run) DO UPDATE SET holder = EXCLUDED.holder, \
         generation = leases.generation + 1, expires = EXCLUDED.expires \
     WHERE leases.expires <= now() \
     RETURNING generation";
// A lease that has expired is not renewed, even when nobody has taken it yet: its holder was
// frozen past the expiry (or released it), and another machine may be about to take it.
const RENEW: &str = "UPDATE leases SET expires = now() + make_interval(secs => $3) \
     WHERE run = $1 AND generation = $2 AND expires > now()";
const RELEASE: &str = "UPDATE leases SET expires = now() WHERE run = $1 AND generation = $2";

impl Lease {
    /// Takes the run's lease when it is free or expired (`None`: another holder's is live) and
    /// starts renewing it.
    pub(crate) fn take(
        client: &mut Client,
        target: &Arc<Target>,
        run: RunId,
    ) -> Result<Option<Lease>, StoreError> {
        let times = times();
        let id = run.to_string();
        let row = client
            .query_opt(TAKE, &[&id, &holder(), &times.expiry.as_secs_f64()])
            .map_err(|err| target.error(&err))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let generation: i64 = row.get(0);
        let lost = Arc::new(AtomicBool::new(false));
        let key = (target.key.clone(), run);
        let release = |client: &mut Client| {
            let _ = client.execute(RELEASE, &[&id, &generation]);
        };
        held().insert(
            key.clone(),
            Holding {
                generation,
                lost: Arc::clone(&lost),
                target: Arc::clone(target),
            },
        );
        let (stop, stopped) = mpsc::channel();
        let target = Arc::clone(target);
        let renewer = std::thread::Builder::new()
            .name(format!("lease-{id}"))
            .spawn(move || renew(&target, run, generation, times, &stopped, &lost));
        let renewer = match renewer {
            Ok(renewer) => renewer,
            Err(source) => {
                held().remove(&key);
                release(client);
                return Err(StoreError::Io {
                    path: "lease renewal thread".into(),
                    source,
                });
            }
        };
        Ok(Some(Lease {
            key,
            run,
            generation,
            stop: Some(stop),
            renewer: Some(renewer),
        }))
    }

    pub(crate) fn describe(&self) -> String {
        format!("lease on run {} (generation {})", self.run, self.generation)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Closing the channel wakes the renewer, which expires the lease and returns.
        drop(self.stop.take());
        if let Some(renewer) = self.renewer.take() {
            let _ = renewer.join();
        }
        let mut held = held();
        if held
            .get(&self.key)
            .is_some_and(|h| h.generation == self.generation)
        {
            held.remove(&self.key);
        }
    }
}

/// The renewer: renews every `renew_every` until told to stop (then expires the lease); when the
/// store has not taken a renewal for `give_up`, or the lease was taken over, marks it lost.
fn renew(
    target: &Target,
    run: RunId,
    generation: i64,
    times: LeaseTimes,
    stopped: &mpsc::Receiver<()>,
    lost: &AtomicBool,
) {
    let id = run.to_string();
    let expiry = times.expiry.as_secs_f64();
    // Each attempt (connecting, then renewing) is bounded so that the last one, started before
    // `give_up`, ends before the lease can expire.
    let limit = (times.expiry.saturating_sub(times.give_up) / 2).min(Duration::from_secs(3));
    let mut client: Option<Client> = None;
    let mut renewed = Instant::now();
    loop {
        let wait = times
            .renew_every
            .min(times.give_up.saturating_sub(renewed.elapsed()));
        match stopped.recv_timeout(wait) {
            // Released by `release_leases` (the process is exiting).
            Err(RecvTimeoutError::Timeout) if lost.load(Ordering::SeqCst) => return,
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                let client = client
                    .take()
                    .filter(|c| !c.is_closed())
                    .or_else(|| target.connect_within(limit).ok());
                if let Some(mut client) = client {
                    let _ = client.execute(RELEASE, &[&id, &generation]);
                }
                return;
            }
        }
        if client.as_ref().is_none_or(Client::is_closed) {
            client = target.connect_within(limit).ok();
        }
        let outcome = client
            .as_mut()
            .map(|c| c.execute(RENEW, &[&id, &generation, &expiry]));
        match outcome {
            Some(Ok(1)) => renewed = Instant::now(),
            // The row has another generation: the lease expired and another holder took it.
            Some(Ok(_)) => return lose(run, lost),
            Some(Err(_)) | None => {
                client = None;
                if renewed.elapsed() >= times.give_up {
                    return lose(run, lost);
                }
            }
        }
    }
}

fn lose(run: RunId, lost: &AtomicBool) {
    // Already marked: released on the way out, not lost; the process is ending as it chose.
    if lost.swap(true, Ordering::SeqCst) {
        return;
    }
    if let Some(hook) = LOST_HOOK.get() {
        hook(run);
    }
}

/// Who holds a lease, as other machines see it: host name and process id.
fn holder() -> String {
    use std::io::Read as _;
    let mut host = String::new();
    let _ = std::fs::File::open("/proc/sys/kernel/hostname")
        .and_then(|file| file.take(64).read_to_string(&mut host));
    let host = match host.trim() {
        "" => "unknown-host",
        name => name,
    };
    format!("cordon pid {} on {host}", std::process::id())
}
