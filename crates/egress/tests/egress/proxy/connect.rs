//! CONNECT: allowed tunnels, every refusal with its reason, pipelined bytes, half-close, and
//! many tunnels at once.

use cordon_egress::proxy::{AuditDecision, AuditKind, Proto};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Answer, Setup, Upstream, exchange, only_decision, read_response, read_to_close};

fn connect(target: &str) -> String {
    format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n")
}

/// Sends `ping` through a tunnel to an echo upstream and reads it back.
async fn ping(client: &mut tokio::net::TcpStream) {
    client.write_all(b"ping").await.unwrap();
    let mut echo = [0u8; 4];
    client.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"ping");
}

#[tokio::test]
async fn proxy_tunnels_an_allowed_connect_only_after_dialling() {
    let upstream = Upstream::start(Answer::Echo).await;
    let port = upstream.port();
    let running = Setup::new()
        .allow(&format!("allowed.test:{port}"))
        .resolve("allowed.test=127.0.0.1")
        .loopback_allowed()
        .start()
        .await;
    let (mut client, response) =
        exchange(&running, &connect(&format!("Allowed.TEST.:{port}"))).await;
    assert_eq!(response.status, 200, "{response:?}");
    ping(&mut client).await;
    drop(client);
    let records = running.records.wait_for(2).await;
    assert_eq!(upstream.received(), vec![b"ping".to_vec()]);
    let (kind, decision) = &records[0];
    assert_eq!(*kind, AuditKind::Decision);
    assert_eq!(decision.listener, "test");
    assert_eq!(decision.step.as_deref(), Some("build"));
    assert_eq!(decision.attempt, Some(2));
    assert_eq!(decision.proto, Proto::Connect);
    assert_eq!(decision.raw_target, format!("Allowed.TEST.:{port}"));
    assert_eq!(decision.host.as_deref(), Some("allowed.test"));
    assert_eq!(decision.port, Some(port));
    assert_eq!(decision.resolved, vec!["127.0.0.1".to_owned()]);
    assert_eq!(decision.dialed, Some(upstream.address.to_string()));
    assert_eq!(decision.decision, AuditDecision::Allow);
    assert_eq!(decision.reason, None);
    let (kind, close) = &records[1];
    assert_eq!(*kind, AuditKind::Close);
    assert_eq!((close.bytes_up, close.bytes_down), (4, 4));
    assert_eq!(close.dialed, Some(upstream.address.to_string()));
}

/// One refused CONNECT: the status, the reason header, the audit record, and no upstream
/// connection at all. Every policy row is also run allowed (the control) in
/// `each_refused_connect_succeeds_once_its_rule_allows_it`.
async fn check_refused(setup: Setup, target: &str, upstream: &Upstream, status: u16, reason: &str) {
    let running = setup.start().await;
    let (mut client, response) = exchange(&running, &connect(target)).await;
    assert_eq!(
        (response.status, response.reason().as_deref()),
        (status, Some(reason)),
        "{target}: {response:?}"
    );
    assert_eq!(response.header("connection").as_deref(), Some("close"));
    read_to_close(&mut client).await;
    let records = running.records.wait_for(1).await;
    let record = only_decision(&records);
    assert_eq!(record.decision, AuditDecision::Deny);
    assert_eq!(record.reason, Some(reason), "{target}");
    assert_eq!(record.dialed, None);
    assert_eq!(record.raw_target, target);
    assert_eq!(upstream.connections(), 0, "{target} reached the upstream");
}

#[tokio::test]
async fn proxy_refuses_denied_names_ports_and_ip_literals() {
    let upstream = Upstream::start(Answer::Echo).await;
    let port = upstream.port();
    let base = || {
        Setup::new()
            .allow(&format!("allowed.test:{port}"))
            .allow("other.test:1")
            .resolve("allowed.test=127.0.0.1")
            .resolve("other.test=127.0.0.1")
            .resolve("unlisted.test=127.0.0.1")
            .loopback_allowed()
    };
    let rows: Vec<(Setup, String, u16, &str)> = vec![
        (base(), format!("unlisted.test:{port}"), 403, "not_allowed"),
        (
            base(),
            format!("other.test:{port}"),
            403,
            "port_not_allowed",
        ),
        (base(), format!("127.0.0.1:{port}"), 403, "ip_literal"),
        (
            base(),
            format!("[::ffff:127.0.0.1]:{port}"),
            403,
            "ip_literal",
        ),
        (base(), format!("[::ffff:7f00:1]:{port}"), 403, "ip_literal"),
        (base(), format!("[::1]:{port}"), 403, "ip_literal"),
        (
            base().deny("allowed.test"),
            format!("allowed.test:{port}"),
            403,
            "denied_pipeline",
        ),
        (
            base().operator_deny("*"),
            format!("allowed.test:{port}"),
            403,
            "denied_operator",
        ),
        (
            base(),
            format!("allowed.test@unlisted.test:{port}"),
            400,
            "bad_target",
        ),
        (
            base(),
            format!("user:pw@allowed.test:{port}"),
            400,
            "bad_target",
        ),
        (base(), format!("[allowed.test]:{port}"), 400, "bad_target"),
        (base(), format!("127.1:{port}"), 400, "bad_target"),
        (base(), "allowed.test".to_owned(), 400, "bad_target"),
        (base(), format!("::1:{port}"), 400, "bad_target"),
    ];
    for (setup, target, status, reason) in rows {
        check_refused(setup, &target, &upstream, status, reason).await;
    }
}

