//! Listeners: the accept loop, its identity, the connection limit and graceful shutdown.
//!
//! A listener's [`Identity`] is fixed when it is served and copied into every audit record of
//! every connection it accepts. Nothing a client sends can change it: attribution to a run, step
//! and attempt comes from which socket the connection arrived on, never from a header.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::JoinSet;

use super::{Proxy, ProxyConfig, connection};

/// Who a listener serves. Opaque to the proxy: it only copies these into audit records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// A name for the listener (a session id, or `proxy` for `cordon proxy`).
    pub listener: String,
    /// The step whose session this listener belongs to, if any.
    pub step: Option<String>,
    /// The attempt of that step, if any.
    pub attempt: Option<u32>,
    /// The `Proxy-Authorization` value every request must carry (a listener on the host's
    /// loopback that only cordon itself may use); `None` for a listener inside a session.
    /// Without it a request is answered `407` and closed, before any decision is made or
    /// recorded.
    pub credential: Option<String>,
}

/// The sending side of a shutdown: [`Shutdown::trigger`] (or dropping it) stops every listener
/// holding one of its [`ShutdownSignal`]s.
#[derive(Debug)]
pub struct Shutdown {
    sender: watch::Sender<bool>,
}

/// The receiving side of a [`Shutdown`]; clone it for each listener.
#[derive(Clone, Debug)]
pub struct ShutdownSignal {
    receiver: watch::Receiver<bool>,
}

impl Shutdown {
    /// A shutdown that has not fired, and its signal.
    pub fn new() -> (Shutdown, ShutdownSignal) {
        let (sender, receiver) = watch::channel(false);
        (Shutdown { sender }, ShutdownSignal { receiver })
    }

    /// Fires: listeners stop accepting, keep-alive connections close after their current
    /// request, and whatever is still open after the grace period is dropped.
    pub fn trigger(&self) {
        self.sender.send_replace(true);
    }
}

impl ShutdownSignal {
    /// Completes once the shutdown fired or its [`Shutdown`] was dropped.
    pub async fn fired(&mut self) {
        // An error means the sender is gone, which is a shutdown too.
        let _ = self.receiver.wait_for(|fired| *fired).await;
    }

    /// Whether the shutdown already fired (or its sender is gone).
    pub fn has_fired(&self) -> bool {
        *self.receiver.borrow() || self.receiver.has_changed().is_err()
    }
}

/// What one client (peer address) holds.
#[derive(Default)]
struct ClientUse {
    connections: usize,
    lookups: usize,
}

/// State every listener of one [`Proxy`] shares.
pub(super) struct Shared {
    pub(super) config: ProxyConfig,
    permits: Arc<Semaphore>,
    open: AtomicUsize,
    closed: Notify,
    clients: Mutex<HashMap<IpAddr, ClientUse>>,
    /// Woken when a connection waits for a free slot: idle keep-alive connections close.
    pub(super) pressure: Notify,
}

/// A client's share held by one connection or one lookup; dropping it gives it back.
pub(super) struct Share<'a> {
    shared: &'a Shared,
    client: IpAddr,
    lookup: bool,
}

impl Drop for Share<'_> {
    fn drop(&mut self) {
        let mut clients = self
            .shared
            .clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(used) = clients.get_mut(&self.client) {
            if self.lookup {
                used.lookups = used.lookups.saturating_sub(1);
            } else {
                used.connections = used.connections.saturating_sub(1);
            }
            if used.connections == 0 && used.lookups == 0 {
                clients.remove(&self.client);
            }
        }
    }
}

impl Shared {
    pub(super) fn new(config: ProxyConfig) -> Shared {
        let permits = Arc::new(Semaphore::new(config.limits.max_connections.max(1)));
        Shared {
            config,
            permits,
            open: AtomicUsize::new(0),
            closed: Notify::new(),
            clients: Mutex::new(HashMap::new()),
            pressure: Notify::new(),
        }
    }

    /// One more connection (or, with `lookup`, one more name lookup) for `client`, within its
    /// share; `None` when the client holds its share already.
    pub(super) fn share(&self, client: IpAddr, lookup: bool) -> Option<Share<'_>> {
        let limits = &self.config.limits;
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        let used = clients.entry(client).or_default();
        let (count, limit) = if lookup {
            (&mut used.lookups, limits.max_lookups_per_client.max(1))
        } else {
            (&mut used.connections, limits.max_per_client.max(1))
        };
        if *count >= limit {
            return None;
        }
        *count += 1;
        Some(Share {
            shared: self,
            client,
            lookup,
        })
    }

    /// Whether fewer than a quarter of the slots are free.
    pub(super) fn scarce(&self) -> bool {
        self.permits.available_permits() < self.config.limits.max_connections.max(1) / 4
    }

    pub(super) fn open_connections(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    pub(super) async fn wait_idle(&self, within: Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.closed.notified();
                if self.open_connections() == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(within, wait).await.is_ok()
    }
}

