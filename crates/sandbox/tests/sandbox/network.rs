//! Network `none`: only the session's own loopback. A server the sandbox starts on it works; the
//! host's loopback is another namespace.

use std::net::TcpListener;

use crate::support::*;

#[test]
fn only_loopback_exists_and_the_host_loopback_is_unreachable() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a host listener");
    let port = listener.local_addr().expect("addr").port();
    let ws = workspace();
    let mut session = open(ws.path());
    let probe = format!(
        "import socket\n\
         s = socket.socket()\n\
         s.settimeout(2)\n\
         try:\n    s.connect(('127.0.0.1', {port})); print('connected')\n\
         except OSError as e:\n    print('refused')\n"
    );
    let script =
        format!("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; python3 -c \"{probe}\"");
    let out = stdout(&sh(&mut session, &script));
    assert_eq!(out, "lo\nrefused\n", "{out}");
    // Control: the same probe from the host connects.
    let control = std::process::Command::new("python3")
        .arg("-c")
        .arg(&probe)
        .output()
        .expect("run the probe on the host");
    assert_eq!(String::from_utf8_lossy(&control.stdout), "connected\n");
}

#[test]
fn a_server_on_the_sandbox_loopback_works() {
    let ws = workspace();
    let mut session = open(ws.path());
    let script = "import socket\n\
                  server = socket.socket(); server.bind(('127.0.0.1', 0)); server.listen()\n\
                  client = socket.create_connection(server.getsockname())\n\
                  conn, _ = server.accept(); client.sendall(b'ping'); print(conn.recv(4).decode())\n";
    let out = stdout(&sh(&mut session, &format!("python3 -c \"{script}\"")));
    assert_eq!(out, "ping\n");
}
