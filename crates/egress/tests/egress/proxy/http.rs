//! Absolute-form HTTP: origin-form rewriting, `Host` and hop-by-hop fields, a decision per
//! request on a keep-alive connection, bodies, and upstream failures.

use cordon_egress::proxy::{AuditDecision, AuditKind, Proto};
use tokio::io::AsyncWriteExt;

use super::{
    Answer, BULK, Running, Setup, Upstream, exchange, find, only_decision, pattern, read_response,
    read_to_close,
};

async fn allowed(upstream: &Upstream) -> Running {
    Setup::new()
        .allow(&format!("allowed.test:{}", upstream.port()))
        .resolve("allowed.test=127.0.0.1")
        .resolve("denied.test=127.0.0.1")
        .loopback_allowed()
        .start()
        .await
}

/// The head the upstream received on connection `index`.
fn upstream_head(upstream: &Upstream, index: usize) -> String {
    let received = &upstream.received()[index];
    let end = find(received, b"\r\n\r\n").expect("a whole head") + 4;
    String::from_utf8(received[..end].to_vec()).unwrap()
}

#[tokio::test]
async fn proxy_forwards_an_allowed_request_in_origin_form_with_the_checked_host() {
    let upstream = Upstream::start(Answer::Http).await;
    let port = upstream.port();
    let running = allowed(&upstream).await;
    let request = format!(
        "GET http://ALLOWED.test:{port}/path?q=1 HTTP/1.1\r\n\
         Host: evil.test\r\n\
         Proxy-Authorization: Basic c2VjcmV0\r\n\
         Proxy-Connection: keep-alive\r\n\
         Connection: keep-alive, X-Hop\r\n\
         X-Hop: hop\r\n\
         Keep-Alive: timeout=5\r\n\
         TE: trailers\r\n\
         Trailer: X-Sum\r\n\
         Upgrade: websocket\r\n\
         X-End-To-End: kept\r\n\r\n"
    );
    let (_client, response) = exchange(&running, &request).await;
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.body, format!("upstream {port}").as_bytes());
    assert_eq!(response.header("x-upstream").as_deref(), Some("yes"));
    // The upstream's own hop-by-hop fields do not reach the client either.
    assert_eq!(response.header("keep-alive"), None);
    assert_eq!(
        upstream_head(&upstream, 0),
        format!(
            "GET /path?q=1 HTTP/1.1\r\nHost: allowed.test:{port}\r\nX-End-To-End: kept\r\nConnection: close\r\n\r\n"
        )
    );
    let records = running.records.wait_for(2).await;
    assert_eq!(records[0].0, AuditKind::Decision);
    assert_eq!(records[0].1.proto, Proto::Http);
    assert_eq!(records[0].1.decision, AuditDecision::Allow);
    assert_eq!(records[0].1.host.as_deref(), Some("allowed.test"));
    assert_eq!(records[1].0, AuditKind::Close);
    assert_eq!(records[1].1.bytes_down, response.body.len() as u64);
}

#[tokio::test]
async fn a_host_header_naming_another_host_changes_nothing() {
    let upstream = Upstream::start(Answer::Http).await;
    let port = upstream.port();
    let running = allowed(&upstream).await;
    // Denied URI, allowed Host: refused.
    let request =
        format!("GET http://denied.test:{port}/ HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n");
    let (_client, response) = exchange(&running, &request).await;
    assert_eq!(response.reason().as_deref(), Some("not_allowed"));
    assert_eq!(upstream.connections(), 0);
    let record = only_decision(&running.records.wait_for(1).await).clone();
    assert_eq!(record.host.as_deref(), Some("denied.test"));
}

