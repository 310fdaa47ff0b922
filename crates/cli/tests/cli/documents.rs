//! Run documents (DESIGN §17): `--context FILE` and `--plan FILE` reach every agent step's task
//! message, are recorded in `run.started{context}` and kept through a resume (the files on disk
//! changed meanwhile); the plan is marked done after a success — inside the run's commit when the
//! commit is its last step — and not after a failure. Judged by what the scripted provider
//! received, the events, the work tree and git.

use crate::agent_run::{chat, events, openai_server, with_agent};
use crate::run::{Fixture, git, stderr};

fn llm(url: &str) -> String {
    format!("{{provider: openai, model: m, base_url: '{url}', api_key_env: CORDON_E2E_KEY}}")
}

/// A pipeline of `steps` (YAML list items) with the agent `dev`, `extra` files committed.
fn fixture(url: &str, steps: &str, extra: &[(&str, &str)]) -> Fixture {
    with_agent(
        &format!("name: docs\nllm: {}\nsteps:\n{steps}", llm(url)),
        "---\nname: dev\n---\nDo the task.\n",
        extra,
    )
}

const AGENT: &str = "  - {name: dev, agent: dev, timeout: 120}\n";
const PLAN: &str = "# Rename plan\nStatus: in progress\n\n- rename calc to calc2\n";

fn run(f: &Fixture, args: &[&str]) -> std::process::Output {
    let mut all = vec!["run", "--no-ui"];
    all.extend_from_slice(args);
    f.cordon(&all)
        .env("CORDON_E2E_KEY", "sk-test")
        .output()
        .expect("cordon run")
}

