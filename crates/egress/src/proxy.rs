//! The egress proxy (DESIGN §5): HTTP/1.1 `CONNECT` and absolute-form plain HTTP on listeners
//! whose identity the caller supplies, deciding every target with the pure policy core and
//! writing an audit record per decision and per tunnel close.
//!
//! Why a hand-written head loop on `httparse` rather than hyper's server: the proxy must hand the
//! request target byte for byte to [`crate::Target::parse`] — one parser decides, resolves, dials
//! and audits. hyper runs `http::Uri` over the target first, a second parser whose own `400`s
//! would carry no `X-Cordon-Reason`; it also owns the bytes pipelined after a `CONNECT` head and
//! the body framing, which are exactly the places proxies get smuggled through. Here the loop is
//! short and every framing decision is written down next to the code that makes it.
//!
//! Entry points: [`Proxy::new`] with a [`ProxyConfig`], then [`Proxy::serve`] (one listener, one
//! [`Identity`], until a [`Shutdown`] fires) or [`Proxy::spawn`] (a std listener handed over from
//! a sandbox session, served on a runtime the caller owns).

mod audit;
mod body;
mod coalesce;
mod connect;
mod connection;
mod dial;
mod fuzzing;
pub(crate) mod head;
mod http;
mod listener;
mod reader;
mod reply;
mod splice;
mod tunnel;

use std::sync::Arc;
use std::time::Duration;

pub use audit::{AuditDecision, AuditKind, AuditRecord, AuditSink, JsonLinesSink, NoAudit, Proto};
pub use coalesce::{Coalescer, SESSION_RECORDS, WINDOW};
#[doc(hidden)]
pub use fuzzing::request_head as fuzz_request_head;
pub use listener::{Identity, ListenerHandle, Shutdown, ShutdownSignal};

use crate::{Policy, Resolver};

/// Bounds on what one client may make the proxy hold. Every limit turns a slow or hostile client
/// into a closed connection rather than a held resource.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest request or response head (request line / status line and every header).
    pub max_head_bytes: usize,
    /// Time a client has to send a complete request head once it sent its first byte — and, for
    /// the first request of a connection, from accept. Slowloris ends here.
    pub head_timeout: Duration,
    /// Time a keep-alive connection may wait for its next request, and a tunnel may carry no
    /// byte in either direction, before it is closed.
    pub idle_timeout: Duration,
    /// Time to establish the upstream TCP connection (per address tried) → `upstream_timeout`.
    pub connect_timeout: Duration,
    /// Time an upstream has to send its response head after the request → `upstream_timeout`.
    pub response_timeout: Duration,
    /// Connections served at once per proxy; further clients wait in the listen backlog.
    pub max_connections: usize,
    /// Connections one client (one peer address) may hold at once; past it, its new connections
    /// are answered `429` and closed, so one client cannot take every slot.
    pub max_per_client: usize,
    /// The head timeout of a new connection while fewer than a quarter of the slots are free:
    /// slow heads cannot hold scarce slots for long.
    pub scarce_head_timeout: Duration,
    /// Name lookups one client may have in flight at once (the resolver's own limit is shared).
    pub max_lookups_per_client: usize,
    /// For a CONNECT of a name to this port (443; `None` turns the check off): answer `200`,
    /// read the TLS ClientHello, and dial only when its server name is the CONNECT host (else
    /// `sni_mismatch`).
    pub sni_port: Option<u16>,
    /// How long the ClientHello may take, and the most bytes read of it: 16 KiB.
    pub client_hello_timeout: Duration,
    /// After a shutdown, how long open connections may finish before they are dropped.
    pub shutdown_grace: Duration,
    /// Splice pipe size per direction of a tunnel and per long body (the buffer size when a
    /// pipe cannot be made).
    pub buffer_bytes: usize,
}

impl Limits {
    /// The read-ahead buffer of a connection: room for one whole head, and the copy buffer for
    /// chunked and short bodies (long ones are spliced past it). Kept small because every
    /// connection allocates it at accept.
    pub(crate) fn reader_bytes(&self) -> usize {
        self.max_head_bytes.max(16 * 1024)
    }
}

impl Default for Limits {
    /// 32 KiB heads within 10 s (1 s while slots are scarce), 120 s idle, 10 s connect, 60 s to
    /// a response head, 512 connections of which 128 per client, 16 lookups per client, the SNI
    /// check on (a ClientHello within 5 s), 5 s grace, 256 KiB splice pipes.
    ///
    /// The pipe size comes from the throughput benchmark: 64 KiB (the kernel default) to 1 MiB
    /// pipes, and splice against a user-space copy, moved 1 GiB at the same speed within the
    /// noise on the 2-core machine, while splice used about a third less proxy CPU. 256 KiB moves
    /// four loopback segments per system call and bounds what one tunnel can pin in the kernel
    /// (2 × 256 KiB). Measured against a minimal blocking splice relay with the same pipes
    /// (`bench/splice-floor.py`): 64 KiB pipes were ~15% slower, 1 MiB no faster,
    /// `SPLICE_F_MORE` ~35% slower (it holds back the push of each segment), a fixed 1 MiB
    /// `SO_RCVBUF`/`SO_SNDBUF` no faster than autotuning, `TCP_NODELAY` off slightly slower.
    fn default() -> Limits {
        Limits {
            max_head_bytes: 32 * 1024,
            head_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(60),
            max_connections: 512,
            max_per_client: 128,
            scarce_head_timeout: Duration::from_secs(1),
            max_lookups_per_client: 16,
            sni_port: Some(443),
            client_hello_timeout: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(5),
            buffer_bytes: 256 * 1024,
        }
    }
}

/// What a proxy needs: the policy, the resolver (blocking calls run off the async threads), the
/// audit sink and the limits.
#[derive(Clone)]
pub struct ProxyConfig {
    /// The session's egress policy.
    pub policy: Arc<Policy>,
    /// Answers names; only ever asked about names the policy allowed.
    pub resolver: Arc<dyn Resolver>,
    /// Receives one record per decision and one per tunnel close.
    pub audit: Arc<dyn AuditSink>,
    /// Resource bounds.
    pub limits: Limits,
}

/// A proxy: configuration plus the count of open connections. Cheap to clone; every listener
/// served by clones of one proxy shares its connection limit.
#[derive(Clone)]
pub struct Proxy {
    shared: Arc<listener::Shared>,
}

impl Proxy {
    /// A proxy with this configuration.
    pub fn new(config: ProxyConfig) -> Proxy {
        Proxy {
            shared: Arc::new(listener::Shared::new(config)),
        }
    }

    /// Connections currently open (accepted and not yet closed, tunnels included).
    pub fn open_connections(&self) -> usize {
        self.shared.open_connections()
    }

    /// Waits until no connection is open, or `within` passes; returns whether none is open.
    pub async fn wait_idle(&self, within: Duration) -> bool {
        self.shared.wait_idle(within).await
    }
}
