//! CONNECT setup latency, in process: from the client's completed TCP connect to the `200`
//! (the proxy accepts, reads the head, parses, decides, dials a loopback upstream, answers).
//! Prints p50/p99 over 2,000 sequential CONNECTs after 200 warm-up ones. The peer measured in the
//! same run is the bare loopback TCP connect to the upstream that every CONNECT includes.
//!
//!   cargo bench -p cordon-egress --bench connect_setup

use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_egress::proxy::{Identity, Limits, NoAudit, Proxy, ProxyConfig, Shutdown};
use cordon_egress::{Cidr, Pattern, PatternList, Policy, PolicySpec, StaticResolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const WARM_UP: usize = 200;
const SAMPLES: usize = 2_000;

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn report(label: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let (p50, p99) = (percentile(&samples, 50), percentile(&samples, 99));
    println!(
        "{label:<34} p50 {:>7.1} µs   p99 {:>7.1} µs",
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    );
    p50
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        // The upstream accepts and holds each connection until the client leaves.
        let upstream = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let port = upstream.local_addr().expect("address").port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = upstream.accept().await {
                tokio::spawn(async move {
                    let mut sink = [0u8; 1024];
                    while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
                });
            }
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let address = listener.local_addr().expect("address");
        let proxy = Proxy::new(ProxyConfig {
            policy: Arc::new(Policy::new(PolicySpec {
                allow: vec![
                    Pattern::parse(&format!("ip:127.0.0.1:{port}"), PatternList::Allow)
                        .expect("pattern"),
                ],
                allow_private: vec![Cidr::parse("127.0.0.0/8").expect("cidr")],
                listening: vec![address],
                ..PolicySpec::default()
            })),
            resolver: Arc::new(StaticResolver::new()),
            audit: Arc::new(NoAudit),
            limits: Limits::default(),
        });
        let (_shutdown, signal) = Shutdown::new();
        let serving = proxy.clone();
        tokio::spawn(async move { serving.serve(listener, Identity::default(), signal).await });

        let request = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n");
        let mut setups = Vec::with_capacity(SAMPLES);
        let mut head = [0u8; 64];
        for i in 0..WARM_UP + SAMPLES {
            let mut client = TcpStream::connect(address).await.expect("connect to proxy");
            client.set_nodelay(true).expect("nodelay");
            let started = Instant::now();
            client
                .write_all(request.as_bytes())
                .await
                .expect("send CONNECT");
            let mut got = 0;
            while !head[..got].ends_with(b"\r\n\r\n") {
                let n = client.read(&mut head[got..]).await.expect("read 200");
                assert!(n > 0, "the proxy closed the connection");
                got += n;
            }
            assert!(head.starts_with(b"HTTP/1.1 200"), "no 200");
            if i >= WARM_UP {
                setups.push(started.elapsed());
            }
        }
        let mut connects = Vec::with_capacity(SAMPLES);
        for i in 0..WARM_UP + SAMPLES {
            let started = Instant::now();
            let stream = TcpStream::connect(("127.0.0.1", port))
                .await
                .expect("connect");
            if i >= WARM_UP {
                connects.push(started.elapsed());
            }
            drop(stream);
        }
        let setup = report("CONNECT head sent -> 200 received", setups);
        let connect = report("bare loopback TCP connect (peer)", connects);
        println!(
            "CONNECT setup costs {:.1}x a bare connect",
            setup.as_secs_f64() / connect.as_secs_f64()
        );
    });
}
