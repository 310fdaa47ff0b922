//! The model lane, in process, against a loopback upstream that echoes what it received: the real
//! key never comes back to the client (headers, whole and streamed bodies), method and URL
//! overrides never reach the upstream, the lane frames requests by the proxy's rules, and idle
//! clients cannot keep real calls out. Judged by what the upstream received and what the client
//! read, each with a control.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_egress::lane::{Lane, LaneAuth, LaneCall, LaneConfig, LaneSink};

const KEY: &str = "sk-lane-real-0123456789abcdef";

struct NoSink;

impl LaneSink for NoSink {
    fn request(&self, _model: &str) {}
    fn response(&self, _call: &LaneCall) {}
}

/// An upstream that answers every request by echoing its head: in a response header, and in the
/// body, whole (`Content-Length`) or streamed in small pieces (close-delimited) for
/// `/v1/responses`.
fn echo_upstream() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap_or(0))
                    })
                    .unwrap_or(0);
                let mut body = vec![0; length];
                let _ = stream.read_exact(&mut body);
                log.lock().unwrap().push(head.clone());
                let auth = head
                    .lines()
                    .find(|l| l.to_ascii_lowercase().starts_with("authorization:"))
                    .unwrap_or("")
                    .to_owned();
                if head.to_ascii_lowercase().contains("x-compress: yes") {
                    // Compressed although asked for identity (the bytes need not be gzip).
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{head}",
                        head.len()
                    );
                } else if head.starts_with("POST /v1/responses") {
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nX-Echo: {auth}\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                    );
                    // The echoed head in pieces of 7 bytes: the key crosses piece boundaries.
                    for piece in head.as_bytes().chunks(7) {
                        let _ = stream.write_all(piece);
                        let _ = stream.flush();
                    }
                } else {
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nX-Echo: {auth}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{head}",
                        head.len()
                    );
                }
            });
        }
    });
    (url, seen)
}

struct Served {
    address: String,
    _runtime: tokio::runtime::Runtime,
    _handle: cordon_egress::lane::LaneHandle,
}

fn serve(url: &str) -> Served {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let lane =
        Lane::new(LaneConfig::new(url, LaneAuth::Bearer(KEY.to_owned()), "m")).expect("lane");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("addr").to_string();
    let handle = lane
        .spawn(runtime.handle(), listener, Arc::new(NoSink))
        .expect("spawn");
    Served {
        address,
        _runtime: runtime,
        _handle: handle,
    }
}

/// One raw request; the whole answer.
fn call(address: &str, request: &str) -> String {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    stream.write_all(request.as_bytes()).expect("send");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

fn post(path: &str, extra: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer cordon-lane-dummy\r\n{extra}Content-Length: 2\r\n\r\n{{}}"
    )
}

#[test]
fn an_upstream_echoing_the_request_never_hands_the_real_key_back() {
    let (url, seen) = echo_upstream();
    let lane = serve(&url);
    for path in ["/v1/chat/completions", "/v1/responses"] {
        let answer = call(&lane.address, &post(path, ""));
        assert!(answer.starts_with("HTTP/1.1 200"), "{path}: {answer}");
        assert!(!answer.contains(KEY), "{path}: the key came back: {answer}");
        let masked = "*".repeat(KEY.len());
        assert!(
            answer.contains(&format!("X-Echo: Authorization: Bearer {masked}"))
                || answer
                    .to_ascii_lowercase()
                    .contains(&format!("x-echo: authorization: bearer {masked}")),
            "{path}: the echoed header is masked: {answer}"
        );
        assert!(
            answer.contains(&format!("Bearer {masked}")),
            "{path}: {answer}"
        );
    }
    // Control: the upstream did receive the real key.
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|h| h.contains(&format!("Bearer {KEY}"))));
}

#[test]
fn a_compressed_answer_is_refused_since_its_key_could_not_be_masked() {
    let (url, _seen) = echo_upstream();
    let lane = serve(&url);
    let answer = call(
        &lane.address,
        &post("/v1/chat/completions", "X-Compress: yes\r\n"),
    );
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert!(answer.contains("Content-Encoding: gzip"), "{answer}");
    assert!(!answer.contains(KEY), "{answer}");
    // Control: the same call answered uncompressed passes.
    assert!(call(&lane.address, &post("/v1/chat/completions", "")).starts_with("HTTP/1.1 200"));
}

#[test]
fn method_and_url_overrides_never_reach_the_upstream() {
    let (url, seen) = echo_upstream();
    let lane = serve(&url);
    let overrides = "X-HTTP-Method-Override: DELETE\r\nX-Original-URL: /v1/files\r\nX-Rewrite-URL: /v1/files\r\nX-Method-Override: GET\r\nx_original_url: /v1/files\r\nX-Forwarded-Uri: /v1/files\r\nX-Kept: yes\r\n";
    let answer = call(&lane.address, &post("/v1/chat/completions", overrides));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let seen = seen.lock().unwrap().clone();
    let head = seen[0].to_ascii_lowercase();
    for name in [
        "x-http-method-override",
        "x-original-url",
        "x-rewrite-url",
        "x-method-override",
        "x_original_url",
        "x-forwarded-uri",
    ] {
        assert!(!head.contains(name), "{name} was forwarded: {head}");
    }
    // Control: an ordinary header is forwarded.
    assert!(head.contains("x-kept: yes"), "{head}");
}

#[test]
fn the_lane_frames_requests_by_the_proxys_rules() {
    let (url, seen) = echo_upstream();
    let lane = serve(&url);
    for (length, what) in [
        ("+2", "a signed length"),
        ("2, 2", "a list"),
        ("0x2", "hex"),
    ] {
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n{{}}"
        );
        let answer = call(&lane.address, &request);
        assert!(answer.starts_with("HTTP/1.1 400"), "{what}: {answer}");
    }
    let chunked = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
    assert!(call(&lane.address, chunked).starts_with("HTTP/1.1 411"));
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing malformed was forwarded"
    );
    // Control: a plain length is forwarded.
    assert!(call(&lane.address, &post("/v1/chat/completions", "")).starts_with("HTTP/1.1 200"));
}

#[test]
fn idle_clients_cannot_keep_a_real_call_out() {
    let (url, _seen) = echo_upstream();
    let lane = serve(&url);
    // More idle connections than a listener has reading places and call slots together.
    let idle: Vec<TcpStream> = (0..60)
        .map(|_| TcpStream::connect(&lane.address).expect("connect"))
        .collect();
    // Served while every idle client is still connected (the call's own read gives up at 20 s;
    // without reclaiming, it would wait for the idle ones' 60 s request timeout).
    let answer = call(&lane.address, &post("/v1/chat/completions", ""));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // The oldest idle connections were closed to make room.
    let mut first = &idle[0];
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut byte = [0u8; 1];
    assert_eq!(first.read(&mut byte).expect("closed, not timed out"), 0);
}
