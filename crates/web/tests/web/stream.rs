//! The event stream: ids are sequence numbers, `Last-Event-ID` resumes, a live run is followed.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use cordon_protocol::event::OutputStream;
use cordon_protocol::{Attempt, Event};
use http_body_util::BodyExt as _;
use tower::ServiceExt as _;

use crate::{Fixture, HOST, TOKEN, get};

/// One parsed SSE message: (event type, id, data).
type Message = (String, Option<String>, String);

fn parse(text: &str) -> Vec<Message> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty() && !block.starts_with(':'))
        .map(|block| {
            let (mut kind, mut id, mut data) = ("message".to_owned(), None, String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    kind = v.to_owned();
                } else if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push_str(v);
                }
            }
            (kind, id, data)
        })
        .collect()
}

fn ids(messages: &[Message]) -> Vec<u64> {
    messages
        .iter()
        .filter(|m| m.0 == "message")
        .filter_map(|m| m.1.as_deref()?.parse().ok())
        .collect()
}

fn stream_request(uri: &str, last_event_id: Option<&str>) -> Request<Body> {
    let mut builder = Request::get(uri)
        .header("host", HOST)
        .header("cookie", format!("cordon_token_8321={TOKEN}"));
    if let Some(id) = last_event_id {
        builder = builder.header("last-event-id", id);
    }
    builder.body(Body::empty()).expect("request")
}

#[tokio::test]
async fn a_finished_run_streams_every_event_with_its_sequence_as_id_then_ends() {
    let fx = Fixture::new();
    let run = fx.finished_run(1);
    let reply = get(fx.app(), &format!("/api/runs/{run}/stream")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    let messages = parse(&reply.body);
    assert_eq!(ids(&messages), [1, 2, 3, 4, 5, 6, 7, 8]);
    let first: serde_json::Value = serde_json::from_str(&messages[0].2).expect("json line");
    assert_eq!(
        (first["seq"].as_u64(), first["type"].as_str()),
        (Some(1), Some("run.started"))
    );
    let kinds: Vec<&str> = messages
        .iter()
        .filter(|m| m.0 != "message")
        .map(|m| m.0.as_str())
        .collect();
    assert_eq!(kinds, ["status", "end"]);
}

#[tokio::test]
async fn reconnecting_with_last_event_id_sends_only_what_was_missed() {
    let fx = Fixture::new();
    let run = fx.finished_run(1);
    let uri = format!("/api/runs/{run}/stream");
    for (last, expected) in [
        (Some("5"), vec![6, 7, 8]),
        (Some("8"), vec![]),
        (Some(" "), vec![1, 2, 3, 4, 5, 6, 7, 8]),
        (None, vec![1, 2, 3, 4, 5, 6, 7, 8]),
    ] {
        let reply = crate::send(fx.app(), stream_request(&uri, last)).await;
        let messages = parse(&reply.body);
        assert_eq!(ids(&messages), expected, "{last:?}");
        assert_eq!(
            messages.last().map(|m| m.0.as_str()),
            Some("end"),
            "{last:?}"
        );
    }
    // `?after=` does the same for a first connection; the header wins when both are given.
    let reply = crate::send(fx.app(), stream_request(&format!("{uri}?after=6"), None)).await;
    assert_eq!(ids(&parse(&reply.body)), [7, 8]);
    let reply = crate::send(
        fx.app(),
        stream_request(&format!("{uri}?after=6"), Some("7")),
    )
    .await;
    assert_eq!(ids(&parse(&reply.body)), [8]);
    let reply = crate::send(fx.app(), stream_request(&uri, Some("x"))).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
}

/// Reads the stream until `done` says so; bounded by a generous deadline so a broken stream
/// fails the test instead of hanging it (no timing is asserted).
async fn read_until(body: &mut Body, seen: &mut String, done: impl Fn(&[Message]) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done(&parse(seen)) {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .expect("the stream stalled")
            .expect("stream ended")
            .expect("frame");
        if let Ok(data) = frame.into_data() {
            seen.push_str(&String::from_utf8_lossy(&data));
        }
    }
}

#[tokio::test]
async fn a_held_run_is_followed_as_events_are_appended() {
    let fx = Fixture::new();
    let run = fx.run(1);
    let lock = fx.store.lock_run(run).expect("lock");
    fx.append(
        run,
        Some("dev"),
        Event::StepStarted {
            attempt: Attempt::FIRST,
        },
    );
    let response = fx
        .app()
        .oneshot(stream_request(&format!("/api/runs/{run}/stream"), None))
        .await
        .expect("response");
    let mut body = response.into_body();
    let mut seen = String::new();
    read_until(&mut body, &mut seen, |m| m.iter().any(|m| m.0 == "status")).await;
    let status = parse(&seen)
        .into_iter()
        .find(|m| m.0 == "status")
        .expect("status");
    assert!(
        status.2.contains("\"held\":true") && status.2.contains("\"running\""),
        "{}",
        status.2
    );
    assert_eq!(ids(&parse(&seen)), [1, 2]);
    fx.append(
        run,
        Some("dev"),
        Event::StepOutput {
            stream: OutputStream::Stdout,
            text: "working\n".into(),
        },
    );
    read_until(&mut body, &mut seen, |m| ids(m).contains(&3)).await;
    drop(lock);
    read_until(&mut body, &mut seen, |m| {
        m.iter().filter(|m| m.0 == "status").count() == 2
    })
    .await;
    let last = parse(&seen)
        .into_iter()
        .rfind(|m| m.0 == "status")
        .expect("status");
    assert!(
        last.2.contains("\"interrupted\""),
        "released without finishing: {}",
        last.2
    );
}

#[tokio::test]
async fn streams_beyond_the_limit_are_refused_with_503() {
    let fx = Fixture::new();
    let run = fx.run(1);
    let _lock = fx.store.lock_run(run).expect("lock");
    let app = fx.app();
    let uri = format!("/api/runs/{run}/stream");
    let mut open = Vec::new();
    for _ in 0..cordon_web::MAX_STREAMS {
        let response = app
            .clone()
            .oneshot(stream_request(&uri, None))
            .await
            .expect("response");
        assert_eq!(response.status(), StatusCode::OK);
        open.push(response);
    }
    let refused = app
        .clone()
        .oneshot(stream_request(&uri, None))
        .await
        .expect("response");
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    open.pop();
    let again = app
        .clone()
        .oneshot(stream_request(&uri, None))
        .await
        .expect("response");
    assert_eq!(
        again.status(),
        StatusCode::OK,
        "a closed stream frees its place"
    );
}
