//! `cordon runs`: every run with its status, plain or as Appendix A's JSON lines.

use crate::run::{Fixture, stderr};

#[test]
fn runs_json_has_the_contract_shape() {
    let f = Fixture::new("name: demo\nsteps:\n  - {name: a, command: 'true'}\n");
    let out = f.cordon(&["runs", "--json"]).output().expect("runs");
    assert_eq!(
        (out.status.code(), out.stdout.len()),
        (Some(0), 0),
        "no runs yet: {}",
        stderr(&out)
    );
    assert_eq!(f.run(&[]).status.code(), Some(0));
    let out = f.cordon(&["runs", "--json"]).output().expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let value: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON line");
    let mut keys: Vec<&str> = value
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["attempt", "finished", "id", "pipeline", "started", "status"]
    );
    assert_eq!(
        (
            value["pipeline"].as_str(),
            value["status"].as_str(),
            value["attempt"].as_u64()
        ),
        (Some("demo"), Some("success"), Some(1))
    );
    assert!(value["finished"].is_string() && value["started"].is_string());
}
