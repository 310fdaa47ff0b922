//! Delivery and reports (DESIGN §15): a real `git push` over smart HTTP (`git http-backend`
//! behind basic auth) and a scripted GitHub API, both served on loopback by `deliver/forge.py`,
//! which records every request. Judged by what the forge received: one branch at the run's
//! commit (executable bits and links as committed), one pull request, one issue with one comment
//! per moment, across kill -9 and resume; the token only ever held by cordon itself — never in
//! an event, the state directory, a child's arguments or environment, or a step's sandbox; a
//! destination outside `[delivery] allow` refused with the forge receiving nothing.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::agent_run::events;
use crate::run::{Fixture, git, stderr};
use crate::support::{get, read_all};

const FORGE: &str = include_str!("deliver/forge.py");
const TOKEN: &str = "forge-token-0123456789-secret";

/// The forge: its process, port, repositories and request log.
struct Forge {
    child: Child,
    port: u16,
    root: PathBuf,
    log: PathBuf,
}

impl Forge {
    /// A forge in `dir` with the empty bare repository `r.git`, accepting `token` for the push
    /// and for the API.
    fn start(dir: &Path) -> Forge {
        Forge::with_tokens(dir, TOKEN, TOKEN)
    }

    fn with_tokens(dir: &Path, git_password: &str, api_token: &str) -> Forge {
        Forge::spawn(dir, git_password, api_token, "github", "x-access-token")
    }

    /// A forge with Gitea's or GitLab's API, its push taking `git_user`.
    fn shaped(dir: &Path, shape: &str, git_user: &str) -> Forge {
        Forge::spawn(dir, TOKEN, TOKEN, shape, git_user)
    }

    fn spawn(
        dir: &Path,
        git_password: &str,
        api_token: &str,
        shape: &str,
        git_user: &str,
    ) -> Forge {
        let root = dir.join("forge");
        std::fs::create_dir_all(&root).expect("mkdir");
        std::fs::write(dir.join("forge.py"), FORGE).expect("write");
        git(&root, &["init", "-q", "--bare", "r.git"]);
        let log = dir.join("forge.log");
        let port_file = dir.join("forge.port");
        let child = Command::new("python3")
            .arg(dir.join("forge.py"))
            .arg("--root")
            .arg(&root)
            .arg("--log")
            .arg(&log)
            .arg("--port-file")
            .arg(&port_file)
            .args(["--shape", shape, "--git-user", git_user])
            .env("FORGE_GIT_PASSWORD", git_password)
            .env("FORGE_API_TOKEN", api_token)
            .stdin(Stdio::null())
            .spawn()
            .expect("python3 forge.py");
        let deadline = Instant::now() + Duration::from_secs(20);
        let port = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                break text.trim().parse().expect("a port");
            }
            assert!(Instant::now() < deadline, "the forge did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        Forge {
            child,
            port,
            root,
            log,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Every request the forge received, in order.
    fn requests(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }

    /// The API's state: pulls, issues, comments.
    fn state(&self) -> serde_json::Value {
        let text = read_all(get(&format!("127.0.0.1:{}", self.port), "/state", None));
        let body = text.split_once("\r\n\r\n").expect("a body").1;
        serde_json::from_str(body).expect("JSON")
    }

    /// `refs/heads/<branch>` of the bare repository, if it exists.
    fn branch(&self, branch: &str) -> Option<String> {
        let out = Command::new("git")
            .args(["--git-dir"])
            .arg(self.root.join("r.git"))
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("refs/heads/{branch}"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .expect("git rev-parse");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    fn flag(&self, name: &str) {
        std::fs::write(self.root.join(name), "").expect("write a flag");
    }
}

impl Drop for Forge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The operator policy: delivery to loopback, plain HTTP allowed there.
const POLICY: &str = "allow_private = [\"127.0.0.0/8\"]\n[delivery]\nallow = [\"ip:127.0.0.1:*\"]\nallow_insecure = [\"ip:127.0.0.1:*\"]\n";

/// A pipeline that makes a script, a link and its environment's dump, commits, and delivers to
/// `forge`, with `report` (YAML under `report:`) when given.
fn fixture(forge: &Forge, report: Option<&str>) -> Fixture {
    let report = report.map(|r| format!("report:\n{r}")).unwrap_or_default();
    let pipeline = format!(
        "name: ship
secrets:
  gh: {{from: env, key: CORDON_FORGE_TOKEN}}
{report}steps:
  - name: make
    command: \"printf 'echo hi\\\\n' > run.sh && chmod +x run.sh && ln -s run.sh link && env > env.txt\"
  - name: commit
    action: commit
  - name: deliver
    action: deliver
    params:
      remote: {remote}
      token: gh
      pull_request: {{forge: github, api_url: '{api}', repo: octo/widgets, title: 'ship {{run_id}}'}}
",
        remote = forge.url("/git/r.git"),
        api = forge.url("/api"),
    );
    let f = Fixture::new(&pipeline);
    set_policy(&f, POLICY);
    f
}

/// Replaces the fixture's operator policy with `text`.
fn set_policy(f: &Fixture, text: &str) {
    std::fs::write(f.dir.path().join("policy.toml"), text).expect("write the policy");
}

fn policy_arg(f: &Fixture) -> String {
    format!("--policy={}", f.dir.path().join("policy.toml").display())
}

fn run(f: &Fixture, extra: &[&str]) -> std::process::Output {
    let policy = policy_arg(f);
    let mut args = vec!["run", "--no-ui", &policy];
    args.extend_from_slice(extra);
    f.cordon(&args)
        .env("CORDON_FORGE_TOKEN", TOKEN)
        .output()
        .expect("cordon run")
}

fn of_type<'e>(events: &'e [serde_json::Value], kind: &str) -> Vec<&'e serde_json::Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// Every file under `dir` that holds `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file()
                && std::fs::read(&path).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle))
            {
                found.push(path);
            }
        }
    }
    found
}

