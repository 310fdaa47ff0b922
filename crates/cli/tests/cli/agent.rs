//! Agent pipelines through the binary: the offline example validates, and a plan needs no key.

use std::path::Path;

use crate::run::{Fixture, stderr};
use crate::support::cordon;

fn example() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fix-calculator")
}

#[test]
fn the_offline_example_pipeline_validates() {
    let out = cordon()
        .arg("validate")
        .arg(example().join("pipeline.yaml"))
        .output()
        .expect("cordon validate");
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("valid pipeline `fix-calculator` with 4 steps"),
        "{stdout}"
    );
}

#[test]
fn dry_run_of_an_agent_pipeline_needs_no_api_key() {
    let fixture = Fixture::new(
        "name: demo
llm: {provider: openai, model: gpt-test, api_key_env: CORDON_TEST_KEY_NOT_SET}
steps:
  - name: dev
    agent: dev
",
    );
    std::fs::create_dir(fixture.ws.join("agents")).expect("mkdir");
    std::fs::write(
        fixture.ws.join("agents/dev.agent.md"),
        "---\nname: dev\n---\nFix it.\n",
    )
    .expect("write");
    let out = fixture
        .cordon(&["run", "pipeline.yaml", "--dry-run"])
        .env_remove("CORDON_TEST_KEY_NOT_SET")
        .output()
        .expect("cordon run --dry-run");
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("key from $CORDON_TEST_KEY_NOT_SET (not read by --dry-run)"),
        "{stdout}"
    );
}
