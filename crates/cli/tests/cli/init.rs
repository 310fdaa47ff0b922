//! `cordon init`: a commented scaffold that validates, never overwriting a file.

use crate::support::cordon;
use crate::validate::transcript;

#[test]
fn init_writes_a_scaffold_that_validates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("demo");
    let out = transcript(cordon().arg("init").arg(&target), dir.path());
    insta::assert_snapshot!(out);
    let pipeline = std::fs::read_to_string(target.join("pipeline.yaml")).expect("pipeline.yaml");
    assert!(
        pipeline.contains("retry: true"),
        "the scaffold has a retry edge"
    );
    assert!(target.join("agents/dev.agent.md").is_file());
    let validate = cordon()
        .arg("validate")
        .arg(target.join("pipeline.yaml"))
        .output()
        .expect("run");
    assert_eq!(
        validate.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&validate.stderr)
    );
    assert!(validate.stderr.is_empty(), "the scaffold has no warnings");
}

#[test]
fn init_defaults_to_the_current_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = cordon()
        .arg("init")
        .current_dir(dir.path())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    assert!(dir.path().join("pipeline.yaml").is_file());
    assert!(dir.path().join("agents/dev.agent.md").is_file());
}

#[test]
fn init_never_overwrites_an_existing_file_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("agents")).expect("mkdir");
    std::fs::write(dir.path().join("agents/dev.agent.md"), "mine\n").expect("write");
    let out = transcript(cordon().arg("init").arg(dir.path()), dir.path());
    insta::assert_snapshot!(out);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("agents/dev.agent.md")).expect("read"),
        "mine\n"
    );
    assert!(
        !dir.path().join("pipeline.yaml").exists(),
        "nothing was written"
    );
}

#[test]
fn init_scaffold_names_no_real_registry_host() {
    let text = [
        include_str!("../../src/commands/init/pipeline.yaml"),
        include_str!("../../src/commands/init/dev.agent.md"),
    ]
    .concat();
    for word in text.split(|c: char| c.is_whitespace() || "[]{},\"'`".contains(c)) {
        let host = word
            .trim_start_matches("https://")
            .split('/')
            .next()
            .unwrap_or("");
        let public = [".com", ".org", ".net", ".io", ".dev"]
            .iter()
            .any(|tld| host.ends_with(tld));
        assert!(
            !public || host.ends_with("example.com"),
            "scaffold mentions `{host}`; use example.com or *.test names"
        );
    }
}
