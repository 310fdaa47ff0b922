//! Helpers shared by the end-to-end tests: locating the binary under test, a loopback upstream,
//! plain HTTP GETs to the pages `cordon run` and `cordon ui` serve.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;

/// The `cordon` binary under test. `CORDON_BIN` overrides the build's own binary so the suite can
/// run from a copy that an unprivileged user can reach (see `.ci/test`).
pub fn cordon_bin() -> PathBuf {
    std::env::var_os("CORDON_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cordon")))
}

/// A `Command` for the binary under test with a clean, predictable environment.
pub fn cordon() -> Command {
    let mut cmd = Command::new(cordon_bin());
    cmd.env("NO_COLOR", "1");
    cmd
}

/// A loopback HTTP server answering every request with `hello from upstream`; returns its port.
pub fn upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
            }
            let body = "hello from upstream\n";
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// Sends one GET and returns the connection, for the caller to read.
pub fn get(addr: &str, path: &str, cookie: Option<&str>) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let cookie = cookie
        .map(|c| format!("Cookie: {c}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{cookie}Connection: close\r\n\r\n"
    )
    .expect("send");
    stream
}

/// Everything the server sends until it closes the connection.
pub fn read_all(mut stream: TcpStream) -> String {
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read");
    text
}

/// Runs `examples/<name>/run.sh` with this build of cordon, its state and copies under `tmp`.
pub fn run_example(name: &str, tmp: &std::path::Path) -> std::process::Output {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
        .join("run.sh");
    Command::new("bash")
        .arg(&script)
        .env("CORDON", cordon_bin())
        .env("CORDON_STATE_DIR", tmp.join("state"))
        .env("TMPDIR", tmp)
        .env("NO_COLOR", "1")
        .output()
        .expect("run.sh")
}

/// A number no other call in this process gets (names of per-test resources).
#[allow(dead_code)]
pub fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}
