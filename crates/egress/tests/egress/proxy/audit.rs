//! The JSON-lines audit file: created 0600, appended, exactly the Appendix A fields; and a sink
//! that fails keeps the connection from being made.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use cordon_egress::proxy::{
    AuditDecision, AuditKind, AuditRecord, AuditSink, JsonLinesSink, Proto,
};

use super::{Answer, Records, Setup, Upstream, exchange, read_to_close};

fn record(reason: Option<&'static str>) -> AuditRecord {
    AuditRecord {
        ts: "2026-01-31T12:00:00.123Z".to_owned(),
        listener: "session-1".to_owned(),
        step: Some("build".to_owned()),
        attempt: Some(1),
        proto: Proto::Connect,
        raw_target: "example.test:443".to_owned(),
        host: Some("example.test".to_owned()),
        port: Some(443),
        resolved: vec!["192.0.2.1".to_owned()],
        dialed: None,
        decision: if reason.is_some() {
            AuditDecision::Deny
        } else {
            AuditDecision::Allow
        },
        reason,
        bytes_up: 0,
        bytes_down: 0,
        duration_ms: 3,
        count: 1,
    }
}

#[test]
fn the_audit_file_is_created_0600_and_appended_with_the_contract_fields() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    std::fs::write(&path, "earlier line\n").unwrap();
    std::fs::remove_file(&path).unwrap();
    let sink = JsonLinesSink::open(&path, usize::MAX).unwrap();
    sink.record(AuditKind::Decision, &record(Some("private_address")))
        .unwrap();
    drop(sink);
    // A second sink appends; it does not truncate.
    let sink = JsonLinesSink::open(&path, usize::MAX).unwrap();
    sink.record(AuditKind::Decision, &record(None)).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        lines[0],
        r#"{"ts":"2026-01-31T12:00:00.123Z","listener":"session-1","step":"build","attempt":1,"proto":"connect","raw_target":"example.test:443","host":"example.test","port":443,"resolved":["192.0.2.1"],"dialed":null,"decision":"deny","reason":"private_address","bytes_up":0,"bytes_down":0,"duration_ms":3,"count":1}"#
    );
    assert!(
        lines[1].contains(r#""decision":"allow","reason":null"#),
        "{}",
        lines[1]
    );
}

#[test]
fn an_unwritable_audit_path_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let error =
        JsonLinesSink::open(&dir.path().join("missing/audit.jsonl"), usize::MAX).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
}

/// A sink whose disk is full.
struct Failing;

impl AuditSink for Failing {
    fn record(&self, _kind: AuditKind, _record: &AuditRecord) -> std::io::Result<()> {
        Err(std::io::Error::other("no space left on the audit device"))
    }
}

#[tokio::test]
async fn a_connection_that_cannot_be_audited_is_not_made() {
    let upstream = Upstream::start(Answer::Echo).await;
    let port = upstream.port();
    let setup = || Setup::new().upstream(port);
    let request = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nforwarded?");
    let running = setup()
        .start_auditing(Arc::new(Failing), Arc::new(Records::default()))
        .await;
    let mut client = running.client().await;
    tokio::io::AsyncWriteExt::write_all(&mut client, request.as_bytes())
        .await
        .unwrap();
    // No 200 and no byte forwarded: the connection just closes.
    assert_eq!(read_to_close(&mut client).await, b"");
    // Control: with a working sink the same request tunnels.
    let running = setup().start().await;
    let (_client, response) = exchange(&running, &request).await;
    assert_eq!(response.status, 200);
    assert_eq!(running.records.wait_for(1).await.len(), 1);
}
