//! `--help` of `cordon` and of the pipeline commands, as a user reads them.

use crate::support::cordon;

fn help(args: &[&str]) -> String {
    let out = cordon()
        .args(args)
        .arg("--help")
        .env("COLUMNS", "100")
        .output()
        .expect("run cordon");
    assert_eq!(out.status.code(), Some(0));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn cordon_help_lists_every_command() {
    insta::assert_snapshot!("cordon_help", help(&[]));
}

#[test]
fn run_help_documents_dry_run_and_workspace() {
    // `--store` is listed only by a build that has the PostgreSQL store.
    let name = if cfg!(feature = "scale-out") {
        "run_help"
    } else {
        "run_help_without_scale_out"
    };
    insta::assert_snapshot!(name, help(&["run"]));
}

#[test]
fn validate_help_documents_the_pipeline_argument() {
    insta::assert_snapshot!("validate_help", help(&["validate"]));
}

#[test]
fn init_help_documents_the_directory() {
    insta::assert_snapshot!("init_help", help(&["init"]));
}

#[test]
fn version_is_printed() {
    let out = cordon().arg("--version").output().expect("run cordon");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("cordon {}\n", env!("CARGO_PKG_VERSION"))
    );
}
