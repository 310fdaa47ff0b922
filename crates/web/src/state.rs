//! `AppState`: what every handler shares — the read-only store connection, the token, the
//! Host values this server answers to, and where run graphs come from.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_protocol::RunId;

use cordon_store::{EventFilter, Reader, RunRow, StateDir};

use crate::{Graph, RunView, Token, WebError};

/// Supplies the declared graph of a run (the cli reads the pipeline from the run's tooling
/// snapshot). Without one, or when it returns `None`, the page derives the graph from the
/// events.
pub trait GraphSource: Send + Sync {
    fn graph(&self, run: &RunRow, store: &Reader) -> Option<Graph>;
}

/// No declared graphs: every graph is derived from events.
pub struct DerivedGraphs;

impl GraphSource for DerivedGraphs {
    fn graph(&self, _run: &RunRow, _store: &Reader) -> Option<Graph> {
        None
    }
}

/// How often a live stream looks for new events when there were none.
const DEFAULT_POLL: Duration = Duration::from_millis(200);

/// The shared state behind [`crate::app`]. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    reader: Arc<Mutex<Reader>>,
    pub(crate) token: Token,
    pub(crate) hosts: Arc<Vec<String>>,
    pub(crate) port: u16,
    graphs: Arc<dyn GraphSource>,
    pub(crate) poll: Duration,
    /// Set when the serving process is about to exit (`cordon run` at the end of its run):
    /// streams deliver what is left, say `end`, and close.
    closing: Arc<AtomicBool>,
    /// Streams currently open.
    streams: Arc<AtomicUsize>,
    /// The latest answer to "is this run held?" per run, shared by all streams.
    held: Arc<Mutex<HashMap<RunId, (Instant, bool)>>>,
}

/// How long a "held" answer is reused. Probing takes the run's lock for an instant, and a
/// `cordon run --resume` that tries to take it in that instant would be told the run is held;
/// sharing one probe among all streams keeps that window to a few per second at most.
const HELD_FRESH: Duration = Duration::from_millis(500);

/// Counts an open stream for as long as it lives.
pub(crate) struct StreamGuard(Arc<AtomicUsize>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl AppState {
    /// State for a server reachable at `addr` (its port decides the accepted Host headers:
    /// `127.0.0.1:PORT`, `localhost:PORT`, `[::1]:PORT` and the bound address itself). The state
    /// directory's database must exist ([`cordon_store::Store::open`] creates it).
    pub fn new(dir: &StateDir, token: Token, addr: SocketAddr) -> Result<AppState, WebError> {
        let reader = Reader::open(dir)?;
        let port = addr.port();
        // The bound address as the printed URL spells it, plus the usual loopback names.
        let mut hosts = vec![
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
        ];
        let own = match addr {
            SocketAddr::V4(v4) => format!("{}:{port}", v4.ip()),
            SocketAddr::V6(v6) => format!("[{}]:{port}", v6.ip()),
        };
        if !hosts.contains(&own) {
            hosts.push(own);
        }
        Ok(AppState {
            reader: Arc::new(Mutex::new(reader)),
            token,
            hosts: Arc::new(hosts),
            port,
            graphs: Arc::new(DerivedGraphs),
            poll: DEFAULT_POLL,
            closing: Arc::new(AtomicBool::new(false)),
            streams: Arc::new(AtomicUsize::new(0)),
            held: Arc::new(Mutex::new(HashMap::new())),
        })
    }

    pub fn with_graphs(mut self, graphs: impl GraphSource + 'static) -> AppState {
        self.graphs = Arc::new(graphs);
        self
    }

    pub fn with_poll_interval(mut self, poll: Duration) -> AppState {
        self.poll = poll;
        self
    }

    /// Whether `run` is held, probed at most every [`HELD_FRESH`] (for the streams' polls).
    pub(crate) fn held_recently(&self, reader: &Reader, run: RunId) -> bool {
        let mut cache = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match cache.get(&run) {
            Some((at, held)) if at.elapsed() < HELD_FRESH => *held,
            _ => {
                let held = reader.is_held(run);
                cache.insert(run, (Instant::now(), held));
                held
            }
        }
    }

    /// Tells open streams the server is going away: each sends what is left and `end`.
    pub fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// How many event streams are open.
    pub fn open_streams(&self) -> usize {
        self.streams.load(Ordering::SeqCst)
    }

    pub(crate) fn stream_guard(&self) -> StreamGuard {
        self.streams.fetch_add(1, Ordering::SeqCst);
        StreamGuard(Arc::clone(&self.streams))
    }

    pub fn token(&self) -> &Token {
        &self.token
    }

    /// The name of this server's cookie; it carries the port because browsers share cookies
    /// between ports of one host, and two servers must not overwrite each other's.
    pub(crate) fn cookie_name(&self) -> String {
        format!("cordon_token_{}", self.port)
    }

    /// Runs `f` on the store connection off the async workers (SQLite calls block).
    pub(crate) async fn read<T, F>(&self, f: F) -> Result<T, WebError>
    where
        T: Send + 'static,
        F: FnOnce(&Reader) -> Result<T, WebError> + Send + 'static,
    {
        let reader = Arc::clone(&self.reader);
        tokio::task::spawn_blocking(move || {
            // A panic while reading cannot leave the connection half-updated (it only reads),
            // so a poisoned lock is still usable.
            let guard = reader
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            f(&guard)
        })
        .await
        .map_err(|_| WebError::Cancelled)?
    }

    /// The run a path segment names (a full id or a unique prefix) with its row.
    pub(crate) async fn resolve(&self, text: String) -> Result<RunRow, WebError> {
        self.read(move |r| {
            let id = r.find_run(&text)?;
            r.run(id)?
                .ok_or_else(|| WebError::NotFound(format!("/runs/{text}")))
        })
        .await
    }

    /// The full view of a run: its graph, every event folded, whether it is held.
    pub(crate) async fn view(&self, row: RunRow) -> Result<RunView, WebError> {
        let graphs = Arc::clone(&self.graphs);
        self.read(move |r| {
            let mut view = RunView::new(row.id, &row.pipeline, graphs.graph(&row, r));
            for record in r.events(row.id, &EventFilter::default())? {
                view.apply(&record);
            }
            view.set_held(r.is_held(row.id));
            Ok(view)
        })
        .await
    }

    /// A light view of every run (only run-level events are folded), oldest first.
    pub(crate) async fn summaries(&self) -> Result<Vec<RunView>, WebError> {
        self.read(|r| {
            let filter = EventFilter {
                types: vec!["run".to_owned(), "attempt".to_owned()],
                ..EventFilter::default()
            };
            let mut out = Vec::new();
            for row in r.runs()? {
                let mut view = RunView::new(row.id, &row.pipeline, None);
                for record in r.events(row.id, &filter)? {
                    view.apply(&record);
                }
                view.set_held(r.is_held(row.id));
                out.push(view);
            }
            Ok(out)
        })
        .await
    }
}