/// Asserts the token reached the forge only as credentials, and nothing of cordon's kept it.
fn assert_token_kept_on_the_host(f: &Fixture, forge: &Forge) {
    let requests = forge.requests();
    for request in &requests {
        let holders: Vec<&str> = request["holders"]
            .as_array()
            .expect("holders")
            .iter()
            .filter_map(|h| h.as_str())
            .collect();
        assert!(
            holders.iter().all(|h| *h == "cordon"),
            "only cordon itself may hold the token, never git, its helpers or a step: {request}"
        );
    }
    let out = f
        .cordon(&["logs", "--last", "--json"])
        .output()
        .expect("cordon logs");
    assert!(!String::from_utf8_lossy(&out.stdout).contains(TOKEN));
    assert_eq!(
        files_holding(&f.state, TOKEN.as_bytes()),
        Vec::<PathBuf>::new(),
        "the state directory (database, WAL, scratch repository) never holds the token"
    );
    let env = std::fs::read_to_string(f.ws.join("env.txt")).expect("env.txt");
    assert!(
        !env.contains(TOKEN) && !env.contains("CORDON_FORGE_TOKEN"),
        "a step that does not list the secret never sees it: {env}"
    );
}

#[test]
fn a_run_pushes_its_commit_opens_one_pull_request_and_keeps_the_token_on_the_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let forge = Forge::start(dir.path());
    let f = fixture(&forge, None);
    let out = run(&f, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let events = events(&f);
    let run = events[0]["run"].as_str().expect("a run id").to_owned();
    let commit = of_type(&events, "commit.created")[0]["data"]["sha"]
        .as_str()
        .expect("a sha")
        .to_owned();
    let branch = format!("cordon/{run}");
    assert_eq!(forge.branch(&branch), Some(commit.clone()));
    // Executable bits and links as committed.
    let tree = git(
        &forge.root.join("r.git"),
        &["ls-tree", &format!("refs/heads/{branch}")],
    );
    assert!(
        tree.contains("100755 blob") && tree.contains("\trun.sh"),
        "{tree}"
    );
    assert!(
        tree.contains("120000 blob") && tree.contains("\tlink"),
        "{tree}"
    );
    let pushed = of_type(&events, "delivery.pushed");
    assert_eq!(pushed.len(), 1);
    assert_eq!(pushed[0]["data"]["branch"], branch.as_str());
    assert_eq!(pushed[0]["data"]["sha"], commit.as_str());
    assert_eq!(
        pushed[0]["data"]["remote"],
        forge.url("/git/r.git").as_str()
    );
    let pulls = forge.state()["pulls"].clone();
    assert_eq!(pulls.as_array().map(Vec::len), Some(1), "{pulls}");
    assert_eq!(pulls[0]["head"], branch.as_str());
    assert_eq!(pulls[0]["base"], "main");
    assert_eq!(pulls[0]["title"], format!("ship {run}").as_str());
    assert!(
        pulls[0]["body"]
            .as_str()
            .is_some_and(|b| b.contains(&commit))
    );
    let recorded = of_type(&events, "delivery.pull_request");
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0]["data"]["number"], 1);
    assert_eq!(recorded[0]["data"]["url"], pulls[0]["url"]);
    // The API saw the token as a bearer token; the push authenticated with basic auth.
    let requests = forge.requests();
    assert!(
        requests
            .iter()
            .any(|r| r["path"] == "/api/repos/octo/widgets/pulls"
                && r["auth"] == format!("Bearer {TOKEN}").as_str())
    );
    assert!(
        requests
            .iter()
            .any(|r| r["path"] == "/git/r.git/git-receive-pack"
                && r["auth"].as_str().is_some_and(|a| a.starts_with("Basic ")))
    );
    assert_token_kept_on_the_host(&f, &forge);
    let text = stderr(&out);
    assert!(
        text.contains(&format!("pushed {}", &commit[..12])),
        "{text}"
    );
    assert!(text.contains("pull request #1"), "{text}");
}

