//! The SNI check (DESIGN §18, `sni_mismatch`): a CONNECT of a name to the TLS port gets its `200`,
//! then the proxy reads the ClientHello and dials only when it names the CONNECT host. Judged by
//! what the upstream received, with the matching ClientHello as the control.

use std::sync::Arc;

use cordon_egress::proxy::AuditDecision;
use tokio::io::AsyncWriteExt;

use super::{Answer, Setup, Upstream, exchange, read_to_close};

/// The first TLS bytes of a client asking for `name`.
fn client_hello(name: &str) -> Vec<u8> {
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    let mut client =
        rustls::ClientConnection::new(Arc::new(config), name.to_owned().try_into().unwrap())
            .unwrap();
    let mut bytes = Vec::new();
    client.write_tls(&mut bytes).unwrap();
    bytes
}

async fn tunnel_with(
    hello: &[u8],
) -> (
    Upstream,
    Vec<(
        cordon_egress::proxy::AuditKind,
        cordon_egress::proxy::AuditRecord,
    )>,
) {
    let upstream = Upstream::start(Answer::Echo).await;
    let port = upstream.port();
    let running = Setup::new()
        .allow(&format!("api.sni.test:{port}"))
        .resolve("api.sni.test=127.0.0.1")
        .loopback_allowed()
        .limits(|l| l.sni_port = Some(port))
        .start()
        .await;
    let (mut client, response) = exchange(
        &running,
        &format!("CONNECT api.sni.test:{port} HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert_eq!(response.status, 200, "the 200 comes before the ClientHello");
    client.write_all(hello).await.unwrap();
    if hello.starts_with(&[0x16]) && hello.len() > 5 {
        // Matching: the ClientHello is echoed back through the tunnel.
        let mut echoed = vec![0u8; hello.len()];
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            tokio::io::AsyncReadExt::read_exact(&mut client, &mut echoed),
        )
        .await;
        if read.is_ok_and(|r| r.is_ok()) {
            assert_eq!(echoed, hello);
        }
    }
    drop(client);
    let records = running.records.wait_for(1).await;
    (upstream, records)
}

#[tokio::test]
async fn a_client_hello_naming_the_connect_host_is_tunnelled() {
    let hello = client_hello("api.sni.test");
    let (upstream, records) = tunnel_with(&hello).await;
    assert_eq!(records[0].1.decision, AuditDecision::Allow);
    assert_eq!(upstream.connections(), 1);
    assert_eq!(
        upstream.received().concat(),
        hello,
        "the ClientHello went upstream unchanged"
    );
}

#[tokio::test]
async fn a_client_hello_naming_another_host_never_reaches_an_upstream() {
    for hello in [
        client_hello("fronted.example.test"),
        b"SSH-2.0-OpenSSH_9.6\r\n".to_vec(),
    ] {
        let (upstream, records) = tunnel_with(&hello).await;
        let decision = &records[0].1;
        assert_eq!(decision.decision, AuditDecision::Deny);
        assert_eq!(decision.reason, Some("sni_mismatch"));
        assert_eq!(decision.dialed, None);
        assert_eq!(upstream.connections(), 0, "no upstream connection was made");
    }
}

#[tokio::test]
async fn a_tunnel_that_never_sends_its_client_hello_is_closed() {
    let upstream = Upstream::start(Answer::Echo).await;
    let port = upstream.port();
    let running = Setup::new()
        .allow(&format!("api.sni.test:{port}"))
        .resolve("api.sni.test=127.0.0.1")
        .loopback_allowed()
        .limits(|l| {
            l.sni_port = Some(port);
            l.client_hello_timeout = std::time::Duration::from_millis(200);
        })
        .start()
        .await;
    let (mut client, response) = exchange(
        &running,
        &format!("CONNECT api.sni.test:{port} HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert_eq!(response.status, 200);
    read_to_close(&mut client).await;
    let records = running.records.wait_for(1).await;
    assert_eq!(records[0].1.reason, Some("sni_mismatch"));
    assert_eq!(upstream.connections(), 0);
}
