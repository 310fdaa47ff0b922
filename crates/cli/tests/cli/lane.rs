//! The model lane (DESIGN §5) end to end: a `model_lane: true` command step runs a CLI-like
//! client (python3) inside a real sandbox against `127.0.0.1:3129`; the lane forwards to a fake
//! provider over HTTPS whose certificate a test CA signed (trusted through `SSL_CERT_FILE`).
//! Judged on the host: what the provider received (the real key, only inference POSTs), what the
//! client saw (a streamed answer, piece by piece; 403 for anything else), and that the real key
//! is in neither the sandbox's environment nor the run's events.
//!
//! The TLS files in `tls/` are copies of the agent crate's fixtures (made with openssl, P-256,
//! valid for 100 years): a test CA (its key discarded), and a server certificate for `localhost`
//! and 127.0.0.1 it signed. Copied, world-readable, because this suite also runs as an
//! unprivileged user.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::run::{Fixture, stderr};

const REAL_KEY: &str = "sk-lane-test-real-key-0123456789";

fn tls_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/cli/tls")
        .join(name)
}

/// What the fake provider saw of one request.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    authorization: Option<String>,
    x_api_key: Option<String>,
}

/// The fake provider's record, and whether the stream's second half was released by the
/// client's second call (which it can only make after it saw the first half).
#[derive(Default)]
struct Provider {
    seen: Mutex<Vec<Seen>>,
    released_by_client: Mutex<Option<bool>>,
}

/// An HTTPS server on 127.0.0.1: `/v1/chat/completions` streams its first event, then holds
/// the rest until a `/v1/messages` call arrives (at most 30 s); `/v1/messages` answers at once.
fn fake_provider() -> (String, Arc<Provider>) {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(tls_fixture("server.pem"))
            .expect("server.pem")
            .collect::<Result<_, _>>()
            .expect("certificates");
    let key = PrivateKeyDer::from_pem_file(tls_fixture("server.key")).expect("server.key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("server config");
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!(
        "https://localhost:{}/v1",
        listener.local_addr().expect("addr").port()
    );
    let provider = Arc::new(Provider::default());
    let shared = Arc::clone(&provider);
    let (go, wait) = mpsc::channel::<()>();
    let wait = Arc::new(Mutex::new(wait));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let config = Arc::clone(&config);
            let provider = Arc::clone(&shared);
            let go = go.clone();
            let wait = Arc::clone(&wait);
            std::thread::spawn(move || {
                let Ok(connection) = rustls::ServerConnection::new(config) else {
                    return;
                };
                let mut tls = rustls::StreamOwned::new(connection, stream);
                let _ = answer(&mut tls, &provider, &go, &wait);
            });
        }
    });
    (url, provider)
}