#[tokio::test]
async fn each_request_on_a_keep_alive_connection_is_decided_on_its_own() {
    let upstream = Upstream::start(Answer::Http).await;
    let port = upstream.port();
    let running = allowed(&upstream).await;
    let mut client = running.client().await;
    let get = |host: &str| format!("GET http://{host}:{port}/ HTTP/1.1\r\nHost: {host}\r\n\r\n");
    for (host, status) in [
        ("allowed.test", 200),
        ("denied.test", 403),
        ("allowed.test", 200),
    ] {
        client.write_all(get(host).as_bytes()).await.unwrap();
        let response = read_response(&mut client).await;
        assert_eq!(response.status, status, "{host}: {response:?}");
        assert_eq!(
            response.header("connection"),
            None,
            "{host} keeps the connection"
        );
    }
    // Two allowed requests, two upstream connections: none is reused.
    assert_eq!(upstream.connections(), 2);
    let records = running.records.wait_for(5).await;
    let decisions: Vec<_> = records
        .iter()
        .filter(|(k, _)| *k == AuditKind::Decision)
        .map(|(_, r)| (r.host.clone().unwrap(), r.reason))
        .collect();
    assert_eq!(
        decisions,
        [
            ("allowed.test".to_owned(), None),
            ("denied.test".to_owned(), Some("not_allowed")),
            ("allowed.test".to_owned(), None)
        ]
    );
}

#[tokio::test]
async fn proxy_refuses_origin_form_and_bad_absolute_targets() {
    let upstream = Upstream::start(Answer::Http).await;
    let port = upstream.port();
    let running = allowed(&upstream).await;
    for target in [
        "/".to_owned(),
        "/index.html".to_owned(),
        "*".to_owned(),
        format!("http://user@allowed.test:{port}/"),
        format!("http://allowed.test@denied.test:{port}/"),
        format!("https://allowed.test:{port}/"),
        format!("http://[allowed.test]:{port}/"),
        format!("http://0x7f000001:{port}/"),
    ] {
        let request = format!("GET {target} HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n");
        let (_client, response) = exchange(&running, &request).await;
        assert_eq!(
            (response.status, response.reason().as_deref()),
            (400, Some("bad_target")),
            "{target}"
        );
    }
    assert_eq!(upstream.connections(), 0);
    let records = running.records.wait_for(8).await;
    assert!(records.iter().all(|(_, r)| r.reason == Some("bad_target")));
}

