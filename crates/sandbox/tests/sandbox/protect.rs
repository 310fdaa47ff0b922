//! Protected workspace entries (`SessionConfig::protect`, a run's tooling files): read-only mount
//! points over the workspace that the sandbox can neither change, delete nor carry away.

use std::path::Path;

use cordon_sandbox::{Session, SessionConfig};

use crate::support::*;

/// Every way of changing `agents/x.agent.md` and `pipeline.yaml`, one marker per success, then the
/// control: writing an unprotected sibling.
const PROBES: &str = "\
    (echo x >> agents/x.agent.md) 2>/dev/null && echo appended; \
    (true > agents/x.agent.md) 2>/dev/null && echo truncated; \
    (echo x >> pipeline.yaml) 2>/dev/null && echo appended-root; \
    mv agents agents2 2>/dev/null && echo moved-parent && mv agents2 agents; \
    mv agents/x.agent.md agents/y 2>/dev/null && echo renamed && mv agents/y agents/x.agent.md; \
    echo n > agents/new && mv agents/new agents/x.agent.md 2>/dev/null && echo replaced; \
    rm pipeline.yaml 2>/dev/null && echo deleted-root; \
    rm agents/x.agent.md 2>/dev/null && echo deleted; \
    (echo y >> agents/other) 2>/dev/null && echo sibling-written";

fn tooling_workspace() -> tempfile::TempDir {
    let ws = workspace();
    std::fs::create_dir(ws.path().join("agents")).expect("mkdir");
    for (file, text) in [
        ("pipeline.yaml", "steps: []\n"),
        ("agents/x.agent.md", "agent\n"),
        ("agents/other", "o\n"),
    ] {
        std::fs::write(ws.path().join(file), text).expect("write");
    }
    ws
}

fn protecting(ws: &Path, paths: &[&str]) -> SessionConfig {
    let mut config = config(ws);
    config.protect = paths.iter().map(Into::into).collect();
    config
}

fn probe(config: SessionConfig) -> String {
    let mut session = Session::open(config).expect("the session opens");
    let out = stdout(&sh(&mut session, PROBES));
    session.close();
    out
}

#[test]
fn protected_files_cannot_be_written_truncated_deleted_renamed_or_moved_with_their_directory() {
    let ws = tooling_workspace();
    let out = probe(protecting(
        ws.path(),
        &["pipeline.yaml", "agents/x.agent.md"],
    ));
    // The sibling is the control: the workspace itself stays writable.
    assert_eq!(out, "sibling-written\n", "{out}");
    let read = |file: &str| std::fs::read_to_string(ws.path().join(file)).expect("read");
    assert_eq!(read("pipeline.yaml"), "steps: []\n");
    assert_eq!(read("agents/x.agent.md"), "agent\n");
    assert_eq!(read("agents/other"), "o\ny\n");
    assert!(!ws.path().join("agents2").exists() && !ws.path().join("agents/y").exists());
}

#[test]
fn without_protection_the_same_probes_change_every_file() {
    // The control for the test above: each probe does succeed when the files are not protected.
    let ws = tooling_workspace();
    let out = probe(config(ws.path()));
    assert_eq!(
        out,
        "appended\ntruncated\nappended-root\nmoved-parent\nrenamed\nreplaced\ndeleted-root\n\
         deleted\nsibling-written\n",
        "{out}"
    );
    assert!(!ws.path().join("pipeline.yaml").exists());
}

#[test]
fn a_protected_path_that_does_not_exist_is_skipped() {
    let ws = tooling_workspace();
    let mut session =
        Session::open(protecting(ws.path(), &["missing.md", "pipeline.yaml"])).expect("opens");
    let out = stdout(&sh(
        &mut session,
        "(echo x >> pipeline.yaml) 2>/dev/null || echo refused",
    ));
    assert_eq!(out, "refused\n", "{out}");
}

#[test]
fn a_protected_path_through_a_symlink_is_refused_since_the_link_could_be_repointed() {
    let ws = tooling_workspace();
    std::os::unix::fs::symlink("agents", ws.path().join("linked")).expect("symlink");
    let err = Session::open(protecting(ws.path(), &["linked/x.agent.md"]))
        .err()
        .expect("the session is refused");
    let text = err.to_string();
    assert!(
        text.contains("linked/x.agent.md") && text.contains("symbolic link"),
        "{text}"
    );
    // The control: the real path is accepted.
    Session::open(protecting(ws.path(), &["agents/x.agent.md"])).expect("opens");
}

#[test]
fn a_protected_path_outside_the_workspace_is_refused() {
    let ws = tooling_workspace();
    for path in ["../escape", "/etc/passwd"] {
        let err = Session::open(protecting(ws.path(), &[path]))
            .err()
            .expect("the session is refused");
        let text = err.to_string();
        assert!(text.contains("inside the workspace"), "{path}: {text}");
    }
}