#[tokio::test]
async fn each_refused_connect_succeeds_once_its_rule_allows_it() {
    let upstream = Upstream::start(Answer::Echo).await;
    let port = upstream.port();
    for (allow, target) in [
        (
            format!("unlisted.test:{port}"),
            format!("unlisted.test:{port}"),
        ),
        (format!("ip:127.0.0.1:{port}"), format!("127.0.0.1:{port}")),
        (
            format!("ip:127.0.0.1:{port}"),
            format!("[::ffff:127.0.0.1]:{port}"),
        ),
    ] {
        let running = Setup::new()
            .allow(&allow)
            .resolve("unlisted.test=127.0.0.1")
            .loopback_allowed()
            .start()
            .await;
        let (mut client, response) = exchange(&running, &connect(&target)).await;
        assert_eq!(response.status, 200, "{target}: {response:?}");
        ping(&mut client).await;
    }
    assert_eq!(upstream.connections(), 3);
}

#[tokio::test]
async fn proxy_refuses_an_allowed_name_resolving_to_loopback_without_allow_private() {
    let upstream = Upstream::start(Answer::Echo).await;
    let port = upstream.port();
    let setup = || {
        Setup::new()
            .allow(&format!("allowed.test:{port}"))
            .resolve("allowed.test=127.0.0.1")
    };
    check_refused(
        setup(),
        &format!("allowed.test:{port}"),
        &upstream,
        403,
        "private_address",
    )
    .await;
    // Control: the same request with loopback covered by allow_private reaches the upstream.
    let running = setup().loopback_allowed().start().await;
    let (mut client, response) =
        exchange(&running, &connect(&format!("allowed.test:{port}"))).await;
    assert_eq!(response.status, 200);
    ping(&mut client).await;
    assert_eq!(upstream.connections(), 1);
}

#[tokio::test]
async fn open_mode_reaches_any_name_on_loopback_only_when_allow_private_covers_it() {
    let upstream = Upstream::start(Answer::Echo).await;
    let port = upstream.port();
    let setup = || Setup::new().open().resolve("anything.test=127.0.0.1");
    let target = format!("anything.test:{port}");
    check_refused(setup(), &target, &upstream, 403, "private_address").await;
    // Deny lists still apply in open mode.
    let denied = setup().loopback_allowed().deny("anything.test");
    check_refused(denied, &target, &upstream, 403, "denied_pipeline").await;
    // Control: covered by allow_private, the same name reaches the upstream.
    let running = setup().loopback_allowed().start().await;
    let (mut client, response) = exchange(&running, &connect(&target)).await;
    assert_eq!(response.status, 200);
    ping(&mut client).await;
}

#[tokio::test]
async fn proxy_refuses_a_connect_to_its_own_listener() {
    let running = Setup::new()
        .allow("ip:127.0.0.1:*")
        .loopback_allowed()
        .start()
        .await;
    let target = running.address.to_string();
    let (_client, response) = exchange(&running, &connect(&target)).await;
    assert_eq!(
        (response.status, response.reason().as_deref()),
        (403, Some("self"))
    );
}

#[tokio::test]
async fn connect_ignores_a_misleading_host_header() {
    let upstream = Upstream::start(Answer::Echo).await;
    let port = upstream.port();
    let running = Setup::new()
        .allow(&format!("allowed.test:{port}"))
        .resolve("allowed.test=127.0.0.1")
        .resolve("evil.test=127.0.0.1")
        .loopback_allowed()
        .start()
        .await;
    let request = format!("CONNECT evil.test:{port} HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n");
    let (_client, response) = exchange(&running, &request).await;
    assert_eq!(response.reason().as_deref(), Some("not_allowed"));
    assert_eq!(upstream.connections(), 0);
    let request = format!("CONNECT allowed.test:{port} HTTP/1.1\r\nHost: evil.test:{port}\r\n\r\n");
    let (_client, response) = exchange(&running, &request).await;
    assert_eq!(response.status, 200);
    let records = running.records.wait_for(2).await;
    assert_eq!(records[1].1.host.as_deref(), Some("allowed.test"));
}

#[tokio::test]
async fn bytes_pipelined_after_an_allowed_connect_reach_the_upstream() {
    let upstream = Upstream::start(Answer::Echo).await;
    let port = upstream.port();
    let running = Setup::new()
        .allow(&format!("allowed.test:{port}"))
        .resolve("allowed.test=127.0.0.1")
        .loopback_allowed()
        .start()
        .await;
    let request = format!("{}PIPELINED", connect(&format!("allowed.test:{port}")));
    let (mut client, response) = exchange(&running, &request).await;
    assert_eq!(response.status, 200);
    let mut echo = [0u8; 9];
    client.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"PIPELINED");
    assert_eq!(upstream.received(), vec![b"PIPELINED".to_vec()]);
}

