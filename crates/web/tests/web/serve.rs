//! Serving on a real loopback socket: the address rules, the next free port, and a closing
//! `cordon run` server ending its pages' streams.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use cordon_web::serve::{self, IfBusy};
use cordon_web::{AppState, Token, WebError};

use crate::{Fixture, TOKEN};

#[test]
fn only_loopback_addresses_are_served() {
    for addr in ["0.0.0.0:0", "[::]:0", "192.0.2.1:0"] {
        let addr: SocketAddr = addr.parse().expect("addr");
        assert!(
            matches!(
                serve::listen(addr, IfBusy::Fail),
                Err(WebError::NotLoopback(_))
            ),
            "{addr}"
        );
    }
    assert!(
        serve::listen("127.0.0.1:0".parse().expect("addr"), IfBusy::Fail).is_ok(),
        "control"
    );
}

#[test]
fn a_busy_port_moves_to_the_next_free_one_only_when_asked() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");
    let err = serve::listen(addr, IfBusy::Fail)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("pass another --addr"), "{err}");
    if let Ok(next) = serve::listen(addr, IfBusy::TryNext) {
        assert_ne!(next.local_addr().expect("addr").port(), addr.port());
    }
    assert_eq!(
        serve::url(addr, "/runs/x", &Token::from_text("t")),
        format!("http://{addr}/runs/x?token=t")
    );
}

#[test]
fn finishing_a_run_server_ends_open_streams_with_closing() {
    let fx = Fixture::new();
    let run = fx.run(1);
    let _lock = fx.store.lock_run(run).expect("lock");
    let listener =
        serve::listen("127.0.0.1:0".parse().expect("addr"), IfBusy::Fail).expect("listen");
    let addr = listener.local_addr().expect("addr");
    let state = AppState::new(&fx.state_dir(), Token::from_text(TOKEN), addr).expect("state");
    let server = serve::serve_in_background(listener, state).expect("serve");
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let request = format!(
        "GET /api/runs/{run}/stream HTTP/1.1\r\nHost: {addr}\r\nCookie: cordon_token_{}={TOKEN}\r\n\r\n",
        addr.port()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut lines = BufReader::new(stream).lines();
    let mut next_line = || lines.next().expect("stream open").expect("line");
    while next_line() != "event: status" {}
    let finishing = std::thread::spawn(move || server.finish(Duration::from_secs(30)));
    let mut rest = Vec::new();
    loop {
        let line = next_line();
        if line.contains("\"reason\":\"closing\"") {
            break;
        }
        rest.push(line);
    }
    assert!(rest.contains(&"event: end".to_owned()), "{rest:?}");
    finishing
        .join()
        .expect("finish returns once the stream is gone");
}
