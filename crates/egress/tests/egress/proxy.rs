//! The proxy, in process: a static resolver, loopback upstreams started by each test, and
//! assertions on the status, on what each upstream received, and on the audit records.
//!
//! Synchronisation is by data, never by sleeping: a client reads the proxy's answer (or an echo
//! from the upstream) before looking at what the upstream or the audit sink saw; timeouts that a
//! test relies on are configured in milliseconds in that test's `Limits`.

mod audit;
mod connect;
mod fairness;
mod handover;
mod http;
mod limits;
mod sni;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_egress::proxy::{
    AuditKind, AuditRecord, AuditSink, Identity, Limits, Proxy, ProxyConfig, Shutdown,
};
use cordon_egress::{Cidr, Pattern, PatternList, Policy, PolicySpec, StaticResolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// Every wait in these tests ends by this bound, so a broken proxy fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(10);

/// Records every audit record and wakes waiters.
#[derive(Default)]
pub struct Records {
    records: Mutex<Vec<(AuditKind, AuditRecord)>>,
    changed: Notify,
}

impl AuditSink for Records {
    fn record(&self, kind: AuditKind, record: &AuditRecord) -> std::io::Result<()> {
        self.records.lock().unwrap().push((kind, record.clone()));
        self.changed.notify_waiters();
        Ok(())
    }
}

impl Records {
    /// Waits until at least `n` records arrived; returns them all.
    pub async fn wait_for(&self, n: usize) -> Vec<(AuditKind, AuditRecord)> {
        let wait = async {
            loop {
                let changed = self.changed.notified();
                {
                    let records = self.records.lock().unwrap();
                    if records.len() >= n {
                        return records.clone();
                    }
                }
                changed.await;
            }
        };
        tokio::time::timeout(PATIENCE, wait)
            .await
            .unwrap_or_else(|_| panic!("fewer than {n} audit records: {:?}", self.all()))
    }

    pub fn all(&self) -> Vec<(AuditKind, AuditRecord)> {
        self.records.lock().unwrap().clone()
    }
}

/// A policy, resolver and limits to start a proxy with.
pub struct Setup {
    spec: PolicySpec,
    resolver: StaticResolver,
    limits: Limits,
    credential: Option<String>,
}

impl Setup {
    pub fn new() -> Setup {
        Setup {
            spec: PolicySpec::default(),
            resolver: StaticResolver::new(),
            limits: Limits::default(),
            credential: None,
        }
    }

    /// The listener takes only requests carrying this `Proxy-Authorization` value.
    pub fn credential(mut self, value: &str) -> Setup {
        self.credential = Some(value.to_owned());
        self
    }

    pub fn allow(mut self, pattern: &str) -> Setup {
        self.spec
            .allow
            .push(Pattern::parse(pattern, PatternList::Allow).unwrap());
        self
    }

    /// `network: open`: every name and port, classification still on.
    pub fn open(mut self) -> Setup {
        self.spec.mode = cordon_egress::Mode::Open;
        self
    }

    pub fn deny(mut self, pattern: &str) -> Setup {
        self.spec
            .deny
            .push(Pattern::parse(pattern, PatternList::Deny).unwrap());
        self
    }

    pub fn operator_deny(mut self, pattern: &str) -> Setup {
        self.spec
            .operator_deny
            .push(Pattern::parse(pattern, PatternList::Deny).unwrap());
        self
    }

    /// Allows exactly the test's own upstream, `ip:127.0.0.1:PORT`, and loopback with it.
    pub fn upstream(self, port: u16) -> Setup {
        self.allow(&format!("ip:127.0.0.1:{port}"))
            .loopback_allowed()
    }

    /// Lets allowed targets reach loopback (every upstream in these tests is on loopback).
    pub fn loopback_allowed(mut self) -> Setup {
        self.spec
            .allow_private
            .push(Cidr::parse("127.0.0.0/8").unwrap());
        self
    }

    pub fn resolve(mut self, flag: &str) -> Setup {
        self.resolver.insert_flag(flag).unwrap();
        self
    }

    pub fn limits(mut self, change: impl FnOnce(&mut Limits)) -> Setup {
        change(&mut self.limits);
        self
    }

    /// Binds a loopback listener and serves it with identity `test` / step `build` / attempt 2.
    pub async fn start(self) -> Running {
        let records = Arc::new(Records::default());
        self.start_auditing(Arc::clone(&records) as Arc<dyn AuditSink>, records)
            .await
    }

    /// As [`Setup::start`], with `audit` as the sink (`records` then stays empty).
    pub async fn start_auditing(self, audit: Arc<dyn AuditSink>, records: Arc<Records>) -> Running {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut spec = self.spec;
        spec.listening.push(address);
        let proxy = Proxy::new(ProxyConfig {
            policy: Arc::new(Policy::new(spec)),
            resolver: Arc::new(self.resolver),
            audit,
            limits: self.limits,
        });
        let (shutdown, signal) = Shutdown::new();
        let identity = Identity {
            listener: "test".to_owned(),
            step: Some("build".to_owned()),
            attempt: Some(2),
            credential: self.credential,
        };
        let serving = proxy.clone();
        let task = tokio::spawn(async move { serving.serve(listener, identity, signal).await });
        Running {
            address,
            proxy,
            records,
            shutdown,
            task,
        }
    }
}

/// A proxy serving one listener.
pub struct Running {
    pub address: SocketAddr,
    pub proxy: Proxy,
    pub records: Arc<Records>,
    pub shutdown: Shutdown,
    pub task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    pub async fn client(&self) -> TcpStream {
        TcpStream::connect(self.address).await.unwrap()
    }
}

/// How a test upstream answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Echo every byte back; at end of stream, close.
    Echo,
    /// Read one HTTP request (head and `Content-Length` body) and answer `200` with a body
    /// naming the upstream; then close.
    Http,
    /// Read the request and never answer.
    Silent,
    /// Answer `200` with [`BULK`] patterned bytes and a `Content-Length`.
    Bulk,
    /// Answer `200` with [`BULK`] patterned bytes and no length: the body ends at close.
    BulkUntilClose,
    /// Answer `200` with a chunked body `abc` (one chunk with an extension, and a trailer).
    Chunked,
}