#[tokio::test]
async fn bytes_pipelined_after_a_denied_connect_are_dropped() {
    let upstream = Upstream::start(Answer::Http).await;
    let port = upstream.port();
    let running = Setup::new()
        .allow(&format!("allowed.test:{port}"))
        .resolve("allowed.test=127.0.0.1")
        .resolve("denied.test=127.0.0.1")
        .loopback_allowed()
        .start()
        .await;
    // A denied CONNECT followed by an allowed request: neither may reach the upstream.
    let request = format!(
        "{}GET http://allowed.test:{port}/smuggled HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
        connect(&format!("denied.test:{port}"))
    );
    let (mut client, response) = exchange(&running, &request).await;
    assert_eq!(response.reason().as_deref(), Some("not_allowed"));
    assert_eq!(read_to_close(&mut client).await, b"");
    assert_eq!(upstream.connections(), 0);
    // Control: the pipelined request alone is allowed and does reach it.
    let pipelined =
        format!("GET http://allowed.test:{port}/smuggled HTTP/1.1\r\nHost: allowed.test\r\n\r\n");
    let (_client, response) = exchange(&running, &pipelined).await;
    assert_eq!(response.status, 200);
    assert_eq!(upstream.connections(), 1);
}

#[tokio::test]
async fn a_tunnel_passes_a_half_close_through() {
    let upstream = Upstream::start(Answer::Echo).await;
    let port = upstream.port();
    let running = Setup::new().upstream(port).start().await;
    let (mut client, response) = exchange(&running, &connect(&format!("127.0.0.1:{port}"))).await;
    assert_eq!(response.status, 200);
    client.write_all(b"last words").await.unwrap();
    // Done sending: the upstream sees end of stream, still answers, then closes.
    client.shutdown().await.unwrap();
    assert_eq!(read_to_close(&mut client).await, b"last words");
    let records = running.records.wait_for(2).await;
    assert_eq!((records[1].1.bytes_up, records[1].1.bytes_down), (10, 10));
}

#[tokio::test]
async fn a_tunnel_carries_megabytes_both_ways_intact() {
    let upstream = Upstream::start(Answer::Echo).await;
    let port = upstream.port();
    let running = Setup::new().upstream(port).start().await;
    let (client, response) = exchange(&running, &connect(&format!("127.0.0.1:{port}"))).await;
    assert_eq!(response.status, 200);
    let data = super::pattern(super::BULK);
    let (mut read, mut write) = client.into_split();
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        write.write_all(&sent).await.unwrap();
        write.shutdown().await.unwrap();
    });
    let mut echoed = Vec::new();
    tokio::time::timeout(super::PATIENCE, read.read_to_end(&mut echoed))
        .await
        .unwrap()
        .unwrap();
    writer.await.unwrap();
    assert!(echoed == data, "the echo differs from what was sent");
    let records = running.records.wait_for(2).await;
    let close = &records[1].1;
    assert_eq!(
        (close.bytes_up, close.bytes_down),
        (data.len() as u64, data.len() as u64)
    );
}

#[tokio::test]
async fn two_hundred_concurrent_tunnels_all_work_and_all_close() {
    let upstream = Upstream::start(Answer::Echo).await;
    let port = upstream.port();
    let running = Setup::new()
        .upstream(port)
        // Fewer slots than clients: the rest wait in the backlog and are served as slots free.
        .limits(|l| l.max_connections = 64)
        .start()
        .await;
    let mut clients = tokio::task::JoinSet::new();
    for i in 0..200u32 {
        let mut client = running.client().await;
        clients.spawn(async move {
            client
                .write_all(connect(&format!("127.0.0.1:{port}")).as_bytes())
                .await
                .unwrap();
            let response = read_response(&mut client).await;
            assert_eq!(response.status, 200);
            let message = format!("tunnel {i:03}");
            client.write_all(message.as_bytes()).await.unwrap();
            let mut echo = vec![0u8; message.len()];
            client.read_exact(&mut echo).await.unwrap();
            assert_eq!(echo, message.as_bytes());
        });
    }
    let mut done = 0;
    while let Some(result) = clients.join_next().await {
        result.unwrap();
        done += 1;
    }
    assert_eq!(done, 200);
    assert_eq!(upstream.connections(), 200);
    // Every tunnel's sockets are released once its client left.
    assert!(running.proxy.wait_idle(super::PATIENCE).await);
    assert_eq!(running.proxy.open_connections(), 0);
    let records = running.records.wait_for(400).await;
    let closes = records
        .iter()
        .filter(|(k, _)| *k == AuditKind::Close)
        .count();
    assert_eq!(closes, 200);
}
