//! `cordon logs`: a run's events, filtered by type prefix and step, plain or JSON.

use crate::run::{Fixture, stderr};

const PIPELINE: &str = "name: demo\nsteps:\n  - {name: build, command: 'echo compiled'}\n  - {name: test, command: 'echo ok'}\n";

fn lines(f: &Fixture, args: &[&str]) -> Vec<String> {
    let mut all = vec!["logs"];
    all.extend_from_slice(args);
    let out = f.cordon(&all).output().expect("logs");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn types(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("json")["type"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

#[test]
fn logs_filter_by_type_prefix_and_step() {
    let f = Fixture::new(PIPELINE);
    assert_eq!(f.run(&[]).status.code(), Some(0));
    let step_types = types(&lines(&f, &["--json", "--type", "step", "--step", "test"]));
    assert_eq!(step_types, ["step.started", "step.output", "step.finished"]);
    let run_types = types(&lines(
        &f,
        &["--last", "--json", "--type", "run", "--type", "route"],
    ));
    assert_eq!(run_types, ["run.started", "route", "route", "run.finished"]);
    assert!(
        types(&lines(&f, &["--json", "--type", "ste"])).is_empty(),
        "a prefix matches whole dotted parts only"
    );
    let plain = lines(&f, &["--type", "step.output"]);
    assert_eq!(plain.len(), 2);
    assert!(
        plain[0].ends_with("step.output       build        out: compiled"),
        "{}",
        plain[0]
    );
}

#[test]
fn logs_follow_of_a_finished_run_prints_everything_and_exits() {
    let f = Fixture::new(PIPELINE);
    assert_eq!(f.run(&[]).status.code(), Some(0));
    let all = lines(&f, &["--json"]);
    assert_eq!(lines(&f, &["--json", "--follow"]), all);
}

#[test]
fn logs_of_an_unknown_run_or_an_empty_state_dir_exit_2() {
    let f = Fixture::new(PIPELINE);
    let out = f.cordon(&["logs"]).output().expect("logs");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("there are no runs in"),
        "{}",
        stderr(&out)
    );
    assert_eq!(f.run(&[]).status.code(), Some(0));
    let out = f.cordon(&["logs", "zzzz"]).output().expect("logs");
    assert_eq!(
        (out.status.code(), stderr(&out)),
        (
            Some(2),
            "cordon: no run matches `zzzz`; list the runs with `cordon runs`\n".to_owned()
        )
    );
}

#[test]
fn a_corrupt_database_is_named_with_the_fix_not_a_panic() {
    let f = Fixture::new(PIPELINE);
    assert_eq!(f.run(&[]).status.code(), Some(0));
    let db = f.state.join("cordon.db");
    let _ = std::fs::remove_file(f.state.join("cordon.db-wal"));
    let _ = std::fs::remove_file(f.state.join("cordon.db-shm"));
    std::fs::write(&db, vec![0x42; 4096]).expect("overwrite");
    for args in [&["logs"][..], &["runs"][..], &["run", "pipeline.yaml"][..]] {
        let out = f.cordon(args).output().expect("cordon");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!("the state database `{}` is damaged", db.display()))
                && err.contains("move it aside"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}
