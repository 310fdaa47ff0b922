//! A std listener handed to the proxy (how a sandbox session passes the socket it bound inside
//! its network namespace): served on the caller's runtime with the caller's identity, until the
//! handle is stopped.

use std::sync::Arc;

use cordon_egress::proxy::{AuditSink, Identity, Limits, Proxy, ProxyConfig};
use cordon_egress::{Cidr, Pattern, PatternList, Policy, PolicySpec, StaticResolver};
use tokio::io::AsyncWriteExt;

use super::{Answer, Records, Upstream, read_response};

#[test]
fn a_handed_over_std_listener_is_served_with_its_identity_until_stopped() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let records = Arc::new(Records::default());
    let upstream = runtime.block_on(Upstream::start(Answer::Echo));
    let proxy = Proxy::new(ProxyConfig {
        policy: Arc::new(Policy::new(PolicySpec {
            allow: vec![
                Pattern::parse(
                    &format!("ip:127.0.0.1:{}", upstream.port()),
                    PatternList::Allow,
                )
                .unwrap(),
            ],
            allow_private: vec![Cidr::parse("127.0.0.0/8").unwrap()],
            ..PolicySpec::default()
        })),
        resolver: Arc::new(StaticResolver::new()),
        audit: Arc::clone(&records) as Arc<dyn AuditSink>,
        limits: Limits::default(),
    });
    let identity = Identity {
        listener: "session-01".to_owned(),
        step: Some("test".to_owned()),
        attempt: Some(3),
        credential: None,
    };
    let handle = proxy.spawn(runtime.handle(), listener, identity).unwrap();
    runtime.block_on(async {
        let mut client = tokio::net::TcpStream::connect(address).await.unwrap();
        let connect = format!(
            "CONNECT 127.0.0.1:{} HTTP/1.1\r\nX-Cordon-Step: forged\r\n\r\n",
            upstream.port()
        );
        client.write_all(connect.as_bytes()).await.unwrap();
        assert_eq!(read_response(&mut client).await.status, 200);
        drop(client);
        let records = records.wait_for(2).await;
        for (_, record) in &records {
            assert_eq!(record.listener, "session-01");
            assert_eq!(record.step.as_deref(), Some("test"));
            assert_eq!(record.attempt, Some(3));
        }
        handle.stop().await.unwrap();
        assert!(tokio::net::TcpStream::connect(address).await.is_err());
    });
}
