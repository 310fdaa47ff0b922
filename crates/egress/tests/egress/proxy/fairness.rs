//! Fair slots under abuse: one client cannot take every slot, slow heads cannot hold scarce
//! slots, idle keep-alive connections give theirs up when someone waits, and one client's hung
//! name lookups cannot fail another client's. Each judged by whether a fresh client (from another
//! loopback address) is served, with a control showing the abuse is in place.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_egress::proxy::{Identity, Limits, Proxy, ProxyConfig, Shutdown};
use cordon_egress::{HostName, Pattern, PatternList, Policy, PolicySpec, ResolveError, Resolver};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use super::{Answer, PATIENCE, Running, Setup, Upstream, exchange, read_response};

/// A connection to `running` from the loopback address `from` (another client).
async fn client_from(running: &Running, from: &str) -> TcpStream {
    connect_from(running.address, from).await
}

async fn connect_from(address: SocketAddr, from: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(from.parse::<IpAddr>().unwrap(), 0))
        .unwrap();
    socket.connect(address).await.unwrap()
}

/// Sends a refused absolute-form request on `stream` and returns the status of the answer.
async fn ask(stream: &mut TcpStream) -> u16 {
    stream
        .write_all(b"GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n")
        .await
        .unwrap();
    tokio::time::timeout(PATIENCE, read_response(stream))
        .await
        .expect("answered in time")
        .status
}

#[tokio::test]
async fn one_client_cannot_take_every_slot() {
    let running = Setup::new()
        .limits(|l| {
            l.max_connections = 40;
            l.max_per_client = 10;
        })
        .start()
        .await;
    // Client A holds its share with connections that never finish a head.
    let mut held = Vec::new();
    for _ in 0..10 {
        let mut stream = client_from(&running, "127.0.0.1").await;
        stream
            .write_all(b"GET http://a.test/ HTTP/1.1\r\n")
            .await
            .unwrap();
        held.push(stream);
    }
    // Its next connection is turned away at once.
    let mut over = client_from(&running, "127.0.0.1").await;
    let response = tokio::time::timeout(PATIENCE, read_response(&mut over))
        .await
        .expect("answered");
    assert_eq!(response.status, 429);
    // Another client is served while A holds its share.
    let mut other = client_from(&running, "127.0.0.2").await;
    assert_eq!(ask(&mut other).await, 403);
    // Nothing leaks: once the clients are gone, every connection (and its descriptors) is.
    drop((held, over, other));
    assert!(
        running.proxy.wait_idle(PATIENCE).await,
        "connections left open"
    );
}

#[tokio::test]
async fn slow_heads_cannot_hold_scarce_slots() {
    let running = Setup::new()
        .limits(|l| {
            l.max_connections = 8;
            l.max_per_client = 8;
            // The normal head timeout would keep the slots for the whole test.
            l.head_timeout = Duration::from_secs(600);
            l.scarce_head_timeout = Duration::from_millis(200);
        })
        .start()
        .await;
    // The first six slow heads get the normal (long) timeout; once fewer than a quarter of the
    // slots are free, the next ones get the short one and are cut, and a fresh client gets a slot.
    let mut slow = Vec::new();
    for _ in 0..8 {
        let mut stream = client_from(&running, "127.0.0.1").await;
        stream
            .write_all(b"GET http://a.test/ HTTP/1.1\r\nX-Slow:")
            .await
            .unwrap();
        slow.push(stream);
    }
    let mut fresh = client_from(&running, "127.0.0.2").await;
    assert_eq!(
        ask(&mut fresh).await,
        403,
        "served although 8 slow heads came first"
    );
    // The slow heads accepted while slots were scarce were cut with 408.
    for stream in &mut slow[6..] {
        let response = tokio::time::timeout(PATIENCE, read_response(stream))
            .await
            .expect("answered");
        assert_eq!(response.status, 408);
    }
    drop((slow, fresh));
    assert!(
        running.proxy.wait_idle(PATIENCE).await,
        "connections left open"
    );
}

