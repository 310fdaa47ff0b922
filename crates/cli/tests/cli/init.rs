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

#[test]
fn init_outcome_writes_an_outcome_pipeline_and_five_agents_that_validate_and_plan() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = cordon()
        .args(["init", "--outcome", "."])
        .current_dir(dir.path())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    for file in [
        "outcome.yaml",
        "agents/decompose.agent.md",
        "agents/planner.agent.md",
        "agents/dev.agent.md",
        "agents/critic.agent.md",
        "agents/validator.agent.md",
    ] {
        assert!(dir.path().join(file).is_file(), "{file}");
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("cordon do \""), "{stdout}");
    let validate = cordon()
        .args(["validate", "outcome.yaml"])
        .current_dir(dir.path())
        .output()
        .expect("run");
    assert_eq!(validate.status.code(), Some(0));
    assert!(validate.stderr.is_empty(), "no warnings");
    assert!(
        String::from_utf8_lossy(&validate.stdout)
            .contains("valid outcome pipeline `outcome-loop` with 5 phases and 1 verify command"),
        "{}",
        String::from_utf8_lossy(&validate.stdout)
    );
    // A second init refuses before writing anything.
    let again = cordon()
        .args(["init", "--outcome", "."])
        .current_dir(dir.path())
        .output()
        .expect("run");
    assert_eq!(again.status.code(), Some(2));
    // Its plan names every phase.
    crate::run::git(dir.path(), &["init", "-q"]);
    crate::run::git(dir.path(), &["add", "-A"]);
    crate::run::git(dir.path(), &["commit", "-qm", "init"]);
    let plan = cordon()
        .args(["run", "outcome.yaml", "--dry-run"])
        .current_dir(dir.path())
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&plan.stdout);
    for phase in ["decompose", "plan", "execute", "scrutinize", "validate"] {
        assert!(text.contains(&format!(". {phase}  (agent `")), "{text}");
    }
    assert!(text.contains("sh -c make test"), "{text}");
}