#[test]
fn context_documents_reach_every_agent_task_and_a_resume_keeps_the_ones_it_started_with() {
    // dev's call spends the token budget, which leaves its attempt open; the resumed run makes
    // it again, then review's.
    let (url, seen) = openai_server(vec![
        chat(Some("working"), &[]),
        chat(Some("done"), &[]),
        chat(Some("done"), &[]),
    ]);
    let f = fixture(
        &url,
        &format!("{AGENT}  - {{name: review, agent: dev, timeout: 120}}\n"),
        &[],
    );
    let notes = tempfile::tempdir().expect("tempdir");
    let design = notes.path().join("design.md");
    std::fs::write(&design, "DESIGN-MARKER keep the API stable").expect("write");
    std::fs::write(f.ws.join("style.md"), "STYLE-MARKER short names").expect("write");
    let design_arg = design.display().to_string();
    let out = run(
        &f,
        &[
            "--context",
            &design_arg,
            "--context",
            "style.md",
            "--budget-tokens",
            "5",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let started = events(&f)
        .into_iter()
        .find(|e| e["type"] == "run.started")
        .expect("run.started");
    let context = started["data"]["context"].as_array().expect("context");
    let paths: Vec<&str> = context.iter().filter_map(|d| d["path"].as_str()).collect();
    assert_eq!(paths, [design_arg.as_str(), "style.md"]);
    assert!(
        context
            .iter()
            .all(|d| d["blob"].is_u64() && d.get("plan").is_none())
    );

    // The files change on disk; the resumed run still gives the text it started with.
    std::fs::write(&design, "CHANGED-MARKER").expect("write");
    let refused = run(&f, &["--resume-last", "--context", "style.md"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("keeps the documents it started with"),
        "{}",
        stderr(&refused)
    );
    let out = run(&f, &["--resume-last", "--budget-tokens", "1000"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let requests = seen.lock().expect("lock").clone();
    // dev's before the stop, dev's and review's after the resume: each holds both documents
    // as they were at the start.
    assert_eq!(requests.len(), 3, "{requests:?}");
    for request in &requests {
        assert!(
            request.contains("DESIGN-MARKER keep the API stable")
                && request.contains("STYLE-MARKER short names")
                && !request.contains("CHANGED-MARKER"),
            "{request}"
        );
    }
}

#[test]
fn context_files_are_read_without_a_link_within_their_bounds() {
    let f = fixture("http://127.0.0.1:9/v1", AGENT, &[]);
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("secret"), "the user's key").expect("write");
    std::os::unix::fs::symlink(outside.path().join("secret"), f.ws.join("notes.md")).expect("link");
    std::os::unix::fs::symlink(outside.path(), f.ws.join("linkdir")).expect("link");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--context".into(), "notes.md".into()],
            "--context notes.md:",
        ),
        (
            vec!["--context".into(), "linkdir/secret".into()],
            "--context linkdir/secret: cannot open its directory",
        ),
        (
            vec!["--context".into(), "absent.md".into()],
            "--context absent.md: does not exist",
        ),
        (
            std::iter::repeat_n(["--context".to_owned(), "pipeline.yaml".to_owned()], 17)
                .flatten()
                .collect(),
            "a run takes at most 16 documents (--context and --plan together), 17 were given",
        ),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&f, &args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("the user's key"), "{err}");
    }
    std::fs::remove_file(f.ws.join("notes.md")).expect("rm");
    std::fs::write(f.ws.join("notes.md"), vec![b'a'; (1 << 20) + 1]).expect("write");
    let out = run(&f, &["--context", "notes.md"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--context notes.md: is larger than 1024 KiB"),
        "{}",
        stderr(&out)
    );
    // The control: sixteen documents within their bounds are taken (the run then fails at the
    // unreachable provider, after `run.started` recorded them).
    let sixteen: Vec<&str> = std::iter::repeat_n(["--context", "pipeline.yaml"], 16)
        .flatten()
        .collect();
    let out = run(&f, &sixteen);
    assert_ne!(out.status.code(), Some(2), "{}", stderr(&out));
    let started = events(&f)
        .into_iter()
        .find(|e| e["type"] == "run.started")
        .expect("run.started");
    assert_eq!(
        started["data"]["context"].as_array().map(Vec::len),
        Some(16)
    );
}

#[test]
fn a_plan_is_marked_done_inside_the_runs_commit_after_a_success() {
    let (url, seen) = openai_server(vec![chat(Some("done"), &[])]);
    let f = fixture(
        &url,
        &format!("{AGENT}  - {{name: commit, action: commit}}\n"),
        &[("PLAN.md", PLAN)],
    );
    let out = run(&f, &["--plan", "PLAN.md"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let requests = seen.lock().expect("lock").clone();
    assert!(
        requests[0].contains("rename calc to calc2"),
        "{}",
        requests[0]
    );
    let started = events(&f)
        .into_iter()
        .find(|e| e["type"] == "run.started")
        .expect("run.started");
    let run_id = started["run"].as_str().expect("run id").to_owned();
    assert_eq!(started["data"]["context"][0]["path"], "PLAN.md");
    assert_eq!(started["data"]["context"][0]["plan"], true);
    let want = format!(
        "# Rename plan\nStatus: COMPLETED (cordon run {run_id})\n\n- rename calc to calc2\n"
    );
    assert_eq!(
        std::fs::read_to_string(f.ws.join("PLAN.md")).expect("read"),
        want
    );
    assert_eq!(git(&f.ws, &["show", "HEAD:PLAN.md"]), want, "in the commit");
    assert_eq!(
        git(&f.ws, &["status", "--porcelain"]),
        "",
        "nothing left over"
    );
}

#[test]
fn a_failed_run_leaves_its_plan_unmarked_and_one_without_a_commit_marks_it_in_the_work_tree() {
    let (url, _seen) = openai_server(vec![chat(Some("done"), &[]), chat(Some("done"), &[])]);
    let f = fixture(
        &url,
        &format!("{AGENT}  - {{name: check, command: test -e marked-ok}}\n"),
        &[("PLAN.md", PLAN)],
    );
    let out = run(&f, &["--plan", "PLAN.md"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(f.ws.join("PLAN.md")).expect("read"),
        PLAN,
        "a failure marks nothing"
    );
    // The control: the same run succeeds once the check passes, and the plan is marked (no
    // commit step: left in the work tree for the user to commit).
    std::fs::write(f.ws.join("marked-ok"), "").expect("write");
    let out = run(&f, &["--plan", "PLAN.md"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let marked = std::fs::read_to_string(f.ws.join("PLAN.md")).expect("read");
    assert!(
        marked.starts_with("# Rename plan\nStatus: COMPLETED (cordon run "),
        "{marked}"
    );
    assert_eq!(
        git(&f.ws, &["status", "--porcelain", "PLAN.md"]),
        " M PLAN.md\n"
    );
}

#[test]
fn a_plan_must_be_a_tracked_unmodified_file_of_the_workspace() {
    let f = fixture("http://127.0.0.1:9/v1", AGENT, &[("PLAN.md", PLAN)]);
    let elsewhere = tempfile::tempdir().expect("tempdir");
    std::fs::write(elsewhere.path().join("plan.md"), PLAN).expect("write");
    let outside = elsewhere.path().join("plan.md").display().to_string();
    std::fs::write(f.ws.join("untracked.md"), PLAN).expect("write");
    let cases = [
        (outside.as_str(), "is not inside the workspace"),
        (
            "untracked.md",
            "--plan untracked.md: is not tracked by git; commit it first",
        ),
        (
            "pipeline.yaml",
            "--plan pipeline.yaml: is one of the run's tooling files",
        ),
        ("absent.md", "--plan absent.md: is not tracked by git"),
    ];
    for (plan, want) in cases {
        let out = run(&f, &["--plan", plan]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{plan}: {err}");
        assert!(err.contains(want), "{plan}: {err}");
    }
    std::fs::write(f.ws.join("PLAN.md"), "# Changed\n").expect("write");
    let out = run(&f, &["--plan", "PLAN.md"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--plan PLAN.md: has uncommitted changes"),
        "{}",
        stderr(&out)
    );
    // Nothing was recorded: every refusal came before the run was created.
    let runs = f.cordon(&["runs", "--json"]).output().expect("runs");
    assert!(
        runs.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&runs.stdout)
    );
}

#[test]
fn a_plan_a_step_replaced_by_a_link_is_not_written_through_and_the_run_says_so() {
    let (url, _seen) = openai_server(vec![chat(Some("done"), &[])]);
    let outside = tempfile::tempdir().expect("tempdir");
    let target = outside.path().join("target.md");
    std::fs::write(&target, "# Elsewhere\nStatus: untouched\n").expect("write");
    let f = fixture(
        &url,
        &format!(
            "{AGENT}  - {{name: swap, command: 'rm PLAN.md && ln -s {} PLAN.md'}}\n",
            target.display()
        ),
        &[("PLAN.md", PLAN)],
    );
    let out = run(&f, &["--plan", "PLAN.md"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "the work is done: {err}");
    assert!(
        err.contains("the plan PLAN.md was not marked done"),
        "the run's closing line says so: {err}"
    );
    assert_eq!(
        std::fs::read_to_string(&target).expect("read"),
        "# Elsewhere\nStatus: untouched\n",
        "nothing written through the link"
    );
    assert!(
        std::fs::symlink_metadata(f.ws.join("PLAN.md"))
            .expect("the link")
            .file_type()
            .is_symlink(),
        "the step's link is left as it is"
    );
    // A resume keeps the plan it started with: giving one again is refused.
    let refused = run(&f, &["--resume-last", "--plan", "PLAN.md"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("resume it without --context and --plan"),
        "{}",
        stderr(&refused)
    );
}