#[tokio::test]
async fn a_chunked_request_body_is_reencoded_without_extensions_or_trailers() {
    let upstream = Upstream::start(Answer::Http).await;
    let port = upstream.port();
    let running = allowed(&upstream).await;
    let request = format!(
        "POST http://allowed.test:{port}/upload HTTP/1.1\r\nHost: allowed.test\r\n\
         Transfer-Encoding: chunked\r\n\r\n\
         5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 1\r\n\r\n"
    );
    let (_client, response) = exchange(&running, &request).await;
    assert_eq!(response.status, 200);
    let received = String::from_utf8(upstream.received()[0].clone()).unwrap();
    let (head, body) = received.split_once("\r\n\r\n").unwrap();
    assert!(head.contains("\r\nTransfer-Encoding: chunked"), "{head}");
    assert_eq!(body, "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    let records = running.records.wait_for(2).await;
    assert_eq!(records[1].1.bytes_up, 11);
}

#[tokio::test]
async fn a_content_length_body_is_forwarded_exactly() {
    let upstream = Upstream::start(Answer::Http).await;
    let port = upstream.port();
    let running = allowed(&upstream).await;
    let request =
        format!("PUT http://allowed.test:{port}/x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
    let (_client, response) = exchange(&running, &request).await;
    assert_eq!(response.status, 200);
    let received = String::from_utf8(upstream.received()[0].clone()).unwrap();
    assert!(
        received.ends_with("Content-Length: 5\r\nConnection: close\r\n\r\nhello"),
        "{received}"
    );
}

#[tokio::test]
async fn ambiguous_request_framing_is_refused_before_any_upstream_sees_it() {
    let upstream = Upstream::start(Answer::Http).await;
    let port = upstream.port();
    let running = allowed(&upstream).await;
    for framing in [
        "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
        "Content-Length: 5\r\nContent-Length: 5\r\n",
        "Content-Length: +5\r\n",
        "Transfer-Encoding: gzip, chunked\r\n",
        "Transfer-Encoding: chunked, identity\r\n",
    ] {
        let request =
            format!("POST http://allowed.test:{port}/ HTTP/1.1\r\n{framing}\r\n0\r\n\r\n");
        let (mut client, response) = exchange(&running, &request).await;
        assert_eq!(
            (response.status, response.reason().as_deref()),
            (400, Some("bad_target")),
            "{framing}"
        );
        read_to_close(&mut client).await;
    }
    assert_eq!(upstream.connections(), 0);
}

#[tokio::test]
async fn a_silent_upstream_gets_504_upstream_timeout() {
    let upstream = Upstream::start(Answer::Silent).await;
    let port = upstream.port();
    let running = Setup::new()
        .upstream(port)
        .limits(|l| l.response_timeout = std::time::Duration::from_millis(100))
        .start()
        .await;
    let request = format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n");
    let (_client, response) = exchange(&running, &request).await;
    assert_eq!(
        (response.status, response.reason().as_deref()),
        (504, Some("upstream_timeout"))
    );
    let records = running.records.wait_for(2).await;
    assert_eq!(records[1].1.reason, Some("upstream_timeout"));
}

#[tokio::test]
async fn an_upstream_refusing_connections_gets_502_connect_failed() {
    // A port that was just free: bind, note it, close.
    let closed = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap().port()
    };
    let running = Setup::new()
        .allow(&format!("ip:127.0.0.1:{closed}"))
        .loopback_allowed()
        .start()
        .await;
    for request in [
        format!("GET http://127.0.0.1:{closed}/ HTTP/1.1\r\n\r\n"),
        format!("CONNECT 127.0.0.1:{closed} HTTP/1.1\r\n\r\n"),
    ] {
        let (_client, response) = exchange(&running, &request).await;
        assert_eq!(
            (response.status, response.reason().as_deref()),
            (502, Some("connect_failed")),
            "{request}"
        );
    }
}

#[tokio::test]
async fn a_name_without_an_answer_gets_502_resolve_failed() {
    let running = Setup::new()
        .allow("nowhere.test:80")
        .loopback_allowed()
        .start()
        .await;
    let (_client, response) = exchange(&running, "GET http://nowhere.test/ HTTP/1.1\r\n\r\n").await;
    assert_eq!(
        (response.status, response.reason().as_deref()),
        (502, Some("resolve_failed"))
    );
    assert!(
        String::from_utf8_lossy(&response.body).contains("--resolve nowhere.test="),
        "{response:?}"
    );
}

#[tokio::test]
async fn long_bodies_arrive_intact_in_both_directions() {
    let upstream = Upstream::start(Answer::Bulk).await;
    let port = upstream.port();
    let running = allowed(&upstream).await;
    let body = pattern(BULK);
    let mut client = running.client().await;
    let head = format!(
        "POST http://allowed.test:{port}/ HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await.unwrap();
    client.write_all(&body).await.unwrap();
    let response = read_response(&mut client).await;
    assert_eq!(response.status, 200);
    assert!(
        response.body == body,
        "the response body differs from what the upstream sent"
    );
    let received = &upstream.received()[0];
    let start = find(received, b"\r\n\r\n").unwrap() + 4;
    assert!(
        received[start..] == body[..],
        "the upstream received a different request body"
    );
    let records = running.records.wait_for(2).await;
    assert_eq!(
        (records[1].1.bytes_up, records[1].1.bytes_down),
        (BULK as u64, BULK as u64)
    );
}

#[tokio::test]
async fn a_body_delimited_by_close_is_relayed_and_then_the_client_is_closed() {
    let upstream = Upstream::start(Answer::BulkUntilClose).await;
    let port = upstream.port();
    let running = allowed(&upstream).await;
    let (mut client, response) = exchange(
        &running,
        &format!("GET http://allowed.test:{port}/ HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("connection").as_deref(), Some("close"));
    assert!(read_to_close(&mut client).await == pattern(BULK));
}

#[tokio::test]
async fn a_chunked_response_is_reencoded_for_http_1_1_and_unframed_for_http_1_0() {
    let upstream = Upstream::start(Answer::Chunked).await;
    let port = upstream.port();
    let running = allowed(&upstream).await;
    let get = |minor| format!("GET http://allowed.test:{port}/ HTTP/1.{minor}\r\n\r\n");
    let mut client = running.client().await;
    client.write_all(get(1).as_bytes()).await.unwrap();
    let response = read_response(&mut client).await;
    assert_eq!(
        response.header("transfer-encoding").as_deref(),
        Some("chunked")
    );
    // The head was read by `read_response`; the rest is the re-encoded body, no extension, no
    // trailer, and the connection stays open for another request.
    let mut body = vec![0u8; b"3\r\nabc\r\n0\r\n\r\n".len()];
    tokio::io::AsyncReadExt::read_exact(&mut client, &mut body)
        .await
        .unwrap();
    assert_eq!(body, b"3\r\nabc\r\n0\r\n\r\n");
    // An HTTP/1.0 client cannot read chunked: plain bytes, then close.
    let mut old = running.client().await;
    old.write_all(get(0).as_bytes()).await.unwrap();
    let text = String::from_utf8(read_to_close(&mut old).await).unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(
        !text.to_ascii_lowercase().contains("transfer-encoding"),
        "{text}"
    );
    assert!(text.ends_with("\r\nConnection: close\r\n\r\nabc"), "{text}");
}

/// The head path the fuzz target drives (`fuzz/fuzz_targets/proxy_head.rs`), on heads a client
/// might send: its assertions (one `Host`, no hop-by-hop or `Proxy-*` field, the same framing
/// upstream) hold, and heads the proxy would refuse are not rewritten at all.
#[test]
fn the_rewritten_upstream_head_keeps_its_properties_on_sample_heads() {
    let heads: [&[u8]; 8] = [
        b"GET http://example.test/a?b HTTP/1.1\r\nHost: other.test\r\n\r\n",
        b"GET http://example.test:8080/ HTTP/1.1\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: 5\r\nProxy-Authorization: Basic eA==\r\n\r\n",
        b"POST http://example.test/up HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
        b"POST http://example.test/up HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTE: trailers\r\nTrailer: X\r\n\r\n",
        b"POST http://example.test/up HTTP/1.0\r\nContent-Length: 0\r\nUpgrade: h2c\r\n\r\n",
        // Refused before any rewrite: both lengths, and a coding other than `chunked`.
        b"POST http://example.test/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST http://example.test/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        b"CONNECT example.test:443 HTTP/1.1\r\nHost: elsewhere.test\r\n\r\n",
    ];
    for head in heads {
        cordon_egress::proxy::fuzz_request_head(head);
    }
}

#[tokio::test]
async fn a_listener_with_a_credential_answers_407_to_a_request_without_it_and_records_nothing() {
    let upstream = Upstream::start(Answer::Http).await;
    let port = upstream.port();
    let running = Setup::new()
        .upstream(port)
        .credential("Bearer 0123456789abcdef")
        .start()
        .await;
    for given in [
        "",
        "Proxy-Authorization: Bearer wrong\r\n",
        "Proxy-Authorization: Bearer 0123456789abcdeF\r\n",
    ] {
        let request = format!(
            "GET http://127.0.0.1:{port}/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{given}\r\n"
        );
        let (_client, response) = exchange(&running, &request).await;
        assert_eq!(response.status, 407, "{given:?}: {response:?}");
    }
    let connect = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    let (_client, response) = exchange(&running, &connect).await;
    assert_eq!(response.status, 407, "{response:?}");
    assert!(upstream.received().is_empty(), "the upstream got nothing");
    // The control: with it, the request is decided, recorded and forwarded.
    let request = format!(
        "GET http://127.0.0.1:{port}/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Proxy-Authorization: Bearer 0123456789abcdef\r\n\r\n"
    );
    let (_client, response) = exchange(&running, &request).await;
    assert_eq!(response.status, 200, "{response:?}");
    let records = running.records.wait_for(2).await;
    // One decision and its close: the authorised request's; the refused ones were never decided.
    let decisions: Vec<_> = records
        .iter()
        .filter(|(kind, _)| *kind == AuditKind::Decision)
        .collect();
    assert_eq!(decisions.len(), 1, "{records:?}");
    assert_eq!(decisions[0].1.port, Some(port));
    assert_eq!(upstream.received().len(), 1);
    // Not forwarded to the upstream: the credential is the proxy's.
    assert!(!upstream_head(&upstream, 0).contains("0123456789abcdef"));
}
