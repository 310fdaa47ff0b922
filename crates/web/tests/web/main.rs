//! `cordon-web` through `app()`, without a server: a run written with the store API into a
//! temporary state directory, requests sent with `oneshot`.

mod api;
mod auth;
mod serve;
mod stream;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use cordon_protocol::event::{AuditRecord, OutputStream, Timestamp, Verdict};
use cordon_protocol::{Attempt, Event, RunId, StepName};
use cordon_store::{RunRow, StateDir, Store};
use cordon_web::{AppState, Token};
use http_body_util::BodyExt as _;
use tower::ServiceExt as _;

pub const TOKEN: &str = "0123456789abcdef";
pub const HOST: &str = "127.0.0.1:8321";

/// A state directory with an open store.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub store: Store,
}

#[expect(
    clippy::new_without_default,
    reason = "a fixture is created explicitly, never defaulted"
)]
impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&StateDir::new(dir.path().join("state"))).expect("open store");
        Fixture { dir, store }
    }

    pub fn state_dir(&self) -> StateDir {
        StateDir::new(self.dir.path().join("state"))
    }

    pub fn app(&self) -> axum::Router {
        let addr = HOST.parse().expect("addr");
        let state = AppState::new(&self.state_dir(), Token::from_text(TOKEN), addr).expect("state");
        cordon_web::app(state.with_poll_interval(std::time::Duration::from_millis(10)))
    }

    /// A new run of pipeline `fix` with `run.started`.
    pub fn run(&self, bits: u128) -> RunId {
        let id = RunId::from_u128(bits << 80 | 7);
        self.store
            .create_run(&RunRow {
                id,
                pipeline: "fix".to_owned(),
                pipeline_file: "/w/pipeline.yaml".into(),
                workspace: "/w".into(),
                started: Timestamp(1_700_000_000_000 + u64::try_from(bits).unwrap_or(0)),
                snapshot: None,
            })
            .expect("create run");
        let started = Event::RunStarted {
            pipeline: "fix".into(),
            workspace: "/w".into(),
            attempt: Attempt::FIRST,
            max_attempts: 3,
            prompt: None,
            kind: cordon_protocol::event::RunKind::Steps,
            outcome: None,
            context: Vec::new(),
        };
        self.store.append(id, None, &started).expect("append");
        id
    }

    pub fn append(&self, run: RunId, step: Option<&str>, event: Event) -> u64 {
        let step = step.map(|s| StepName::parse(s).expect("step name"));
        self.store
            .append(run, step.as_ref(), &event)
            .expect("append")
            .seq
    }

    /// `test` passes, `dev` fails with output: a finished run of 8 events.
    pub fn finished_run(&self, bits: u128) -> RunId {
        let run = self.run(bits);
        self.append(
            run,
            Some("test"),
            Event::StepStarted {
                attempt: Attempt::FIRST,
            },
        );
        self.append(
            run,
            Some("test"),
            Event::StepOutput {
                stream: OutputStream::Stdout,
                text: "\u{1b}[32mok\u{1b}[0m 3 tests\n".into(),
            },
        );
        self.append(
            run,
            Some("test"),
            egress("allow", "files.example.test", None),
        );
        self.append(
            run,
            Some("test"),
            egress("deny", "evil.example.test", Some("not_allowed")),
        );
        self.append(
            run,
            Some("test"),
            Event::StepFinished {
                attempt: Attempt::FIRST,
                verdict: Verdict::Pass,
                exit_code: Some(0),
                reason: None,
                diff: None,
                output_omitted_bytes: None,
            },
        );
        self.append(
            run,
            None,
            Event::Route {
                from: StepName::parse("test").expect("name"),
                to: "success".into(),
                retry: false,
            },
        );
        self.append(
            run,
            None,
            Event::RunFinished {
                outcome: cordon_protocol::event::Outcome::Success,
                reason: "test passed".into(),
            },
        );
        run
    }
}

pub fn egress(decision: &str, host: &str, reason: Option<&str>) -> Event {
    let audit = AuditRecord {
        ts: "2026-01-31T12:00:00.000Z".into(),
        listener: "l1".into(),
        step: Some("test".into()),
        attempt: Some(1),
        proto: "connect".into(),
        raw_target: format!("{host}:443"),
        host: Some(host.into()),
        port: Some(443),
        resolved: vec![],
        dialed: None,
        decision: decision.into(),
        reason: reason.map(str::to_owned),
        bytes_up: 0,
        bytes_down: 0,
        duration_ms: 0,
        count: 1,
    };
    if decision == "allow" {
        Event::EgressAllow(audit)
    } else {
        Event::EgressDeny(audit)
    }
}

/// A request with the right Host and, when `auth`, the token cookie.
pub fn request(uri: &str, auth: bool) -> Request<Body> {
    let mut builder = Request::get(uri).header("host", HOST);
    if auth {
        builder = builder.header("cookie", format!("other=1; cordon_token_8321={TOKEN}"));
    }
    builder.body(Body::empty()).expect("request")
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

pub async fn send(app: axum::Router, request: Request<Body>) -> Reply {
    let response = app.oneshot(request).await.expect("infallible");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

pub async fn get(app: axum::Router, uri: &str) -> Reply {
    send(app, request(uri, true)).await
}

pub fn json(reply: &Reply) -> serde_json::Value {
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", reply.body))
}