#[test]
fn a_run_killed_while_the_forge_answers_resumes_to_one_branch_one_pull_request_and_one_issue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let forge = Forge::start(dir.path());
    let f = fixture(
        &forge,
        Some(&format!(
            "  forge: github\n  api_url: '{}'\n  repo: octo/widgets\n  create: true\n  token: gh\n  on: [start, step, end]\n",
            forge.url("/api")
        )),
    );
    // Every listing also holds forgeries by another account with this run's markers (once the
    // forge has seen them): a pull request from the run's branch, an issue, a comment holding
    // every report marker. cordon takes only what the token's own account made.
    forge.flag("forge-markers");
    // First killed right after the forge made the issue, then right after it made the pull
    // request: each made, its answer never read.
    let mut run_id: Option<String> = None;
    for (flag, path) in [
        ("hang-create_issue", "/api/repos/octo/widgets/issues"),
        ("hang-create_pull", "/api/repos/octo/widgets/pulls"),
    ] {
        forge.flag(flag);
        let policy = policy_arg(&f);
        let args: Vec<&str> = match &run_id {
            None => vec!["run", "--no-ui", &policy],
            Some(id) => vec!["run", "--no-ui", &policy, "--resume", id.as_str()],
        };
        let mut child = f
            .cordon(&args)
            .env("CORDON_FORGE_TOKEN", TOKEN)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cordon run");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !forge
            .requests()
            .iter()
            .any(|r| r["method"] == "POST" && r["path"] == path)
        {
            assert!(Instant::now() < deadline, "cordon never asked for {path}");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The forge has made it; cordon waits for the answer. kill -9.
        std::thread::sleep(Duration::from_millis(200));
        child.kill().expect("kill -9");
        child.wait().expect("reaped");
        if run_id.is_none() {
            run_id = Some(events(&f)[0]["run"].as_str().expect("a run id").to_owned());
        }
    }
    let id = run_id.expect("a run id");
    let out = run(&f, &["--resume", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let state = forge.state();
    assert_eq!(state["issues"].as_array().map(Vec::len), Some(1), "{state}");
    assert_eq!(state["pulls"].as_array().map(Vec::len), Some(1), "{state}");
    assert_eq!(
        forge
            .requests()
            .iter()
            .filter(|r| r["method"] == "POST" && r["path"] == "/api/repos/octo/widgets/pulls")
            .count(),
        1,
        "the pull request was found on resume, not opened again"
    );
    let issue = state["issues"][0]["number"].to_string();
    let comments = state["comments"][&issue]
        .as_array()
        .expect("comments")
        .clone();
    // start, one per step (make, commit, deliver), the summary: each once.
    let bodies: Vec<&str> = comments.iter().filter_map(|c| c["body"].as_str()).collect();
    assert_eq!(bodies.len(), 5, "{bodies:#?}");
    for (i, body) in bodies.iter().enumerate() {
        assert!(
            body.contains(&format!("<!-- cordon-report {id} {i} -->")),
            "comment {i} is the run's {i}th: {body}"
        );
    }
    assert!(bodies[0].contains("started"), "{}", bodies[0]);
    assert!(
        bodies[1].contains("Step `make` (attempt 1): **passed**"),
        "{}",
        bodies[1]
    );
    let summary = bodies[4];
    assert!(summary.contains("finished: **success**"), "{summary}");
    let pull = &state["pulls"][0];
    assert!(
        summary.contains(&format!(
            "Pull request: #{} {}",
            pull["number"],
            pull["url"].as_str().expect("a URL")
        )),
        "the run's own pull request, not the forged one: {summary}"
    );
    assert!(summary.contains("Tokens: 0"), "{summary}");
    let events = events(&f);
    assert_eq!(of_type(&events, "report.comment").len(), 5);
    assert_eq!(of_type(&events, "delivery.pull_request").len(), 1);
    let commit = of_type(&events, "commit.created")[0]["data"]["sha"]
        .as_str()
        .expect("a sha")
        .to_owned();
    assert!(summary.contains(&commit[..12]), "{summary}");
    assert_eq!(forge.branch(&format!("cordon/{id}")), Some(commit));
    assert_token_kept_on_the_host(&f, &forge);
}

#[test]
fn a_destination_outside_delivery_allow_is_refused_before_a_byte_is_sent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let forge = Forge::start(dir.path());
    let f = fixture(&forge, None);
    set_policy(
        &f,
        "allow_private = [\"127.0.0.0/8\"]\n[delivery]\nallow = [\"forge.example.com\"]\n",
    );
    let out = run(&f, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(
        text.contains("refusing to send the token to the push remote 127.0.0.1")
            && text.contains("[delivery] allow"),
        "{text}"
    );
    assert_eq!(
        forge.requests(),
        Vec::<serde_json::Value>::new(),
        "the forge received nothing"
    );
    // The control: the same run, resumed once the operator allows the forge, delivers.
    set_policy(&f, POLICY);
    let id = events(&f)[0]["run"].as_str().expect("a run id").to_owned();
    let out = run(&f, &["--resume", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(forge.branch(&format!("cordon/{id}")).is_some());
}

#[test]
fn plain_http_needs_allow_insecure_and_the_forge_then_receives_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let forge = Forge::start(dir.path());
    let f = fixture(&forge, None);
    set_policy(
        &f,
        "allow_private = [\"127.0.0.0/8\"]\n[delivery]\nallow = [\"ip:127.0.0.1:*\"]\n",
    );
    let out = run(&f, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("allow_insecure"), "{}", stderr(&out));
    assert_eq!(forge.requests(), Vec::<serde_json::Value>::new());
}

#[test]
fn a_token_the_forge_refuses_exits_2_naming_the_forge_the_status_and_the_fix() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The push is accepted; the API knows another token.
    let forge = Forge::with_tokens(dir.path(), TOKEN, "another-token-0123456789");
    let f = fixture(&forge, None);
    let out = run(&f, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(
        text.contains("the github API answered 401") && text.contains("Bad credentials"),
        "{text}"
    );
    assert!(
        text.contains("check that the secret holds a valid token"),
        "{text}"
    );
    assert!(!text.contains(TOKEN));
    assert_eq!(
        forge.state()["pulls"].as_array().map(Vec::len),
        Some(0),
        "the refused token opened nothing"
    );
    // And a push the remote refuses: git's 401, named.
    let dir = tempfile::tempdir().expect("tempdir");
    let forge = Forge::with_tokens(dir.path(), "another-token-0123456789", TOKEN);
    let f = fixture(&forge, None);
    let out = run(&f, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("answered 401"), "{}", stderr(&out));
    assert!(!stderr(&out).contains(TOKEN));
    let id = events(&f)[0]["run"].as_str().expect("a run id").to_owned();
    assert_eq!(
        forge.branch(&format!("cordon/{id}")),
        None,
        "the refused push made no branch"
    );
}

#[test]
fn a_forge_that_is_down_stops_the_run_resumably_with_exit_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let forge = Forge::start(dir.path());
    forge.flag("down");
    let f = fixture(&forge, None);
    let out = run(&f, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(text.contains("answered 503"), "{text}");
    assert!(text.contains("resume once it answers"), "{text}");
    let events = events(&f);
    assert!(
        of_type(&events, "run.finished").is_empty(),
        "a forge that is down takes no route: the run is left resumable"
    );
    assert_eq!(
        of_type(&events, "delivery.pushed").len(),
        1,
        "the push itself went through"
    );
    std::fs::remove_file(forge.root.join("down")).expect("up again");
    let id = events[0]["run"].as_str().expect("a run id").to_owned();
    let out = run(&f, &["--resume", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let events = crate::agent_run::events(&f);
    assert_eq!(of_type(&events, "delivery.pushed").len(), 1, "pushed once");
    assert_eq!(of_type(&events, "delivery.pull_request").len(), 1);
    assert_eq!(forge.state()["pulls"].as_array().map(Vec::len), Some(1));
}

#[test]
fn a_commit_holding_a_secrets_value_is_not_delivered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let forge = Forge::start(dir.path());
    // The value in a file, as a file's name, or in the commit's message: refused, the value
    // never printed, nothing sent.
    for (make, message, want) in [
        (
            "printf %s \"$CORDON_LEAKED_TOKEN\" > notes.txt",
            "cordon: {name}",
            "adds `notes.txt`, which holds the value of the secret `gh`",
        ),
        (
            "touch \"x-$CORDON_LEAKED_TOKEN\"",
            "cordon: {name}",
            "adds a file whose path holds the value of the secret `gh`",
        ),
        (
            "echo fine > fine.txt",
            "fix leaked-token-0123456789",
            "has a message holding the value of the secret `gh`",
        ),
    ] {
        let pipeline = format!(
            "name: leak
secrets:
  gh: {{from: env, key: CORDON_LEAKED_TOKEN}}
steps:
  - name: make
    command: '{make}'
    secrets: [gh]
  - name: commit
    action: commit
    params: {{message: '{message}'}}
  - name: deliver
    action: deliver
    params: {{remote: '{}', token: gh}}
",
            forge.url("/git/r.git")
        );
        let f = Fixture::new(&pipeline);
        set_policy(&f, POLICY);
        let policy = policy_arg(&f);
        let out = f
            .cordon(&["run", "--no-ui", &policy])
            .env("CORDON_LEAKED_TOKEN", "leaked-token-0123456789")
            .output()
            .expect("cordon run");
        assert_eq!(out.status.code(), Some(2), "{make}: {}", stderr(&out));
        let text = stderr(&out);
        assert!(text.contains(want), "{text}");
        assert!(!text.contains("leaked-token-0123456789"), "{text}");
    }
    assert_eq!(
        forge.requests(),
        Vec::<serde_json::Value>::new(),
        "nothing was sent"
    );
}

/// The command lines of running processes that hold `needle`.
fn processes_holding(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(needle) {
                found.push(text);
            }
        }
    }
    found
}

/// A run against a forge misbehaving as `flag` says, under the policy's `bound`: it stops with
/// `code` saying `wants`, leaves no process of git's talking to the forge, and — the flag
/// removed, the same bound — resumes to a pushed branch and one pull request.
fn stopped_at_the_bound_then_resumed(flag: &str, bound: &str, code: i32, wants: &[&str]) {
    stopped_then_resumed(flag, bound, code, wants, |_, _| {});
}

/// [`stopped_at_the_bound_then_resumed`], with `check` judging the forge and the state directory
/// after the stopped run.
fn stopped_then_resumed(
    flag: &str,
    bound: &str,
    code: i32,
    wants: &[&str],
    check: impl Fn(&Forge, &Path),
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let forge = Forge::start(dir.path());
    forge.flag(flag);
    let f = fixture(&forge, None);
    set_policy(&f, &format!("{POLICY}{bound}\n"));
    let out = run(&f, &[]);
    assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
    let text = stderr(&out);
    for want in wants {
        assert!(text.contains(want), "{want}: {text}");
    }
    assert_eq!(
        processes_holding(&forge.url("/git/")),
        Vec::<String>::new(),
        "no git helper outlives the bound"
    );
    check(&forge, &f.state);
    std::fs::remove_file(forge.root.join(flag)).expect("behave");
    let id = events(&f)[0]["run"].as_str().expect("a run id").to_owned();
    let out = run(&f, &["--resume", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(forge.branch(&format!("cordon/{id}")).is_some());
    assert_eq!(forge.state()["pulls"].as_array().map(Vec::len), Some(1));
}

#[test]
fn a_remote_sending_refs_without_end_is_stopped_at_git_memory_and_resumes_once_it_behaves() {
    stopped_at_the_bound_then_resumed(
        "git-bomb",
        "git_memory = \"256M\"",
        2,
        &[
            "ran out of the 256 MiB `[delivery] git_memory` allows it",
            "raise `git_memory`",
        ],
    );
}

#[test]
fn a_remote_that_drips_is_stopped_at_git_timeout_with_every_helper_git_started() {
    stopped_at_the_bound_then_resumed(
        "git-drip",
        "git_timeout = 3",
        1,
        &[
            "took more than 3 s (`[delivery] git_timeout`) and was stopped",
            "resume once it answers",
        ],
    );
}

#[test]
fn a_dumb_http_remote_is_refused_before_git_downloads_what_it_lists() {
    stopped_then_resumed(
        "dumb-http",
        "",
        2,
        &["does not speak git's smart HTTP protocol", "smart HTTP URL"],
        |forge, state| {
            let fetched: Vec<_> = forge
                .requests()
                .into_iter()
                .filter(|r| r["path"].as_str().is_some_and(|p| p.contains("/objects/")))
                .collect();
            assert_eq!(
                fetched,
                Vec::<serde_json::Value>::new(),
                "nothing listed was fetched"
            );
            let mut size = 0;
            let mut stack = vec![state.to_path_buf()];
            while let Some(dir) = stack.pop() {
                for entry in std::fs::read_dir(&dir).expect("read_dir").flatten() {
                    let meta = entry.metadata().expect("metadata");
                    if meta.is_dir() {
                        assert_ne!(
                            entry.file_name(),
                            "repo.git",
                            "the scratch repository is gone"
                        );
                        stack.push(entry.path());
                    } else {
                        size += meta.len();
                    }
                }
            }
            assert!(size < 8 << 20, "the state directory holds {size} bytes");
        },
    );
}

#[test]
fn the_calls_of_one_action_together_get_four_api_timeouts() {
    stopped_at_the_bound_then_resumed(
        "slow-pages",
        "api_timeout = 2",
        1,
        &["took more than 8 s, 4 × `[delivery] api_timeout`, for the calls of one action"],
    );
}

#[test]
fn a_github_token_that_cannot_read_its_account_takes_only_bot_made_entries_for_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let forge = Forge::start(dir.path());
    let f = fixture(
        &forge,
        Some(&format!(
            "  forge: github\n  api_url: '{}'\n  repo: octo/widgets\n  create: true\n  token: gh\n  on: [start, end]\n",
            forge.url("/api")
        )),
    );
    // GET /user answers 403; once the run's issue exists, every listing also holds a person's
    // forgeries with the run's markers, a pull request from its branch among them.
    forge.flag("user-403");
    forge.flag("forge-markers");
    let out = run(&f, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let posts = |path: &str| {
        forge
            .requests()
            .iter()
            .filter(|r| r["method"] == "POST" && r["path"] == path)
            .count()
    };
    assert_eq!(
        posts("/api/repos/octo/widgets/pulls"),
        1,
        "mallory's pull request was not taken"
    );
    let pulls = of_type(&events(&f), "delivery.pull_request")
        .iter()
        .map(|e| e["data"]["url"].as_str().unwrap_or_default().to_owned())
        .collect::<Vec<_>>();
    let made = forge.state()["pulls"][0]["url"].as_str().map(str::to_owned);
    assert_eq!(pulls, made.into_iter().collect::<Vec<_>>());
}

/// Every process whose command line holds `needle`, waited for to be none for 5 s at most.
fn none_left_holding(needle: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = processes_holding(needle);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn git_and_its_helpers_end_with_cordon_whether_it_is_interrupted_terminated_or_killed() {
    for signal in ["INT", "TERM", "KILL"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let forge = Forge::start(dir.path());
        forge.flag("git-drip");
        let f = fixture(&forge, None);
        set_policy(&f, &format!("{POLICY}git_timeout = 600\n"));
        let policy = policy_arg(&f);
        let mut child = f
            .cordon(&["run", "--no-ui", &policy])
            .env("CORDON_FORGE_TOKEN", TOKEN)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cordon run");
        let remote = forge.url("/git/");
        let deadline = Instant::now() + Duration::from_secs(60);
        // git's remote helper, started by git, is talking to the dripping remote.
        while processes_holding(&remote).len() < 2 {
            assert!(Instant::now() < deadline, "git never reached the remote");
            std::thread::sleep(Duration::from_millis(20));
        }
        let kill = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(child.id().to_string())
            .status()
            .expect("kill");
        assert!(kill.success());
        let status = child.wait().expect("reaped");
        assert!(!status.success(), "SIG{signal}: {status}");
        assert_eq!(
            none_left_holding(&remote),
            Vec::<String>::new(),
            "SIG{signal}: git and its helpers ended with cordon"
        );
        // The scratch repository goes too: at once when cordon could run its handler, at the
        // resume after `kill -9` (which leaves it, the control).
        let id = events(&f)[0]["run"].as_str().expect("a run id").to_owned();
        let scratch = f.state.join("runs").join(&id).join("delivery");
        let left = || {
            ["repo.git", "exec", "home"]
                .into_iter()
                .filter(|made| scratch.join(made).exists())
                .collect::<Vec<_>>()
        };
        if signal == "KILL" {
            assert!(
                left().contains(&"repo.git"),
                "kill -9 runs nothing of cordon's"
            );
            std::fs::remove_file(forge.root.join("git-drip")).expect("behave");
            let out = run(&f, &["--resume", &id]);
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        }
        assert_eq!(
            left(),
            Vec::<&str>::new(),
            "SIG{signal}: the scratch repository is removed"
        );
    }
}

#[test]
fn a_forge_api_that_drips_its_answer_is_stopped_at_api_timeout() {
    stopped_at_the_bound_then_resumed(
        "slow-api",
        "api_timeout = 2",
        1,
        &["took more than 2 s (`[delivery] api_timeout`) to answer GET /api/user"],
    );
}

#[test]
fn a_forge_that_echoes_the_token_in_its_error_never_gets_it_printed_or_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let forge = Forge::start(dir.path());
    forge.flag("echo-token");
    let f = fixture(&forge, None);
    let out = run(&f, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(
        text.contains("answered 422") && text.contains("the token [token] may not do that"),
        "{text}"
    );
    assert!(!text.contains(TOKEN), "{text}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains(TOKEN));
    assert_token_kept_on_the_host(&f, &forge);
}

#[test]
fn a_remote_branch_at_a_commit_the_run_did_not_make_is_never_overwritten() {
    let dir = tempfile::tempdir().expect("tempdir");
    let forge = Forge::start(dir.path());
    let pipeline_branch = "taken";
    let f = Fixture::new(&format!(
        "name: ship
secrets:
  gh: {{from: env, key: CORDON_FORGE_TOKEN}}
steps:
  - name: make
    command: 'echo new > new.txt'
  - name: commit
    action: commit
  - name: deliver
    action: deliver
    params: {{remote: '{}', token: gh, branch: {pipeline_branch}}}
",
        forge.url("/git/r.git")
    ));
    set_policy(&f, POLICY);
    // Someone else's commit on the branch: the workspace's first one.
    let head = git(&f.ws, &["rev-parse", "HEAD"]).trim().to_owned();
    git(
        &f.ws,
        &[
            "push",
            "-q",
            forge.root.join("r.git").to_str().expect("utf-8"),
            &format!("HEAD:refs/heads/{pipeline_branch}"),
        ],
    );
    let out = run(&f, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(text.contains("which this run did not make"), "{text}");
    assert!(text.contains("never overwrites"), "{text}");
    assert_eq!(forge.branch(pipeline_branch), Some(head));
}

#[test]
fn dry_run_shows_what_would_be_pushed_and_opened_and_warns_outside_the_bounds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let forge = Forge::start(dir.path());
    let f = fixture(
        &forge,
        Some(&format!(
            "  forge: github\n  api_url: '{}'\n  repo: octo/widgets\n  issue: 7\n  token: gh\n",
            forge.url("/api")
        )),
    );
    let out = f
        .cordon(&["run", "--dry-run"])
        .env("CORDON_FORGE_TOKEN", TOKEN)
        .output()
        .expect("dry run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("host action `deliver`"), "{text}");
    assert!(text.contains("cordon/{run_id}"), "{text}");
    assert!(text.contains("secret `gh` (host-side only)"), "{text}");
    assert!(text.contains("github octo/widgets"), "{text}");
    assert!(text.contains("issue #7: comments at start, end"), "{text}");
    assert!(!text.contains(TOKEN));
    // Without the operator policy, nothing is allowed: said for each destination.
    let warnings = stderr(&out);
    assert!(
        warnings.contains("would refuse: refusing to send the token to the push remote"),
        "{warnings}"
    );
    assert!(warnings.contains("the forge API"), "{warnings}");
    assert_eq!(forge.requests(), Vec::<serde_json::Value>::new());
}

#[test]
fn an_outcome_run_delivers_its_task_commits_and_reports_each_phase() {
    let (dir, ws, state) = crate::outcome::workspace();
    let forge = Forge::start(dir.path());
    let yaml = std::fs::read_to_string(ws.join("outcome.yaml")).expect("outcome.yaml");
    let yaml = format!(
        "{yaml}  deliver:\n    remote: {remote}\n    token: gh\n    branch: 'cordon/{{name}}-{{run_id}}'\n    pull_request: {{forge: github, api_url: '{api}', repo: octo/widgets}}\nsecrets:\n  gh: {{from: env, key: CORDON_FORGE_TOKEN}}\nreport: {{forge: github, api_url: '{api}', repo: octo/widgets, create: true, token: gh, on: [start, step, end]}}\n",
        remote = forge.url("/git/r.git"),
        api = forge.url("/api"),
    );
    std::fs::write(ws.join("outcome.yaml"), yaml).expect("write");
    git(&ws, &["commit", "-q", "-am", "deliver"]);
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, POLICY).expect("write the policy");
    let out = crate::support::cordon()
        .args(["do", crate::outcome::OUTCOME, "--no-ui"])
        .arg(format!("--policy={}", policy.display()))
        .arg("--state-dir")
        .arg(&state)
        .current_dir(&ws)
        .env("CORDON_FORGE_TOKEN", TOKEN)
        .output()
        .expect("cordon do");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let log = crate::support::cordon()
        .args(["logs", "--last", "--json", "--state-dir"])
        .arg(&state)
        .current_dir(&ws)
        .output()
        .expect("cordon logs");
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let run = events[0]["run"].as_str().expect("a run id").to_owned();
    let commits: Vec<String> = of_type(&events, "commit.created")
        .iter()
        .filter_map(|e| e["data"]["sha"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(commits.len(), 2, "one commit per task");
    // The branch holds the last task's commit, whose parent is the first's.
    let branch = format!("cordon/report-json-{run}");
    assert_eq!(
        forge.branch(&branch).as_deref(),
        commits.last().map(String::as_str)
    );
    let parent = git(
        &forge.root.join("r.git"),
        &["rev-parse", &format!("refs/heads/{branch}^")],
    );
    assert_eq!(parent.trim(), commits[0]);
    let state = forge.state();
    assert_eq!(state["pulls"].as_array().map(Vec::len), Some(1), "{state}");
    assert_eq!(state["issues"].as_array().map(Vec::len), Some(1), "{state}");
    let pushed = of_type(&events, "delivery.pushed");
    assert_eq!(pushed.len(), 1);
    assert_eq!(pushed[0]["step"], "deliver");
    // Every phase step is reported, then the summary with both commits and the pull request.
    let issue = state["issues"][0]["number"].to_string();
    let bodies: Vec<String> = state["comments"][&issue]
        .as_array()
        .expect("comments")
        .iter()
        .filter_map(|c| c["body"].as_str().map(str::to_owned))
        .collect();
    let steps = of_type(&events, "step.finished").len();
    assert_eq!(
        bodies.len(),
        steps + 2,
        "start + one per step + summary: {bodies:#?}"
    );
    assert!(
        bodies
            .iter()
            .any(|b| b.contains("Step `t1.verify` (attempt 1): **failed**"))
    );
    let summary = bodies.last().expect("a summary");
    assert!(summary.contains("finished: **success**"), "{summary}");
    for sha in &commits {
        assert!(summary.contains(&sha[..12]), "{summary}");
    }
    assert!(summary.contains("Pull request: #"), "{summary}");
    assert!(
        summary.contains("Cost: $"),
        "a priced pipeline reports its cost: {summary}"
    );
}

#[test]
fn gitea_and_gitlab_get_their_own_api_shapes_and_one_pull_request_each() {
    for (shape, root, user) in [
        ("gitea", "/api/v1", "x-access-token"),
        ("gitlab", "/api/v4", "oauth2"),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let forge = Forge::shaped(dir.path(), shape, user);
        let api = forge.url(root);
        let f = Fixture::new(&format!(
            "name: ship
secrets:
  gh: {{from: env, key: CORDON_FORGE_TOKEN}}
report: {{forge: {shape}, api_url: '{api}', repo: octo/widgets, create: true, token: gh}}
steps:
  - name: make
    command: 'env > env.txt'
  - name: commit
    action: commit
  - name: deliver
    action: deliver
    params:
      remote: {remote}
      token: gh
      pull_request: {{forge: {shape}, api_url: '{api}', repo: octo/widgets, draft: true}}
",
            remote = forge.url("/git/r.git"),
        ));
        set_policy(&f, POLICY);
        let out = run(&f, &[]);
        assert_eq!(out.status.code(), Some(0), "{shape}: {}", stderr(&out));
        let id = events(&f)[0]["run"].as_str().expect("a run id").to_owned();
        assert!(forge.branch(&format!("cordon/{id}")).is_some(), "{shape}");
        let state = forge.state();
        assert_eq!(
            state["pulls"].as_array().map(Vec::len),
            Some(1),
            "{shape}: {state}"
        );
        let title = state["pulls"][0]["title"].as_str().unwrap_or_default();
        let prefix = if shape == "gitea" { "WIP: " } else { "Draft: " };
        assert!(
            title.starts_with(prefix),
            "{shape} marks a draft by its title: {title}"
        );
        assert_eq!(
            state["issues"].as_array().map(Vec::len),
            Some(1),
            "{shape}: {state}"
        );
        let issue = state["issues"][0]["number"].to_string();
        assert_eq!(
            state["comments"][&issue].as_array().map(Vec::len),
            Some(2),
            "{shape}: start and end: {state}"
        );
        let events = events(&f);
        let urls: Vec<&str> = of_type(&events, "report.comment")
            .iter()
            .filter_map(|e| e["data"]["url"].as_str())
            .collect();
        assert_eq!(urls.len(), 2, "{shape}");
        if shape == "gitlab" {
            assert!(
                urls[0].contains("/projects/octo%2Fwidgets/issues/") && urls[0].contains("/notes/"),
                "a GitLab note is named by its API address: {urls:?}"
            );
        }
        // The forge made them only for its own token scheme (`token …`, `PRIVATE-TOKEN`).
        assert_token_kept_on_the_host(&f, &forge);
    }
}

#[test]
fn a_remote_by_name_is_read_from_the_repositorys_config_and_must_be_an_http_url() {
    let dir = tempfile::tempdir().expect("tempdir");
    let forge = Forge::start(dir.path());
    let pipeline = |remote: &str| {
        format!(
            "name: ship
secrets:
  gh: {{from: env, key: CORDON_FORGE_TOKEN}}
steps:
  - name: make
    command: 'env > env.txt'
  - name: commit
    action: commit
  - name: deliver
    action: deliver
    params: {{remote: {remote}, token: gh}}
"
        )
    };
    // No such remote, then an SSH remote: each refused, naming the fix, nothing sent.
    let f = Fixture::new(&pipeline("upstream"));
    set_policy(&f, POLICY);
    let out = run(&f, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(
        text.contains("has no remote `upstream`")
            && text.contains("give `remote:` an `https://` URL"),
        "{text}"
    );
    let f = Fixture::new(&pipeline("origin"));
    set_policy(&f, POLICY);
    git(
        &f.ws,
        &["remote", "add", "origin", "git@forge.test:octo/widgets.git"],
    );
    let out = run(&f, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cordon pushes over HTTPS only"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        forge.requests(),
        Vec::<serde_json::Value>::new(),
        "nothing was sent"
    );
    // The control: `origin` at the forge delivers there.
    let f = Fixture::new(&pipeline("origin"));
    set_policy(&f, POLICY);
    git(
        &f.ws,
        &["remote", "add", "origin", &forge.url("/git/r.git")],
    );
    let out = run(&f, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = events(&f)[0]["run"].as_str().expect("a run id").to_owned();
    assert!(forge.branch(&format!("cordon/{id}")).is_some());
    assert_token_kept_on_the_host(&f, &forge);
}

#[test]
fn a_hard_limit_cordon_runs_under_below_git_memory_is_kept_and_the_push_still_goes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let forge = Forge::start(dir.path());
    let f = fixture(&forge, None);
    let policy = policy_arg(&f);
    let inner = f.cordon(&["run", "--no-ui", &policy]);
    // 1 GiB of file size, soft and hard, under the default 4G `git_memory`: git gets the lower
    // one (raising a hard limit is refused, which would fail the start of git).
    let mut outer = Command::new("/usr/bin/prlimit");
    outer
        .arg("--fsize=1073741824")
        .arg("--")
        .arg(inner.get_program())
        .args(inner.get_args())
        .current_dir(&f.ws)
        .env("CORDON_FORGE_TOKEN", TOKEN);
    for (name, value) in inner.get_envs() {
        if let Some(value) = value {
            outer.env(name, value);
        }
    }
    let out = outer.output().expect("prlimit cordon run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = events(&f)[0]["run"].as_str().expect("a run id").to_owned();
    assert!(forge.branch(&format!("cordon/{id}")).is_some(), "pushed");
}
