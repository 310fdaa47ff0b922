//! `cordon validate`: exit 0 for a valid pipeline (warnings on stderr), 2 with every problem.

use std::path::Path;
use std::process::Command;

use crate::support::cordon;

/// Runs `cmd` and renders its exit status, stdout and stderr with `dir` shown as `[DIR]`, for
/// snapshots. Shared by the pipeline command tests.
pub fn transcript(cmd: &mut Command, dir: &Path) -> String {
    let output = cmd.output().expect("run cordon");
    let mut text = format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        output
            .status
            .code()
            .map_or_else(|| "signal".to_owned(), |c| c.to_string()),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    let canonical = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    for path in [canonical.as_path(), dir] {
        text = text.replace(&path.display().to_string(), "[DIR]");
    }
    text
}

fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(path, text).expect("write");
}

#[test]
fn validate_reports_every_problem_with_line_and_column_and_exits_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "pipeline.yaml",
        "name: broken\nllm: {provider: openai}\nsteps:\n  - name: dev\n    agent: dev\n    tiemout: 5\n  - name: test\n    command: make test\n    network: {allow: [10.0.0.1]}\n    on_fail: dev\n",
    );
    let out = transcript(
        cordon()
            .arg("validate")
            .arg(dir.path().join("pipeline.yaml")),
        dir.path(),
    );
    insta::assert_snapshot!(out);
}

#[test]
fn validate_accepts_a_valid_pipeline_and_prints_warnings() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "pipeline.yaml",
        "name: open\nsteps:\n  - {name: fetch, command: make fetch, network: open}\n",
    );
    let out = transcript(
        cordon()
            .arg("validate")
            .arg(dir.path().join("pipeline.yaml")),
        dir.path(),
    );
    insta::assert_snapshot!(out);
}

#[test]
fn validate_names_a_missing_pipeline_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = transcript(
        cordon().arg("validate").arg(dir.path().join("nope.yaml")),
        dir.path(),
    );
    insta::assert_snapshot!(out);
}

#[test]
fn validate_reports_malformed_yaml_at_the_parsers_location() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "pipeline.yaml", "name: x\nsteps: [\n");
    let out = transcript(
        cordon()
            .arg("validate")
            .arg("pipeline.yaml")
            .current_dir(dir.path()),
        dir.path(),
    );
    insta::assert_snapshot!(out);
}

#[test]
fn validate_without_a_pipeline_is_a_usage_error() {
    let out = cordon().arg("validate").output().expect("run cordon");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("<PIPELINE>"));
}

#[test]
fn validate_refuses_a_fifo_and_a_device_without_blocking() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("pipeline.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    for path in [fifo.as_path(), std::path::Path::new("/dev/zero")] {
        let out = crate::support::cordon()
            .arg("validate")
            .arg(path)
            .output()
            .expect("cordon validate");
        assert_eq!(out.status.code(), Some(2));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("it is not a regular file"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