#[tokio::test]
async fn idle_keep_alive_connections_give_up_their_slots_first() {
    let upstream = Upstream::start(Answer::Http).await;
    let port = upstream.port();
    let running = Setup::new()
        .upstream(port)
        .limits(|l| {
            l.max_connections = 4;
            l.max_per_client = 4;
            l.idle_timeout = Duration::from_secs(600);
        })
        .start()
        .await;
    // Four kept-alive connections, each idle after one answered request.
    let mut idle = Vec::new();
    for _ in 0..4 {
        let (stream, response) = exchange(
            &running,
            &format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n"),
        )
        .await;
        assert_eq!(response.status, 200, "control: the request was served");
        idle.push(stream);
    }
    assert_eq!(
        running.proxy.open_connections(),
        4,
        "every slot is held by an idle client"
    );
    let mut fresh = client_from(&running, "127.0.0.2").await;
    assert_eq!(
        ask(&mut fresh).await,
        403,
        "served while four idle connections held the slots"
    );
}

#[tokio::test]
async fn kept_alive_connections_trickling_their_next_heads_cannot_hold_scarce_slots() {
    let upstream = Upstream::start(Answer::Http).await;
    let port = upstream.port();
    let running = Setup::new()
        .upstream(port)
        .limits(|l| {
            l.max_connections = 4;
            l.max_per_client = 4;
            l.idle_timeout = Duration::from_secs(600);
            l.head_timeout = Duration::from_secs(600);
            l.scarce_head_timeout = Duration::from_millis(200);
        })
        .start()
        .await;
    // Four kept-alive connections, each answered once, then sending one byte of its next head
    // (no longer idle, so pressure alone would not reclaim them) and nothing more.
    let mut trickling = Vec::new();
    for _ in 0..4 {
        let (mut stream, response) = exchange(
            &running,
            &format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n"),
        )
        .await;
        assert_eq!(response.status, 200, "control: the request was served");
        stream.write_all(b"G").await.unwrap();
        trickling.push(stream);
    }
    assert_eq!(running.proxy.open_connections(), 4, "every slot is held");
    let mut fresh = client_from(&running, "127.0.0.2").await;
    assert_eq!(
        ask(&mut fresh).await,
        403,
        "served while four trickling heads held the slots"
    );
}

/// Blocks every lookup of a name starting with `hang` until released; answers others at once.
struct Hanging {
    released: Arc<Mutex<bool>>,
}

