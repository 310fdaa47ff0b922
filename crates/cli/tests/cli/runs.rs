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
        [
            "attempt",
            "cost_usd",
            "finished",
            "id",
            "kind",
            "pipeline",
            "started",
            "status",
            "tokens_in",
            "tokens_out"
        ]
    );
    assert_eq!(value["kind"], "steps");
    assert_eq!(
        (value["tokens_in"].as_u64(), value["tokens_out"].as_u64()),
        (Some(0), Some(0))
    );
    assert!(value["cost_usd"].is_null(), "no pricing: null");
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

#[test]
fn a_closed_stdout_ends_every_listing_command_quietly_with_status_0() {
    let f = crate::run::Fixture::new(
        "name: demo\nisolation:\n  caches: [pip]\nsteps:\n  - name: build\n    command: [sh, -c, 'for i in $(seq 2000); do echo line $i; done; seq 2000 > out.txt']\n",
    );
    let out = f.run(&["--no-ui"]);
    assert_eq!(out.status.code(), Some(0), "{}", crate::run::stderr(&out));
    for args in [
        &["runs"][..],
        &["runs", "--json"],
        &["logs", "--last"],
        &["diff"],
        &["diff", "--stat"],
        &["cache", "ls"],
    ] {
        // The reader is gone before the command writes a byte: every write fails with EPIPE.
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let out = f
            .cordon(args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("cordon");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            crate::run::stderr(&out)
        );
        assert_eq!(crate::run::stderr(&out), "", "{args:?}");
    }
    // `policy` takes no state directory.
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = crate::support::cordon()
        .args(["policy", "pipeline.yaml"])
        .current_dir(&f.ws)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("cordon policy");
    assert_eq!(out.status.code(), Some(0), "{}", crate::run::stderr(&out));
    assert_eq!(crate::run::stderr(&out), "");
}
