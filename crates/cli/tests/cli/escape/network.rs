//! Network escapes in `--net none`: the host's loopback (TCP over IPv4 and IPv6, UDP), host unix
//! sockets by path and by abstract name, routes and DNS are all out of reach, while a server the
//! sandbox starts on its own loopback works.

use std::net::{TcpListener, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};

use super::{on_host, outside, python, sandboxed, unique, workspace};

/// The host's listeners. Each one is checked afterwards for anything that reached it.
struct HostListeners {
    tcp4: TcpListener,
    tcp6: Option<TcpListener>,
    udp: UdpSocket,
    unix_path: UnixListener,
    unix_abstract: UnixListener,
    abstract_name: String,
    dir: tempfile::TempDir,
}

impl HostListeners {
    fn open() -> HostListeners {
        let dir = outside();
        let abstract_name = unique("cordon-escape-abstract");
        let address =
            SocketAddr::from_abstract_name(abstract_name.as_bytes()).expect("abstract address");
        let listeners = HostListeners {
            tcp4: TcpListener::bind("127.0.0.1:0").expect("bind tcp4"),
            // A host without IPv6 on loopback has no v6 path to probe.
            tcp6: TcpListener::bind("[::1]:0").ok(),
            udp: UdpSocket::bind("127.0.0.1:0").expect("bind udp"),
            unix_path: UnixListener::bind(dir.path().join("host.sock")).expect("bind unix"),
            unix_abstract: UnixListener::bind_addr(&address).expect("bind abstract"),
            abstract_name,
            dir,
        };
        listeners.tcp4.set_nonblocking(true).expect("nonblocking");
        if let Some(tcp6) = &listeners.tcp6 {
            tcp6.set_nonblocking(true).expect("nonblocking");
        }
        listeners.udp.set_nonblocking(true).expect("nonblocking");
        listeners
            .unix_path
            .set_nonblocking(true)
            .expect("nonblocking");
        listeners
            .unix_abstract
            .set_nonblocking(true)
            .expect("nonblocking");
        listeners
    }

    /// The probe's arguments: where each listener is.
    fn probe(&self) -> String {
        let port =
            |listener: &TcpListener| listener.local_addr().map(|addr| addr.port()).unwrap_or(0);
        let nameserver = std::fs::read_to_string("/etc/resolv.conf")
            .ok()
            .and_then(|text| {
                text.lines().find_map(|line| {
                    line.strip_prefix("nameserver")
                        .map(|ip| ip.trim().to_owned())
                })
            })
            .unwrap_or_else(|| "192.0.2.53".into());
        format!(
            "{} {} {} {} {} {} {}",
            python(NETWORK_PROBE),
            port(&self.tcp4),
            self.tcp6.as_ref().map(port).unwrap_or(0),
            self.udp.local_addr().map(|addr| addr.port()).unwrap_or(0),
            self.dir.path().join("host.sock").display(),
            self.abstract_name,
            nameserver,
        )
    }

    /// Which listeners something reached.
    fn reached(&self) -> Vec<&'static str> {
        let mut reached = Vec::new();
        if self.tcp4.accept().is_ok() {
            reached.push("tcp4");
        }
        if self.tcp6.as_ref().is_some_and(|tcp6| tcp6.accept().is_ok()) {
            reached.push("tcp6");
        }
        let mut buffer = [0u8; 64];
        if self.udp.recv_from(&mut buffer).is_ok() {
            reached.push("udp");
        }
        if self.unix_path.accept().is_ok() {
            reached.push("unix-path");
        }
        if self.unix_abstract.accept().is_ok() {
            reached.push("unix-abstract");
        }
        reached
    }
}

/// Tries every way out; argv: tcp4 port, tcp6 port, udp port, unix path, abstract name, nameserver.
/// A UDP `connect` sends no packet: it only asks for a route, which is what `none` removes.
const NETWORK_PROBE: &str = r#"
import socket, sys
tcp4, tcp6, udp, unix_path, abstract, nameserver = sys.argv[1:7]
def attempt(label, action):
    try:
        action()
        print(f"{label}: ok", flush=True)
    except OSError as error:
        print(f"{label}: {error.strerror}", flush=True)
def connect(family, kind, address):
    def run():
        with socket.socket(family, kind) as sock:
            sock.settimeout(5)
            sock.connect(address)
            if kind == socket.SOCK_DGRAM and family != socket.AF_UNIX:
                if address[0] != nameserver:
                    sock.send(b"escaped")
            else:
                sock.sendall(b"escaped")
    return run
attempt("tcp4", connect(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", int(tcp4))))
if tcp6 != "0":
    attempt("tcp6", connect(socket.AF_INET6, socket.SOCK_STREAM, ("::1", int(tcp6))))
attempt("udp", connect(socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", int(udp))))
attempt("unix-path", connect(socket.AF_UNIX, socket.SOCK_STREAM, unix_path))
attempt("unix-abstract", connect(socket.AF_UNIX, socket.SOCK_STREAM, "\0" + abstract))
attempt("route-to-nameserver", connect(socket.AF_INET, socket.SOCK_DGRAM, (nameserver, 53)))
routes = [line.split()[1] for line in open("/proc/net/route").read().splitlines()[1:]]
print("default-route:", "00000000" in routes, flush=True)
"#;

#[test]
fn no_network_mode_reaches_nothing_on_the_host() {
    let ws = workspace();
    let listeners = HostListeners::open();
    let run = sandboxed(ws.path(), &[], &listeners.probe());
    assert!(
        run.mentions("route-to-nameserver:"),
        "the probe did not finish:\n{run}"
    );
    let reached = listeners.reached();
    assert!(
        reached.is_empty(),
        "the sandbox reached host listeners {reached:?}:\n{run}"
    );
    run.assert_line("default-route: False");
    assert!(
        !run.mentions("route-to-nameserver: ok"),
        "the sandbox has a route out:\n{run}"
    );

    // Control: the same probe on the host reaches every listener and has a route.
    let control = on_host(ws.path(), &listeners.probe());
    let mut expected = vec!["tcp4", "tcp6", "udp", "unix-path", "unix-abstract"];
    if listeners.tcp6.is_none() {
        expected.retain(|name| *name != "tcp6");
    }
    assert_eq!(listeners.reached(), expected, "control:\n{control}");
    control.assert_line("route-to-nameserver: ok");
}

/// A server and a client on the sandbox's own loopback, over IPv4 and IPv6.
const OWN_LOOPBACK: &str = r#"
import socket, threading
for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
    server = socket.socket(family, socket.SOCK_STREAM)
    server.bind((host, 0))
    server.listen(1)
    port = server.getsockname()[1]
    def serve():
        connection, _ = server.accept()
        connection.sendall(b"hello " + connection.recv(64))
        connection.close()
    thread = threading.Thread(target=serve)
    thread.start()
    client = socket.create_connection((host, port), timeout=10)
    client.sendall(b"loopback")
    print(host, client.recv(64).decode(), flush=True)
    thread.join()
"#;

#[test]
fn a_server_on_the_sandboxs_own_loopback_works() {
    let ws = workspace();
    let run = sandboxed(ws.path(), &[], &python(OWN_LOOPBACK));
    run.assert_line("127.0.0.1 hello loopback");
    run.assert_line("::1 hello loopback");
}
