//! Bounds: head size, head timeout, idle timeout, the connection limit, and shutdown.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Answer, Setup, Upstream, exchange, read_response, read_to_close};

const SHORT: Duration = Duration::from_millis(150);

#[tokio::test]
async fn an_oversized_request_head_is_refused_with_431() {
    let running = Setup::new()
        .limits(|l| l.max_head_bytes = 1024)
        .start()
        .await;
    let request = format!(
        "GET http://example.test/ HTTP/1.1\r\nX-Padding: {}\r\n\r\n",
        "a".repeat(2048)
    );
    let (mut client, response) = exchange(&running, &request).await;
    assert_eq!(
        (response.status, response.reason().as_deref()),
        (431, Some("bad_target"))
    );
    read_to_close(&mut client).await;
    // Control: a head under the bound is read and decided.
    let (_client, response) = exchange(&running, "GET http://example.test/ HTTP/1.1\r\n\r\n").await;
    assert_eq!(response.reason().as_deref(), Some("not_allowed"));
}

#[tokio::test]
async fn a_slow_request_head_is_cut_off_at_the_head_timeout() {
    let running = Setup::new()
        .limits(|l| l.head_timeout = SHORT)
        .start()
        .await;
    // Half a head, never finished (slowloris): the proxy answers 408 and closes.
    let (mut client, response) =
        exchange(&running, "GET http://example.test/ HTTP/1.1\r\nX-Slow:").await;
    assert_eq!(response.status, 408);
    read_to_close(&mut client).await;
    // A connection that sends nothing at all is closed the same way.
    let mut silent = running.client().await;
    let response = read_response(&mut silent).await;
    assert_eq!(response.status, 408);
    assert!(running.records.all().is_empty(), "no decision was made");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let upstream = Upstream::start(Answer::Http).await;
    let port = upstream.port();
    let running = Setup::new()
        .upstream(port)
        .limits(|l| l.idle_timeout = SHORT)
        .start()
        .await;
    let (mut client, response) = exchange(
        &running,
        &format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert_eq!(response.status, 200);
    // Kept alive after the response, then closed when no next request comes.
    assert_eq!(read_to_close(&mut client).await, b"");
    assert!(running.proxy.wait_idle(super::PATIENCE).await);
}

#[tokio::test]
async fn an_idle_tunnel_is_closed() {
    let upstream = Upstream::start(Answer::Echo).await;
    let port = upstream.port();
    let running = Setup::new()
        .upstream(port)
        .limits(|l| l.idle_timeout = SHORT)
        .start()
        .await;
    let (mut client, response) = exchange(
        &running,
        &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert_eq!(response.status, 200);
    assert_eq!(read_to_close(&mut client).await, b"");
    let records = running.records.wait_for(2).await;
    assert_eq!(records[1].0, cordon_egress::proxy::AuditKind::Close);
}

#[tokio::test]
async fn a_busy_tunnel_stays_open_past_the_idle_timeout() {
    let upstream = Upstream::start(Answer::Echo).await;
    let port = upstream.port();
    let idle = Duration::from_millis(400);
    let running = Setup::new()
        .upstream(port)
        .limits(|l| l.idle_timeout = idle)
        .start()
        .await;
    let (mut client, response) = exchange(
        &running,
        &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert_eq!(response.status, 200);
    // Bytes keep moving for three idle timeouts, a round trip every fifth of one: the idle
    // timeout counts from the last byte either way, not from the tunnel's start.
    let deadline = tokio::time::Instant::now() + idle * 3;
    let mut trips = 0u64;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(idle / 5).await;
        client.write_all(b"ping").await.unwrap();
        let mut echo = [0u8; 4];
        client.read_exact(&mut echo).await.unwrap();
        assert_eq!(&echo, b"ping");
        trips += 1;
    }
    client.shutdown().await.unwrap();
    assert_eq!(read_to_close(&mut client).await, b"");
    let records = running.records.wait_for(2).await;
    assert_eq!(
        (records[1].1.bytes_up, records[1].1.bytes_down),
        (4 * trips, 4 * trips)
    );
}

#[tokio::test]
async fn shutdown_ends_an_open_tunnel_once_the_grace_runs_out() {
    let upstream = Upstream::start(Answer::Echo).await;
    let port = upstream.port();
    let running = Setup::new()
        .upstream(port)
        .limits(|l| l.shutdown_grace = SHORT)
        .start()
        .await;
    let (mut client, response) = exchange(
        &running,
        &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert_eq!(response.status, 200);
    client.write_all(b"ping").await.unwrap();
    let mut echo = [0u8; 4];
    client.read_exact(&mut echo).await.unwrap();
    running.shutdown.trigger();
    // The tunnel is neither idle (120 s) nor finished: it is dropped when the grace runs out.
    let served = tokio::time::timeout(super::PATIENCE, running.task).await;
    assert!(matches!(served, Ok(Ok(Ok(())))), "{served:?}");
    assert_eq!(read_to_close(&mut client).await, b"");
    assert!(running.proxy.wait_idle(super::PATIENCE).await);
}

#[tokio::test]
async fn connections_beyond_the_limit_wait_until_a_slot_frees() {
    let upstream = Upstream::start(Answer::Echo).await;
    let port = upstream.port();
    let running = Setup::new()
        .upstream(port)
        .limits(|l| l.max_connections = 1)
        .start()
        .await;
    let connect = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n");
    let (first, response) = exchange(&running, &connect).await;
    assert_eq!(response.status, 200);
    let mut second = running.client().await;
    second.write_all(connect.as_bytes()).await.unwrap();
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(SHORT, second.read(&mut byte)).await;
    assert!(
        early.is_err(),
        "the second connection was served while the first held the only slot"
    );
    assert_eq!(running.proxy.open_connections(), 1);
    drop(first);
    let response = read_response(&mut second).await;
    assert_eq!(response.status, 200);
}

#[tokio::test]
async fn shutdown_stops_accepting_and_closes_idle_connections() {
    let upstream = Upstream::start(Answer::Http).await;
    let port = upstream.port();
    let running = Setup::new().upstream(port).start().await;
    let (mut kept, response) = exchange(
        &running,
        &format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert_eq!(response.status, 200);
    running.shutdown.trigger();
    // The keep-alive connection is closed, serve() returns, and the port no longer accepts.
    assert_eq!(read_to_close(&mut kept).await, b"");
    let served = tokio::time::timeout(super::PATIENCE, running.task).await;
    assert!(matches!(served, Ok(Ok(Ok(())))), "{served:?}");
    assert_eq!(running.proxy.open_connections(), 0);
    assert!(
        tokio::net::TcpStream::connect(running.address)
            .await
            .is_err()
    );
}
