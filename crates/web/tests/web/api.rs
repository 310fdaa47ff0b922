//! The JSON API and the pages' embedded snapshots.

use axum::http::StatusCode;
use cordon_protocol::event::Verdict;
use cordon_protocol::{Attempt, Event};

use crate::{Fixture, get, json};

#[tokio::test]
async fn runs_are_listed_newest_first_in_the_runs_json_shape() {
    let fx = Fixture::new();
    let done = fx.finished_run(1);
    let open = fx.run(2);
    let reply = get(fx.app(), "/api/runs").await;
    assert_eq!(reply.status, StatusCode::OK);
    let list = json(&reply);
    let ids: Vec<&str> = list
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(ids, [open.to_string(), done.to_string()]);
    let keys: Vec<&str> = list[0]
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        ["attempt", "finished", "id", "pipeline", "started", "status"]
    );
    assert_eq!(
        list[0]["status"], "interrupted",
        "nobody holds the unfinished run"
    );
    assert_eq!(list[1]["status"], "success");
    let _lock = fx.store.lock_run(open).expect("lock");
    assert_eq!(
        json(&get(fx.app(), "/api/runs").await)[0]["status"],
        "running",
        "held while the lock is"
    );
}

#[tokio::test]
async fn a_run_snapshot_has_each_steps_status_attempts_console_and_egress() {
    let fx = Fixture::new();
    let run = fx.finished_run(1);
    let view = json(&get(fx.app(), &format!("/api/runs/{run}")).await);
    assert_eq!(view["status"], "success");
    assert_eq!(view["last_seq"], 8);
    let step = &view["steps"][0];
    assert_eq!(
        (
            step["name"].as_str(),
            step["status"].as_str(),
            step["attempts"].as_u64()
        ),
        (Some("test"), Some("passed"), Some(1))
    );
    assert_eq!(step["console"]["text"], "\u{1b}[32mok\u{1b}[0m 3 tests\n");
    assert_eq!(view["graph"]["derived"], true);
    assert_eq!(view["graph"]["steps"][0]["on_pass"]["to"], "success");
    let egress: Vec<(String, String)> = view["egress"]
        .as_array()
        .expect("egress")
        .iter()
        .map(|r| {
            (
                r["decision"].as_str().unwrap_or("").to_owned(),
                r["target"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        egress,
        [
            ("allow".to_owned(), "files.example.test:443".to_owned()),
            ("deny".to_owned(), "evil.example.test:443".to_owned())
        ]
    );
}

#[tokio::test]
async fn an_unfinished_step_of_a_run_nobody_holds_is_pending_and_the_run_interrupted() {
    let fx = Fixture::new();
    let run = fx.run(1);
    fx.append(
        run,
        Some("dev"),
        Event::StepStarted {
            attempt: Attempt::FIRST,
        },
    );
    let view = json(&get(fx.app(), &format!("/api/runs/{run}")).await);
    assert_eq!(
        (view["status"].as_str(), view["steps"][0]["status"].as_str()),
        (Some("interrupted"), Some("pending"))
    );
    let _lock = fx.store.lock_run(run).expect("lock");
    let view = json(&get(fx.app(), &format!("/api/runs/{run}")).await);
    assert_eq!(
        (view["status"].as_str(), view["steps"][0]["status"].as_str()),
        (Some("running"), Some("running"))
    );
}

#[tokio::test]
async fn events_are_filtered_by_type_prefix_step_and_sequence() {
    let fx = Fixture::new();
    let run = fx.finished_run(1);
    fx.append(
        run,
        Some("dev"),
        Event::StepFinished {
            attempt: Attempt::FIRST,
            verdict: Verdict::Fail,
            exit_code: None,
            reason: None,
            diff: None,
            output_omitted_bytes: None,
        },
    );
    let seqs = |reply: &crate::Reply| -> Vec<u64> {
        json(reply)
            .as_array()
            .expect("array")
            .iter()
            .filter_map(|r| r["seq"].as_u64())
            .collect()
    };
    let cases: &[(&str, &[u64])] = &[
        ("", &[1, 2, 3, 4, 5, 6, 7, 8, 9]),
        ("?type=step", &[2, 3, 6, 9]),
        ("?type=step.finished", &[6, 9]),
        ("?type=egress.deny&type=route", &[5, 7]),
        ("?type=egress.deny,route", &[5, 7]),
        ("?type=ste", &[]),
        ("?step=dev", &[9]),
        ("?type=step&after=3", &[6, 9]),
        ("?after=7&limit=1", &[8]),
    ];
    for (query, expected) in cases {
        let reply = get(fx.app(), &format!("/api/runs/{run}/events{query}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{query}");
        assert_eq!(seqs(&reply), *expected, "{query}");
    }
    let first = &json(&get(fx.app(), &format!("/api/runs/{run}/events?limit=1")).await)[0];
    let keys: Vec<&str> = first
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["data", "run", "seq", "step", "ts", "type"]);
}

#[tokio::test]
async fn bad_query_values_are_400_naming_the_parameter() {
    let fx = Fixture::new();
    let run = fx.finished_run(1);
    for (query, needle) in [
        ("?after=x", "`after`"),
        ("?step=Bad%20Name", "`step`"),
        ("?limit=-1", "`limit`"),
    ] {
        let reply = get(fx.app(), &format!("/api/runs/{run}/events{query}")).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{query}");
        assert!(reply.body.contains(needle), "{query}: {}", reply.body);
    }
}

#[tokio::test]
async fn egress_lists_every_decision_with_its_reason() {
    let fx = Fixture::new();
    let run = fx.finished_run(1);
    let rows = json(&get(fx.app(), &format!("/api/runs/{run}/egress")).await);
    let got: Vec<(u64, &str, &str, Option<&str>)> = rows
        .as_array()
        .expect("array")
        .iter()
        .map(|r| {
            (
                r["seq"].as_u64().unwrap_or(0),
                r["event"].as_str().unwrap_or(""),
                r["host"].as_str().unwrap_or(""),
                r["reason"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (4, "allow", "files.example.test", None),
            (5, "deny", "evil.example.test", Some("not_allowed"))
        ]
    );
    assert_eq!(rows[0]["step"], "test");
}

#[tokio::test]
async fn an_unknown_run_is_404_on_every_route() {
    let fx = Fixture::new();
    fx.finished_run(1);
    for uri in [
        "/runs/zzzz",
        "/api/runs/zzzz",
        "/api/runs/zzzz/events",
        "/api/runs/zzzz/egress",
        "/api/runs/zzzz/stream",
        "/nowhere",
    ] {
        let reply = get(fx.app(), uri).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{uri}");
        assert!(
            json(&reply)["error"]
                .as_str()
                .is_some_and(|e| e.contains("cordon runs") || e.contains("runs are listed at /")),
            "{}",
            reply.body
        );
    }
}

#[tokio::test]
async fn a_run_page_embeds_its_snapshot_and_is_found_by_id_prefix() {
    let fx = Fixture::new();
    let run = fx.finished_run(1);
    fx.append(
        run,
        Some("test"),
        Event::StepOutput {
            stream: cordon_protocol::event::OutputStream::Stdout,
            text: "</script><b>x</b>".into(),
        },
    );
    let prefix = &run.to_string()[..8];
    let reply = get(fx.app(), &format!("/runs/{prefix}")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body.contains(&format!("data-run=\"{run}\"")));
    assert!(reply.body.contains("<script src=\"/assets/run.js\">"));
    assert!(
        !reply.body.contains("</script><b>"),
        "output cannot break out of the snapshot"
    );
    let start = reply.body.find("id=\"snapshot\">").expect("snapshot") + "id=\"snapshot\">".len();
    let end = start + reply.body[start..].find("</script>").expect("end");
    let snapshot: serde_json::Value =
        serde_json::from_str(&reply.body[start..end]).expect("snapshot JSON");
    assert_eq!(snapshot["view"]["steps"][0]["status"], "passed");
    assert_eq!(snapshot["log"].as_array().map(Vec::len), Some(9));
    let list = get(fx.app(), "/").await;
    assert!(list.body.contains(&run.to_string()) && list.body.contains("/assets/runs.js"));
    let js = get(fx.app(), "/assets/run.js").await;
    assert_eq!(
        js.headers.get("content-type").and_then(|v| v.to_str().ok()),
        Some("text/javascript; charset=utf-8")
    );
}

/// Ids and times replaced, so the snapshot shows only what the run did.
fn redact(text: &str, run: &str) -> String {
    let mut out = text.replace(run, "[run]");
    let mut i = 0;
    while i + 24 <= out.len() {
        match out
            .get(i..i + 24)
            .and_then(cordon_protocol::event::Timestamp::parse)
        {
            Some(_) => {
                out.replace_range(i..i + 24, "[ts]");
                i += 4;
            }
            None => i += 1,
        }
    }
    out
}

#[tokio::test]
async fn the_run_snapshot_reads_as_expected() {
    let fx = Fixture::new();
    let run = fx.finished_run(1);
    let view = json(&get(fx.app(), &format!("/api/runs/{run}")).await);
    let text = serde_json::to_string_pretty(&view).expect("json");
    insta::assert_snapshot!(redact(&text, &run.to_string()));
}

#[tokio::test]
async fn each_attempt_has_its_conversation_and_its_diff_is_served_as_text_but_no_other_blob() {
    use cordon_protocol::event::{LlmSource, OutputStream};
    let fx = Fixture::new();
    let run = fx.run(9);
    let patch = b"diff --git a/x b/x\n+<script>alert(1)</script>\n".to_vec();
    let diff = fx.store.put_blob(run, &patch).expect("blob");
    let other = fx
        .store
        .put_blob(run, b"a step's stored output")
        .expect("blob");
    for event in [
        Event::StepStarted {
            attempt: Attempt::FIRST,
        },
        Event::LlmRequest {
            model: "m".into(),
            source: LlmSource::Agent,
            task: Some("Fix the bug.".into()),
        },
        Event::LlmResponse {
            model: "m".into(),
            input_tokens: 10,
            output_tokens: 2,
            latency_ms: 1,
            source: LlmSource::Agent,
            estimated: Some(true),
        },
        Event::StepOutput {
            stream: OutputStream::Stdout,
            text: "Looking at it.\n".into(),
        },
        Event::ToolCall {
            id: "c1".into(),
            name: "bash".into(),
            arguments: serde_json::json!({"command": "pytest"}),
            server: None,
        },
        Event::ToolResult {
            id: "c1".into(),
            ok: false,
            interrupted: None,
            output: "1 failed".into(),
        },
        // An MCP server's tool is a call like any other.
        Event::ToolCall {
            id: "c2".into(),
            name: "tickets__read_ticket".into(),
            arguments: serde_json::json!({"id": "T-7"}),
            server: Some("tickets".into()),
        },
        Event::ToolResult {
            id: "c2".into(),
            ok: true,
            interrupted: None,
            output: "T-7: greet forgets punctuation".into(),
        },
        Event::StepFinished {
            attempt: Attempt::FIRST,
            verdict: Verdict::Fail,
            exit_code: None,
            reason: Some("tests fail".into()),
            diff: Some(diff),
            output_omitted_bytes: None,
        },
    ] {
        fx.append(run, Some("dev"), event);
    }
    let view = json(&get(fx.app(), &format!("/api/runs/{run}")).await);
    let attempt = &view["attempts"]["list"][0];
    assert_eq!(
        (attempt["step"].as_str(), attempt["n"].as_u64()),
        (Some("dev"), Some(1))
    );
    assert_eq!(attempt["task"], "Fix the bug.");
    let turn = &attempt["turns"][0];
    assert_eq!(
        (
            turn["tokens_in"].as_u64(),
            turn["estimated"].as_bool(),
            turn["text"].as_str()
        ),
        (Some(10), Some(true), Some("Looking at it."))
    );
    assert_eq!(turn["calls"][0]["name"], "bash");
    assert_eq!(turn["calls"][0]["result"], "1 failed");
    assert_eq!(turn["calls"][0]["ok"], false);
    assert_eq!(turn["calls"][1]["name"], "tickets__read_ticket");
    assert_eq!(turn["calls"][1]["result"], "T-7: greet forgets punctuation");
    assert_eq!(attempt["diff"], diff.0);

    let reply = get(fx.app(), &format!("/api/runs/{run}/diffs/{}", diff.0)).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body.as_bytes(), patch.as_slice());
    assert_eq!(
        reply.headers["content-type"].to_str().ok(),
        Some("text/plain; charset=utf-8"),
        "never HTML"
    );
    assert_eq!(
        reply.headers["x-content-type-options"].to_str().ok(),
        Some("nosniff")
    );
    // The control: a blob of the run that is not a recorded diff, and nonsense, are not served.
    for blob in [other.0.to_string(), "x".to_owned(), "99999".to_owned()] {
        let reply = get(fx.app(), &format!("/api/runs/{run}/diffs/{blob}")).await;
        assert_eq!(
            reply.status,
            StatusCode::NOT_FOUND,
            "{blob}: {}",
            reply.body
        );
    }
}

#[test]
fn only_the_latest_attempts_are_kept_and_the_rest_counted() {
    use cordon_web::view::attempts::{Attempts, MAX_ATTEMPTS};
    let mut attempts = Attempts::default();
    for n in 1..=(MAX_ATTEMPTS as u32 + 3) {
        let record = cordon_protocol::Record {
            run: cordon_protocol::RunId::from_u128(1),
            seq: u64::from(n),
            ts: cordon_protocol::event::Timestamp(0),
            step: cordon_protocol::StepName::parse("s").ok(),
            event: Event::StepStarted {
                attempt: Attempt::FIRST,
            },
        };
        attempts.apply(&record, n, 1);
    }
    assert_eq!(attempts.list.len(), MAX_ATTEMPTS);
    assert_eq!(attempts.omitted, 3);
    assert_eq!(attempts.list[0].n, 4);
}