fn answer(
    tls: &mut (impl Read + Write),
    provider: &Provider,
    go: &mpsc::Sender<()>,
    wait: &Mutex<mpsc::Receiver<()>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(&mut *tls);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let (mut length, mut authorization, mut x_api_key) = (0, None, None);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
        let (name, value) = line.split_once(':').unwrap_or((&line, ""));
        let value = value.trim().to_owned();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.parse().unwrap_or(0),
            "authorization" => authorization = Some(value),
            "x-api-key" => x_api_key = Some(value),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    provider.seen.lock().expect("seen").push(Seen {
        method,
        path: path.clone(),
        authorization,
        x_api_key,
    });
    if path.starts_with("/v1/messages") {
        let reply = r#"{"type":"message","content":[{"type":"text","text":"second call"}],"usage":{"input_tokens":2,"output_tokens":3}}"#;
        write!(
            tls,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
            reply.len()
        )?;
        tls.flush()?;
        let _ = go.send(());
        return Ok(());
    }
    // Streamed, close-delimited: the first event now, the rest once the client's second call
    // shows it has read the first.
    write!(
        tls,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n\
         data: {{\"choices\":[{{\"delta\":{{\"content\":\"first-piece\"}}}}]}}\n\n"
    )?;
    tls.flush()?;
    let released = wait
        .lock()
        .expect("wait")
        .recv_timeout(Duration::from_secs(30))
        .is_ok();
    *provider.released_by_client.lock().expect("flag") = Some(released);
    write!(
        tls,
        "data: {{\"choices\":[{{\"delta\":{{\"content\":\"last-piece\"}}}}]}}\n\n\
         data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":5,\"completion_tokens\":7}}}}\n\n\
         data: [DONE]\n\n"
    )?;
    tls.flush()
}

/// The client inside the sandbox: streams a chat completion from `OPENAI_BASE_URL`, and after
/// the first piece makes an Anthropic-style call with `ANTHROPIC_BASE_URL`; then tries a GET
/// and a path outside the inference set. Everything it sees goes to `lane.txt`.
const CLIENT: &str = r#"
import http.client, json, os, urllib.parse
out = open("lane.txt", "w")
with open("env.txt", "w") as f:
    for k, v in sorted(os.environ.items()):
        f.write(f"{k}={v}\n")
def conn(base):
    u = urllib.parse.urlparse(base)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=60), u.path
c, prefix = conn(os.environ["OPENAI_BASE_URL"])
body = json.dumps({"model": "client-model", "stream": True, "messages": []})
c.request("POST", prefix + "/chat/completions", body=body, headers={
    "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
r = c.getresponse()
out.write(f"stream {r.status}\n")
while True:
    line = r.readline()
    if not line:
        break
    out.write("line " + line.decode().strip() + "\n")
    if b"first-piece" in line:
        a, _ = conn(os.environ["ANTHROPIC_BASE_URL"])
        a.request("POST", "/v1/messages?beta=true", body=json.dumps({"model": "claude-test"}),
                  headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"]})
        ar = a.getresponse()
        out.write(f"messages {ar.status} {ar.read().decode()}\n")
for method, path in [("GET", "/v1/models"), ("POST", "/v1/embeddings"), ("GET", "/v1/chat/completions")]:
    o, _ = conn(os.environ["OPENAI_BASE_URL"])
    o.request(method, path, body=b"{}" if method == "POST" else None)
    orr = o.getresponse()
    out.write(f"other {method} {path} {orr.status} {orr.getheader('X-Cordon-Reason')}\n")
out.close()
"#;

/// A run of one `model_lane: true` step running `client` (python) against the fake provider, with
/// `extra` top-level pipeline keys; the fixture, the provider's record and the run's output.
fn lane_run(client: &str, extra: &str) -> (Fixture, Arc<Provider>, std::process::Output) {
    let (url, provider) = fake_provider();
    let f = Fixture::new(&format!(
        "name: lane
llm: {{provider: openai, model: test-model, base_url: '{url}', api_key_env: LANE_TEST_KEY}}
{extra}steps:
  - name: cli
    model_lane: true
    command: python3 client.py
"
    ));
    std::fs::write(f.ws.join("client.py"), client).expect("write client");
    crate::run::git(&f.ws, &["add", "-A"]);
    crate::run::git(&f.ws, &["commit", "-q", "-m", "client"]);
    let out = f
        .cordon(&["run", "pipeline.yaml", "--no-ui"])
        .env("LANE_TEST_KEY", REAL_KEY)
        .env("SSL_CERT_FILE", tls_fixture("ca.pem"))
        .output()
        .expect("cordon run");
    (f, provider, out)
}

#[test]
fn a_lane_step_streams_answers_with_the_real_key_added_host_side_and_refuses_the_rest() {
    let (f, provider, out) = lane_run(CLIENT, "");
    let read = |name: &str| std::fs::read_to_string(f.ws.join(name)).unwrap_or_default();
    let lane = read("lane.txt");
    assert_eq!(out.status.code(), Some(0), "{}\n{lane}", stderr(&out));

    // Streamed through unbuffered: the client saw the first piece while the provider still
    // held the rest, and its second call released it.
    assert!(lane.contains("stream 200"), "{lane}");
    let first = lane.find("first-piece").expect("first piece");
    let second = lane.find("messages 200").expect("the second call");
    let last = lane.find("last-piece").expect("last piece");
    assert!(first < second && second < last, "{lane}");
    assert_eq!(
        *provider.released_by_client.lock().expect("flag"),
        Some(true),
        "the lane held the stream back: {lane}"
    );

    // Only the two inference POSTs reached the provider, each with the real key.
    let seen = provider.seen.lock().expect("seen").clone();
    let paths: Vec<String> = seen
        .iter()
        .map(|s| format!("{} {}", s.method, s.path))
        .collect();
    assert_eq!(
        paths,
        ["POST /v1/chat/completions", "POST /v1/messages?beta=true"],
        "{seen:?}"
    );
    for s in &seen {
        assert_eq!(
            s.authorization.as_deref(),
            Some(format!("Bearer {REAL_KEY}").as_str())
        );
        assert_eq!(
            s.x_api_key, None,
            "the client's dummy key is dropped: {s:?}"
        );
    }
    for probe in [
        "other GET /v1/models 403 not_allowed",
        "other POST /v1/embeddings 403 not_allowed",
        "other GET /v1/chat/completions 403 not_allowed",
    ] {
        assert!(lane.contains(probe), "{probe}: {lane}");
    }

    // The sandbox saw the lane and the dummy key, never the real one.
    let env = read("env.txt");
    for line in [
        "OPENAI_BASE_URL=http://127.0.0.1:3129/v1",
        "ANTHROPIC_BASE_URL=http://127.0.0.1:3129",
        "OPENAI_API_KEY=cordon-lane-dummy",
        "ANTHROPIC_API_KEY=cordon-lane-dummy",
    ] {
        assert!(env.lines().any(|l| l == line), "{line}: {env}");
    }
    assert!(
        !env.contains(REAL_KEY) && !env.contains("LANE_TEST_KEY"),
        "{env}"
    );

    // Each call is an llm.request / llm.response pair of the step with source lane; the key
    // is nowhere in the events.
    let logs = f
        .cordon(&["logs", "--last", "--json"])
        .output()
        .expect("cordon logs");
    let events = String::from_utf8_lossy(&logs.stdout);
    assert!(!events.contains(REAL_KEY), "{events}");
    let llm: Vec<serde_json::Value> = events
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"].as_str().is_some_and(|t| t.starts_with("llm.")))
        .collect();
    // The two answers end close together; which is reported first is not fixed.
    let mut shape: Vec<String> = llm
        .iter()
        .map(|v| {
            format!(
                "{} {} {} {} in={} out={}",
                v["type"].as_str().unwrap_or(""),
                v["step"].as_str().unwrap_or(""),
                v["data"]["source"].as_str().unwrap_or(""),
                v["data"]["model"].as_str().unwrap_or(""),
                v["data"]["input_tokens"],
                v["data"]["output_tokens"],
            )
        })
        .collect();
    assert_eq!(
        shape[..2],
        [
            "llm.request cli lane client-model in=null out=null",
            "llm.request cli lane claude-test in=null out=null",
        ],
        "{events}"
    );
    shape[2..].sort();
    assert_eq!(
        shape[2..],
        [
            "llm.response cli lane claude-test in=2 out=3",
            "llm.response cli lane client-model in=5 out=7",
        ],
        "{events}"
    );
}

#[test]
fn a_lane_step_without_its_key_variable_fails_before_anything_runs() {
    let f = Fixture::new(
        "name: lane
llm: {provider: anthropic, model: m, base_url: 'https://localhost:1', api_key_env: LANE_TEST_UNSET_KEY}
steps:
  - name: cli
    model_lane: true
    command: touch ran.txt
",
    );
    let out = f
        .cordon(&["run", "pipeline.yaml", "--no-ui"])
        .env_remove("LANE_TEST_UNSET_KEY")
        .output()
        .expect("cordon run");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("`LANE_TEST_UNSET_KEY` is not set"),
        "{}",
        stderr(&out)
    );
    assert!(!f.ws.join("ran.txt").exists(), "nothing ran");
}

#[test]
fn without_the_test_ca_in_ssl_cert_file_the_lane_refuses_the_upstreams_certificate() {
    // The control of the test above: the same provider, no `SSL_CERT_FILE`.
    let (url, provider) = fake_provider();
    let f = Fixture::new(&format!(
        "name: lane
llm: {{provider: openai, model: test-model, base_url: '{url}', api_key_env: LANE_TEST_KEY}}
steps:
  - name: cli
    model_lane: true
    command: curl -sS -o /dev/null -D head.txt -X POST --data '{{}}' \"$OPENAI_BASE_URL/chat/completions\"
"
    ));
    let out = f
        .cordon(&["run", "pipeline.yaml", "--no-ui"])
        .env("LANE_TEST_KEY", REAL_KEY)
        .env_remove("SSL_CERT_FILE")
        .output()
        .expect("cordon run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let head = std::fs::read_to_string(f.ws.join("head.txt")).unwrap_or_default();
    assert!(
        head.starts_with("HTTP/1.1 502") && head.contains("X-Cordon-Reason: connect_failed"),
        "{head}"
    );
    assert!(
        provider.seen.lock().expect("seen").is_empty(),
        "no request got through an untrusted TLS session"
    );
}

/// Two Anthropic-style calls through the lane; each status, refusal reason and body to
/// `lane.txt`.
const TWO_CALLS: &str = r#"
import http.client, json, os, urllib.parse
out = open("lane.txt", "w")
u = urllib.parse.urlparse(os.environ["ANTHROPIC_BASE_URL"])
for _ in range(2):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request("POST", "/v1/messages", body=json.dumps({"model": "claude-test"}),
              headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"]})
    r = c.getresponse()
    out.write(f"{r.status} {r.getheader('X-Cordon-Reason')} {r.read().decode()}\n")
out.close()
"#;

#[test]
fn a_spent_budget_makes_the_lane_answer_429_and_stops_the_run_before_the_step_is_judged() {
    let (f, provider, out) = lane_run(TWO_CALLS, "budget: {tokens: 4}\n");
    let lane = std::fs::read_to_string(f.ws.join("lane.txt")).unwrap_or_default();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}\n{lane}");
    let lines: Vec<&str> = lane.lines().collect();
    assert!(lines[0].starts_with("200 None "), "{lane}");
    // The first call's 5 tokens spent the budget: the second never left the host.
    assert!(
        lines[1].starts_with("429 budget_exhausted ")
            && lines[1].contains("budget exhausted: tokens 5 of 4"),
        "{lane}"
    );
    assert_eq!(provider.seen.lock().expect("seen").len(), 1);
    assert!(err.contains("budget exhausted: tokens 5 of 4"), "{err}");
    let logs = f
        .cordon(&["logs", "--last", "--json"])
        .output()
        .expect("logs");
    let logs = String::from_utf8_lossy(&logs.stdout);
    assert!(logs.contains("\"type\":\"budget.exhausted\""), "{logs}");
    assert!(
        !logs.contains("\"type\":\"step.finished\""),
        "the step takes no route: {logs}"
    );
}

/// Starts a streamed call, reads its first piece, and leaves with the rest still coming.
const LEAVES_EARLY: &str = r#"
import http.client, json, os, urllib.parse
u = urllib.parse.urlparse(os.environ["OPENAI_BASE_URL"])
c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
c.request("POST", u.path + "/chat/completions", body=json.dumps({"model": "left-early", "stream": True}),
          headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
r = c.getresponse()
while b"first-piece" not in r.readline():
    pass
os._exit(0)
"#;

#[test]
fn a_call_still_in_flight_when_its_session_ends_is_counted_by_estimate() {
    let (f, _provider, out) = lane_run(LEAVES_EARLY, "");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let logs = f
        .cordon(&["logs", "--last", "--json", "--type", "llm.response"])
        .output()
        .expect("logs");
    let logs = String::from_utf8_lossy(&logs.stdout);
    let response: serde_json::Value =
        serde_json::from_str(logs.trim()).unwrap_or_else(|e| panic!("one response ({e}): {logs}"));
    assert_eq!(response["data"]["model"], "left-early");
    assert_eq!(response["data"]["estimated"], true, "{logs}");
    assert!(
        response["data"]["input_tokens"].as_u64() > Some(0),
        "{logs}"
    );
}
