//! `cordon ui`: its first stdout line, loopback only, the token on every request.

use std::io::{BufRead as _, BufReader};
use std::process::Stdio;

use crate::support::{cordon, get, read_all};

#[test]
fn ui_refuses_a_non_loopback_address() {
    let state = tempfile::tempdir().expect("tempdir");
    for addr in ["0.0.0.0:8321", "[::]:0", "192.0.2.1:8321"] {
        let out = cordon()
            .args(["ui", "--addr", addr, "--state-dir"])
            .arg(state.path())
            .output()
            .expect("run cordon");
        assert_eq!(out.status.code(), Some(2), "{addr}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("is not a loopback address") && stderr.contains("127.0.0.1"),
            "{stderr}"
        );
        assert!(out.stdout.is_empty());
    }
    let out = cordon()
        .args(["ui", "--addr", "nonsense", "--state-dir"])
        .arg(state.path())
        .output()
        .expect("run cordon");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not an address like 127.0.0.1:8321"));
}

/// One HTTP/1.1 request; returns the status line and the body.
fn http_get(addr: &str, path: &str, cookie: Option<&str>) -> (String, String) {
    let text = read_all(get(addr, path, cookie));
    let status = text.lines().next().unwrap_or("").to_owned();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn ui_prints_its_address_first_and_answers_only_with_the_token() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut child = cordon()
        .args(["ui", "--addr", "127.0.0.1:0", "--state-dir"])
        .arg(state.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn cordon ui");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("first line");
    let url = first.trim();
    let rest = url.strip_prefix("http://").expect("http url");
    let (addr, query) = rest.split_once("/?token=").expect("token in url");
    assert!(addr.starts_with("127.0.0.1:") && query.len() == 64, "{url}");
    let port = addr.rsplit(':').next().unwrap_or("");
    let unauthorized = http_get(addr, "/api/runs", None);
    let authorized = http_get(
        addr,
        "/api/runs",
        Some(&format!("cordon_token_{port}={query}")),
    );
    let with_query = http_get(addr, &format!("/api/runs?token={query}"), None);
    // Stops the server this test started, by its pid.
    let _ = child.kill();
    let _ = child.wait();
    assert!(unauthorized.0.contains(" 401 "), "{unauthorized:?}");
    assert!(authorized.0.contains(" 200 "), "{authorized:?}");
    assert!(with_query.0.contains(" 200 "), "{with_query:?}");
}