impl Resolver for Hanging {
    fn resolve(&self, name: &HostName) -> Result<Vec<IpAddr>, ResolveError> {
        if name.as_str().starts_with("hang") {
            for _ in 0..200 {
                if *self.released.lock().unwrap() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(vec!["192.0.2.1".parse().unwrap()])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clients_hung_lookups_cannot_fail_another_clients() {
    let released = Arc::new(Mutex::new(false));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let spec = PolicySpec {
        allow: vec![Pattern::parse("*.cordon.test:*", PatternList::Allow).unwrap()],
        listening: vec![address],
        ..PolicySpec::default()
    };
    let limits = Limits {
        max_lookups_per_client: 4,
        connect_timeout: Duration::from_millis(300),
        // These tunnels are about lookups: no ClientHello is sent.
        sni_port: None,
        ..Limits::default()
    };
    let proxy = Proxy::new(ProxyConfig {
        policy: Arc::new(Policy::new(spec)),
        resolver: Arc::new(Hanging {
            released: Arc::clone(&released),
        }),
        audit: Arc::new(cordon_egress::proxy::NoAudit),
        limits,
    });
    let (_shutdown, signal): (Shutdown, _) = Shutdown::new();
    let serving = proxy.clone();
    tokio::spawn(async move { serving.serve(listener, Identity::default(), signal).await });
    // Client A: four lookups that hang, and a fifth.
    let mut hung = Vec::new();
    for i in 0..4 {
        let mut stream = connect_from(address, "127.0.0.1").await;
        let request = format!("CONNECT hang{i}.cordon.test:443 HTTP/1.1\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        hung.push(stream);
    }
    // Wait (bounded) until the four are in the resolver: A's fifth is refused at once.
    let mut refused = false;
    for _ in 0..100 {
        let mut fifth = connect_from(address, "127.0.0.1").await;
        fifth
            .write_all(b"CONNECT hang9.cordon.test:443 HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let response =
            tokio::time::timeout(Duration::from_secs(1), read_response(&mut fifth)).await;
        if let Ok(response) = response {
            assert_eq!(response.reason().as_deref(), Some("resolve_failed"));
            refused = true;
            break;
        }
    }
    assert!(refused, "the client's share of lookups was never reached");
    // Client B resolves while A's lookups hang (its dial then fails: nothing listens there).
    let mut other = connect_from(address, "127.0.0.2").await;
    other
        .write_all(b"CONNECT quick.cordon.test:443 HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let response = tokio::time::timeout(PATIENCE, read_response(&mut other))
        .await
        .expect("answered");
    assert_ne!(response.reason().as_deref(), Some("resolve_failed"));
    *released.lock().unwrap() = true;
}

/// Live TCP connections to or from `port` on loopback (listeners and TIME_WAIT left out): the
/// proxy's sockets and its clients', whatever other tests in this process hold.
fn live_connections(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port_of = |address: &str| {
                address
                    .rsplit(':')
                    .next()
                    .and_then(|hex| u16::from_str_radix(hex, 16).ok())
            };
            fields.len() > 3
                && !matches!(fields[3], "06" | "07" | "0A")
                && (port_of(fields[1]) == Some(port) || port_of(fields[2]) == Some(port))
        })
        .count()
}

#[tokio::test]
async fn under_the_default_limits_a_fresh_client_is_served_while_one_holds_its_share_and_600_heads_crawl()
 {
    // Each connection costs this process two descriptors (client and proxy side).
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let soft: usize = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        soft >= 2_000,
        "this test opens ~1,500 descriptors; raise `ulimit -n` (now {soft}) to at least 2000"
    );
    let running = Setup::new().start().await;
    let port = running.address.port();
    // Client A holds its whole share (128) with heads it never finishes.
    let mut held = Vec::new();
    for _ in 0..Limits::default().max_per_client {
        let mut stream = client_from(&running, "127.0.0.1").await;
        stream
            .write_all(b"GET http://a.test/ HTTP/1.1\r\n")
            .await
            .unwrap();
        held.push(stream);
    }
    // 600 slow heads from eight other clients, past the 512 slots in all.
    let mut crawling = Vec::new();
    for i in 0..600 {
        let mut stream = client_from(&running, &format!("127.0.0.{}", 3 + i % 8)).await;
        let _ = stream
            .write_all(b"GET http://b.test/ HTTP/1.1\r\nX-Slow:")
            .await;
        crawling.push(stream);
    }
    // A fresh client is answered long before the normal 10 s head timeout would free a slot:
    // the slots went scarce, so the heads that came late got the 1 s deadline.
    let started = std::time::Instant::now();
    let mut fresh = client_from(&running, "127.0.0.2").await;
    let status = tokio::time::timeout(Duration::from_secs(5), ask(&mut fresh))
        .await
        .expect("the fresh client was not served while the slots were held");
    assert_eq!(status, 403);
    eprintln!("fresh client served after {:?}", started.elapsed());
    // Control: A's share is really held — its next connection is turned away.
    let mut over = client_from(&running, "127.0.0.1").await;
    let response = tokio::time::timeout(PATIENCE, read_response(&mut over))
        .await
        .expect("answered");
    assert_eq!(response.status, 429);
    // Nothing leaks: with the clients gone, every connection (and its descriptors) is.
    let open = live_connections(port);
    assert!(open > 1_000, "control: {open} live connections while held");
    drop((held, crawling, fresh, over));
    assert!(
        running.proxy.wait_idle(PATIENCE).await,
        "connections left open"
    );
    let mut left = live_connections(port);
    for _ in 0..100 {
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = live_connections(port);
    }
    assert_eq!(left, 0, "connections of the proxy's port still open");
}