/// Counts a connection as open for as long as its task holds this (sockets are dropped with it).
struct OpenGuard(Arc<Shared>);

impl OpenGuard {
    fn new(shared: &Arc<Shared>) -> OpenGuard {
        shared.open.fetch_add(1, Ordering::AcqRel);
        OpenGuard(Arc::clone(shared))
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.closed.notify_waiters();
    }
}

/// A listener served on a runtime by [`Proxy::spawn`].
#[derive(Debug)]
pub struct ListenerHandle {
    shutdown: Shutdown,
    task: tokio::task::JoinHandle<io::Result<()>>,
}

impl ListenerHandle {
    /// Stops the listener and waits (at most the grace period, then open connections are
    /// dropped) until it has closed every socket it held.
    pub async fn stop(self) -> io::Result<()> {
        self.shutdown.trigger();
        match self.task.await {
            Ok(result) => result,
            Err(e) => Err(io::Error::other(e)),
        }
    }
}

impl Proxy {
    /// Accepts on `listener` until `signal` fires, serving each connection on its own task.
    /// At most `max_connections` are open at once across the proxy. When every slot is taken,
    /// the accept loop holds one accepted connection (no more), wakes idle keep-alive
    /// connections to give up their slots, and waits for one; further clients queue in the
    /// kernel's backlog instead of holding file descriptors here. On shutdown it stops accepting, lets open connections
    /// finish for `shutdown_grace`, then drops them, and returns once all are closed.
    pub async fn serve(
        &self,
        listener: TcpListener,
        identity: Identity,
        mut signal: ShutdownSignal,
    ) -> io::Result<()> {
        let identity = Arc::new(identity);
        let mut tasks = JoinSet::new();
        loop {
            let free = Arc::clone(&self.shared.permits).try_acquire_owned().ok();
            let accepted = tokio::select! {
                () = signal.fired() => break,
                accepted = listener.accept() => accepted,
                // Reap finished connection tasks so the set does not grow with the uptime.
                Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            };
            let (stream, peer) = match accepted {
                Ok(pair) => pair,
                // Per-connection accept errors (ECONNABORTED, EMFILE, …) must not end the
                // listener. EMFILE repeats until some descriptor is closed, so back off briefly
                // instead of spinning on it.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let permit = match free {
                Some(permit) => permit,
                None => {
                    // Every slot is taken and a client is waiting (this one, the only connection
                    // held beyond the limit): idle keep-alive connections give theirs up first —
                    // told again every 100 ms while it waits, so one that went idle after the
                    // first call gives its slot up too.
                    let acquire = Arc::clone(&self.shared.permits).acquire_owned();
                    tokio::pin!(acquire);
                    let permit = loop {
                        self.shared.pressure.notify_waiters();
                        tokio::select! {
                            () = signal.fired() => break None,
                            permit = &mut acquire => break permit.ok(),
                            () = tokio::time::sleep(Duration::from_millis(100)) => {}
                        }
                    };
                    match permit {
                        Some(permit) => permit,
                        None => break,
                    }
                }
            };
            let guard = OpenGuard::new(&self.shared);
            let shared = Arc::clone(&self.shared);
            let identity = Arc::clone(&identity);
            let signal = signal.clone();
            // A slow head may hold a slot for the full head timeout only while slots are plenty.
            let head_timeout = if self.shared.scarce() {
                self.shared.config.limits.scarce_head_timeout
            } else {
                self.shared.config.limits.head_timeout
            };
            tasks.spawn(async move {
                let _permit = permit;
                let _guard = guard;
                let Some(_share) = shared.share(peer.ip(), false) else {
                    connection::over_share(stream, shared.config.limits.max_per_client).await;
                    return;
                };
                connection::serve(&shared, &identity, stream, signal, peer.ip(), head_timeout)
                    .await;
            });
        }
        drop(listener);
        let grace = self.shared.config.limits.shutdown_grace;
        let drain = async { while tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(grace, drain).await.is_err() {
            tasks.shutdown().await;
        }
        Ok(())
    }

    /// Serves a std listener — one created inside a sandbox session's network namespace and
    /// handed to the host — on the runtime behind `runtime`, until the returned handle is stopped
    /// (or dropped: dropping the handle fires its shutdown).
    pub fn spawn(
        &self,
        runtime: &tokio::runtime::Handle,
        listener: std::net::TcpListener,
        identity: Identity,
    ) -> io::Result<ListenerHandle> {
        listener.set_nonblocking(true)?;
        let listener = {
            let _entered = runtime.enter();
            TcpListener::from_std(listener)?
        };
        let (shutdown, signal) = Shutdown::new();
        let proxy = self.clone();
        let task = runtime.spawn(async move { proxy.serve(listener, identity, signal).await });
        Ok(ListenerHandle { shutdown, task })
    }
}