/// Length of a bulk body: more than the splice threshold and not a multiple of any buffer.
pub const BULK: usize = 3 * 1024 * 1024 + 7;

/// `n` bytes of a pattern that shows any lost, repeated or reordered block.
pub fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// A loopback upstream that records what each connection sent.
pub struct Upstream {
    pub address: SocketAddr,
    received: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Upstream {
    pub async fn start(answer: Answer) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let received: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let log = Arc::clone(&received);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let index = {
                    let mut log = log.lock().unwrap();
                    log.push(Vec::new());
                    log.len() - 1
                };
                let log = Arc::clone(&log);
                tokio::spawn(async move { serve_upstream(stream, answer, index, log).await });
            }
        });
        Upstream { address, received }
    }

    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// Bytes each accepted connection sent, in accept order.
    pub fn received(&self) -> Vec<Vec<u8>> {
        self.received.lock().unwrap().clone()
    }

    pub fn connections(&self) -> usize {
        self.received.lock().unwrap().len()
    }
}

async fn serve_upstream(
    mut stream: TcpStream,
    answer: Answer,
    index: usize,
    log: Arc<Mutex<Vec<Vec<u8>>>>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen = Vec::new();
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        seen.extend_from_slice(&buf[..n]);
        log.lock().unwrap()[index].extend_from_slice(&buf[..n]);
        match answer {
            Answer::Echo => {
                if stream.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
            Answer::Http if request_complete(&seen) => {
                let body = format!("upstream {}", stream.local_addr().unwrap().port());
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Upstream: yes\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                break;
            }
            Answer::Bulk | Answer::BulkUntilClose if request_complete(&seen) => {
                let length = match answer {
                    Answer::Bulk => format!("Content-Length: {BULK}\r\n"),
                    _ => String::new(),
                };
                let head = format!("HTTP/1.1 200 OK\r\n{length}\r\n");
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(&pattern(BULK)).await;
                break;
            }
            Answer::Chunked if request_complete(&seen) => {
                let response = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\n";
                let _ = stream.write_all(response.as_bytes()).await;
                break;
            }
            Answer::Http
            | Answer::Silent
            | Answer::Bulk
            | Answer::BulkUntilClose
            | Answer::Chunked => {}
        }
    }
    let _ = stream.shutdown().await;
}

/// Whether `seen` holds a whole request: a head, then `Content-Length` bytes or a chunked body
/// ending in `0\r\n\r\n`.
fn request_complete(seen: &[u8]) -> bool {
    let Some(end) = find(seen, b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
    let body = &seen[end + 4..];
    if head.contains("transfer-encoding: chunked") {
        return body.ends_with(b"0\r\n\r\n");
    }
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .map_or(0, |n| n.trim().parse::<usize>().unwrap());
    body.len() >= length
}

pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A response as the client saw it.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }

    pub fn reason(&self) -> Option<String> {
        self.header("x-cordon-reason")
    }
}

/// Reads one response: the head, then a `Content-Length` body (none for `200` to CONNECT).
pub async fn read_response(stream: &mut TcpStream) -> Response {
    tokio::time::timeout(PATIENCE, read_response_now(stream))
        .await
        .expect("a response within the test's patience")
}

async fn read_response_now(stream: &mut TcpStream) -> Response {
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    // Byte by byte, so nothing after the head (tunnel data) is consumed here.
    while find(&seen, b"\r\n\r\n").is_none() {
        let n = stream.read(&mut byte).await.unwrap();
        assert_ne!(
            n,
            0,
            "connection closed mid-head: {:?}",
            String::from_utf8_lossy(&seen)
        );
        seen.push(byte[0]);
    }
    let head = String::from_utf8(seen).unwrap();
    let status = head[9..12].parse().unwrap();
    let mut response = Response {
        status,
        head,
        body: Vec::new(),
    };
    if let Some(length) = response.header("content-length") {
        let mut body = vec![0u8; length.parse().unwrap()];
        stream.read_exact(&mut body).await.unwrap();
        response.body = body;
    }
    response
}

/// Sends `request` on a fresh connection and reads one response.
pub async fn exchange(running: &Running, request: &str) -> (TcpStream, Response) {
    let mut client = running.client().await;
    client.write_all(request.as_bytes()).await.unwrap();
    let response = read_response(&mut client).await;
    (client, response)
}

/// Reads until the proxy closes the connection; returns what arrived.
pub async fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut rest = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut rest))
        .await
        .expect("the proxy closes the connection")
        .unwrap_or_default();
    rest
}

/// The one decision record of a refused request.
pub fn only_decision(records: &[(AuditKind, AuditRecord)]) -> &AuditRecord {
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].0, AuditKind::Decision);
    &records[0].1
}
