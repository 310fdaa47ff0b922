//! The page `cordon run` serves for its own run: line 2 on stderr, the token on every request,
//! the live stream ended with a "closing" event when the run ends (the page then says to use
//! `cordon ui`), `--no-ui`, and `--ui ADDR`.

use std::io::{BufRead as _, Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::run::{Fixture, stderr};
use crate::support::{get, read_all};

const BLOCKING: &str = "name: demo
steps:
  - name: wait
    command: read line < gate
  - name: after
    command: echo after > after.txt
";

#[test]
fn run_serves_its_page_as_line_2_and_ends_its_streams_when_the_run_ends() {
    let f = Fixture::gated(BLOCKING);
    let (mut child, id, mut err) = f.spawn(&["run", "pipeline.yaml", "--ui", "127.0.0.1:0"]);
    let mut second = String::new();
    err.read_line(&mut second).expect("line 2");
    let url = second
        .trim()
        .strip_prefix("ui ")
        .unwrap_or_else(|| panic!("line 2 is `ui <URL>`: {second:?}"));
    let rest = url.strip_prefix("http://127.0.0.1:").expect("loopback url");
    let (port, path) = rest.split_once('/').expect("a path");
    let (page, token) = path.split_once("?token=").expect("a token");
    assert_eq!(page, format!("runs/{id}"), "{url}");
    assert_eq!(token.len(), 64, "{url}");
    let addr = format!("127.0.0.1:{port}");

    let refused = read_all(get(&addr, &format!("/runs/{id}"), None));
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    let cookie = format!("cordon_token_{port}={token}");
    let with_token = read_all(get(&addr, &format!("/runs/{id}?token={token}"), None));
    assert!(
        with_token.starts_with("HTTP/1.1 303") && with_token.contains(&cookie),
        "the token becomes a cookie: {with_token}"
    );
    // `run <ID>` is printed once `run.started` is durable; the step starts a moment later.
    let running = "{\"status\":\"running\",\"name\":\"wait\"";
    let deadline = Instant::now() + Duration::from_secs(10);
    while !read_all(get(&addr, &format!("/api/runs/{id}"), Some(&cookie))).contains(running) {
        assert!(Instant::now() < deadline, "the step never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let shown = read_all(get(&addr, &format!("/runs/{id}"), Some(&cookie)));
    assert!(shown.starts_with("HTTP/1.1 200"), "{shown}");
    assert!(
        shown.contains(running),
        "the page holds the current state: {shown}"
    );

    // A live stream open while the run goes on ends with `closing` when it finishes.
    let stream = get(&addr, &format!("/api/runs/{id}/stream"), Some(&cookie));
    std::fs::write(f.ws.join("gate"), "open\n").expect("open the gate");
    let events = read_all(stream);
    let status = child.wait().expect("cordon run exits");
    let mut rest = String::new();
    err.read_to_string(&mut rest).expect("stderr");
    assert_eq!(status.code(), Some(0), "{rest}");
    assert!(events.contains("\"type\":\"run.finished\""), "{events}");
    assert!(
        events.contains("event: end\ndata: {\"reason\":\"closing\"}"),
        "{events}"
    );
    // The page is gone with the process. Another test may have been given the freed port since;
    // then whatever answers there does not know this run's token.
    if let Ok(mut stream) = TcpStream::connect(&addr) {
        let _ = write!(
            stream,
            "GET /runs/{id} HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
        );
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(
            !answer.contains(&id),
            "the page outlived its process: {answer}"
        );
    }
}

#[test]
fn no_ui_serves_nothing_and_prints_no_ui_line() {
    let f = Fixture::new("name: demo\nsteps:\n  - {name: a, command: 'true'}\n");
    let out = f.run(&["--no-ui"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.starts_with("run "), "{err}");
    assert!(!err.contains("\nui "), "{err}");
    // Control: without the flag the line is there.
    let out = f.run(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let second = err.lines().nth(1).unwrap_or_default();
    assert!(second.starts_with("ui http://127.0.0.1:"), "{err}");
}

#[test]
fn run_refuses_a_ui_address_that_is_not_loopback_or_cannot_be_bound() {
    let f = Fixture::new("name: demo\nsteps:\n  - {name: a, command: 'true'}\n");
    let out = f.run(&["--ui", "0.0.0.0:8321"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--ui `0.0.0.0:8321` is not a loopback address"),
        "{}",
        stderr(&out)
    );
    let out = f.run(&["--ui", "127.0.0.1:1", "--no-ui"]);
    assert_eq!(out.status.code(), Some(2), "the two flags conflict");

    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = busy.local_addr().expect("addr").to_string();
    let out = f.run(&["--ui", &addr]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the run's page cannot be served") && err.contains("--no-ui"),
        "{err}"
    );
    assert!(!err.starts_with("run "), "no run started: {err}");
    let runs = f.cordon(&["runs", "--json"]).output().expect("cordon runs");
    assert!(runs.stdout.is_empty(), "no run was created");
}
