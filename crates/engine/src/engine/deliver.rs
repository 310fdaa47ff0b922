//! The `deliver` action and `report:` (DESIGN §15, §18), carried out by the engine: both read
//! only the fold and cordon's own records, and every forge text is built from cordon's own
//! fields and the pipeline's templates, never from step output.
//!
//! Idempotent across resume and retries: the push is skipped when the remote branch already
//! holds the sha (and refused when it holds a sha this run did not make); the pull request is
//! found before one is opened; the report's issue is found by the run's marker before one is
//! opened, and each comment carries a marker of its own, looked for on the forge before the
//! first comment a process makes (the one a crash could have sent without its event).

use cordon_pipeline::{Deliver, Remote, ReportIssue};
use cordon_protocol::Event;
use cordon_protocol::event::{Outcome, Verdict};

use super::{Engine, Failure};
use crate::EngineError;
use crate::deliver::forge::{self, Api, Forge, NewPull};
use crate::deliver::{self as delivery, DeliveryError, Destinations, push};

/// What the engine needs to deliver and report: the operator's bounds and the run's scratch
/// directory (`None`: a test engine without a state directory, which refuses to push).
#[derive(Clone, Default)]
pub struct Delivery {
    pub destinations: Destinations,
    pub scratch: Option<std::path::PathBuf>,
    pub limits: Limits,
}

/// What one delivery may take on the host (`[delivery] git_memory`, `git_timeout`,
/// `api_timeout`).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub git_memory: u64,
    pub git_timeout: std::time::Duration,
    pub api_timeout: std::time::Duration,
}

impl From<&cordon_pipeline::policy::DeliveryBounds> for Limits {
    fn from(bounds: &cordon_pipeline::policy::DeliveryBounds) -> Limits {
        Limits {
            git_memory: bounds.git_memory.bytes(),
            git_timeout: std::time::Duration::from_secs(bounds.git_timeout.into()),
            api_timeout: std::time::Duration::from_secs(bounds.api_timeout.into()),
        }
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::from(&cordon_pipeline::policy::DeliveryBounds::default())
    }
}

/// What this process knows of the report's issue.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ReportProgress {
    issue: Option<u64>,
    /// The forge was checked for a comment a crash could have sent unrecorded.
    synced: bool,
}

/// A comment of the report: which moment it is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Moment {
    Start,
    /// The `n`th `step.finished` of the run.
    Step(usize),
    End(Outcome),
}

type Verdicts = (Verdict, Option<i32>, Option<String>);

impl From<DeliveryError> for Failure {
    fn from(err: DeliveryError) -> Failure {
        Failure::Error(EngineError::Delivery(err))
    }
}

impl Engine<'_> {
    /// Bounds delivery and reports by the operator's policy, with the run's scratch directory.
    pub fn set_delivery(&mut self, delivery: Delivery) {
        self.delivery = delivery;
    }

    /// `action: deliver`: pushes the run's last commit to `branch`, then finds or opens the
    /// pull request.
    pub(super) fn deliver(
        &mut self,
        step: &cordon_protocol::StepName,
        deliver: &Deliver,
    ) -> Result<Verdicts, Failure> {
        // A holder whose lease was taken over must not push what another machine now owns.
        self.cx.store.check_held(self.cx.run)?;
        let Some(sha) = self.state.commit.clone() else {
            return Ok((
                Verdict::Fail,
                None,
                Some(
                    "nothing to deliver: the run has made no commit; put a `commit` action \
                     before `deliver`"
                        .to_owned(),
                ),
            ));
        };
        let Some(git) = self.cx.workspace.git() else {
            return Ok((
                Verdict::Fail,
                None,
                Some("delivering needs the workspace's git".to_owned()),
            ));
        };
        self.check_lineage(git, &sha)?;
        self.refuse_secrets(git)?;
        let url = match &deliver.remote {
            Remote::Url(url) => url.clone(),
            Remote::Name(name) => {
                let Some(text) = git.remote_url(name) else {
                    return Err(DeliveryError::Refused(format!(
                        "the repository has no remote `{name}` (as the run found its config); \
                         give `remote:` an `https://` URL"
                    ))
                    .into());
                };
                cordon_pipeline::HttpUrl::parse(&text).map_err(|why| {
                    DeliveryError::Refused(format!(
                        "the remote `{name}` is {}, which cordon cannot push to ({why}); \
                         cordon pushes over HTTPS only: give `remote:` an `https://` URL",
                        cordon_protocol::text::escape_line(&redacted(&text))
                    ))
                })?
            }
        };
        let admitted = self.delivery.destinations.admit(&url, "the push remote")?;
        let branch = delivery::branch(&deliver.branch, &self.cx.pipeline.name, self.cx.run);
        let token = self.token(&deliver.token)?;
        let pushed = self
            .state
            .pushed
            .as_ref()
            .is_some_and(|(_, b, s)| *b == branch && *s == sha);
        if !pushed {
            let Some(scratch) = self.delivery.scratch.clone() else {
                return Err(DeliveryError::Refused(
                    "delivering needs the run's state directory".to_owned(),
                )
                .into());
            };
            std::fs::create_dir_all(&scratch).map_err(|e| {
                DeliveryError::Refused(format!("cannot create {}: {e}", scratch.display()))
            })?;
            let program = push::git_program()?;
            let objects = git.objects_dir();
            let username = match deliver.pull_request.as_ref().map(|p| p.forge) {
                Some(cordon_pipeline::Forge::Gitlab) => "oauth2",
                _ => "x-access-token",
            };
            let remote = push::Remote {
                git: &program,
                scratch: &scratch,
                objects: &objects,
                url: &url,
                admitted: &admitted,
                username,
                token: &token,
                memory: self.delivery.limits.git_memory,
                timeout: self.delivery.limits.git_timeout,
            };
            match remote.head(&branch)? {
                Some(there) if there == sha => {}
                Some(there) if !self.state.commits.contains(&there) => {
                    return Err(DeliveryError::Refused(format!(
                        "the remote branch `{branch}` at {url} is at {there}, which this run did \
                         not make; cordon never overwrites it: choose another `branch`, or \
                         remove the remote branch, then resume"
                    ))
                    .into());
                }
                _ => remote.push(&sha, &branch)?,
            }
            self.append(
                Some(step),
                Event::DeliveryPushed {
                    remote: url.text.clone(),
                    branch: branch.clone(),
                    sha: sha.clone(),
                },
            )?;
        }
        if let Some(pull) = &deliver.pull_request
            && self.state.pull_request.is_none()
        {
            let forge = self.forge(pull.forge, &pull.api_url, &pull.repo, &token)?;
            let item = match forge.find_pull(&branch, &deliver.base)? {
                Some(item) => item,
                None => {
                    let fill = |text: &str| {
                        text.replace("{name}", &self.cx.pipeline.name)
                            .replace("{run_id}", &self.cx.run.to_string())
                            .replace("{branch}", &branch)
                            .replace("{base}", &deliver.base)
                            .replace("{sha}", &sha)
                    };
                    let (title, body) = (fill(&pull.title), fill(&pull.body));
                    forge.create_pull(&NewPull {
                        title: &title,
                        body: &body,
                        head: &branch,
                        base: &deliver.base,
                        draft: pull.draft,
                    })?
                }
            };
            self.append(
                Some(step),
                Event::DeliveryPullRequest {
                    url: item.url,
                    number: item.number,
                },
            )?;
        }
        Ok((Verdict::Pass, None, None))
    }

    /// The sha descends from the run-start head through commits this run made, one line of
    /// them (DESIGN §18).
    fn check_lineage(&self, git: &cordon_git::Repo, sha: &str) -> Result<(), Failure> {
        let made = &self.state.commits;
        let mut current = sha.to_owned();
        let mut walked = 0usize;
        while made.contains(&current) {
            walked += 1;
            if walked > made.len() {
                break;
            }
            let parents = git.parents(&current).map_err(EngineError::from)?;
            match parents.as_slice() {
                [] => break,
                [parent] => current = parent.clone(),
                _ => {
                    return Err(DeliveryError::Refused(format!(
                        "the run's commit {current} is a merge, which cordon's commits never \
                         are; inspect the repository"
                    ))
                    .into());
                }
            }
        }
        if walked != made.len() {
            return Err(DeliveryError::Refused(format!(
                "the run's last commit {sha} does not descend from where the run started through \
                 the run's own {} commit(s) (HEAD was moved); restore the branch, then resume",
                made.len()
            ))
            .into());
        }
        Ok(())
    }

    /// Refuses when what the run's commits push holds the value of a secret: a blob they add
    /// or change, the path it is at, or a commit's message.
    fn refuse_secrets(&self, git: &cordon_git::Repo) -> Result<(), Failure> {
        let secrets: Vec<(String, String)> = self.cx.secrets.named_values();
        if secrets.is_empty() {
            return Ok(());
        }
        let holding = |bytes: &[u8]| {
            secrets
                .iter()
                .find(|(_, value)| contains(bytes, value.as_bytes()))
                .map(|(name, _)| name.clone())
        };
        let refuse = |commit: &str, what: String, name: &str| -> Failure {
            DeliveryError::Refused(format!(
                "refusing to deliver: the commit {commit} {what} the value of the secret \
                 `{name}`; remove it from the run's commits (and rotate the secret), then resume"
            ))
            .into()
        };
        for commit in &self.state.commits {
            let message = git.message(commit).map_err(EngineError::from)?;
            if let Some(name) = holding(&message) {
                return Err(refuse(commit, "has a message holding".to_owned(), &name));
            }
            for changed in git.changed_blobs(commit).map_err(EngineError::from)? {
                // A path holding the value is not named: that would print the secret.
                if let Some(name) = holding(&changed.path) {
                    return Err(refuse(
                        commit,
                        "adds a file whose path holds".to_owned(),
                        &name,
                    ));
                }
                let bytes = git.blob(&changed.id).map_err(EngineError::from)?;
                if let Some(name) = holding(&bytes) {
                    let path =
                        cordon_protocol::text::escape_line(&String::from_utf8_lossy(&changed.path))
                            .into_owned();
                    return Err(refuse(commit, format!("adds `{path}`, which holds"), &name));
                }
            }
        }
        Ok(())
    }

    fn token(&self, name: &cordon_pipeline::SecretName) -> Result<String, Failure> {
        self.cx
            .secrets
            .value(name)
            .map(str::to_owned)
            .ok_or_else(|| {
                DeliveryError::Refused(format!("the secret `{name}` has no value")).into()
            })
    }

    fn forge(
        &self,
        kind: cordon_pipeline::Forge,
        url: &cordon_pipeline::HttpUrl,
        repo: &str,
        token: &str,
    ) -> Result<Box<dyn Forge>, Failure> {
        let admitted = self.delivery.destinations.admit(url, "the forge API")?;
        let api = Api::new(
            kind,
            url,
            &admitted.addresses,
            token,
            self.delivery.limits.api_timeout,
        )?;
        Ok(forge::adapter(kind, api, repo))
    }

    /// Posts every report comment that is due and not yet made: the start, then one per
    /// finished step when asked (called before each scheduling decision).
    pub(super) fn report_due(&mut self) -> Result<(), Failure> {
        let Some(report) = &self.cx.pipeline.report else {
            return Ok(());
        };
        let mut due = Vec::new();
        if report.on.start {
            due.push(Moment::Start);
        }
        if report.on.step {
            due.extend((0..self.state.results.len()).map(Moment::Step));
        }
        for moment in due.into_iter().skip(self.state.report_comments) {
            self.report(moment)?;
        }
        Ok(())
    }

    /// The summary comment, before `run.finished` (every earlier one first).
    pub(super) fn report_end(&mut self, outcome: Outcome) -> Result<(), Failure> {
        let Some(report) = &self.cx.pipeline.report else {
            return Ok(());
        };
        if !report.on.end {
            return Ok(());
        }
        self.report_due()?;
        let before = usize::from(report.on.start)
            + if report.on.step {
                self.state.results.len()
            } else {
                0
            };
        if self.state.report_comments == before {
            self.report(Moment::End(outcome))?;
        }
        Ok(())
    }

    fn report(&mut self, moment: Moment) -> Result<(), Failure> {
        let Some(report) = self.cx.pipeline.report.clone() else {
            return Ok(());
        };
        let token = self.token(&report.token)?;
        let forge = self.forge(report.forge, &report.api_url, &report.repo, &token)?;
        let issue = match (report.issue, self.progress.issue) {
            (ReportIssue::Number(n), _) | (ReportIssue::Create, Some(n)) => n,
            (ReportIssue::Create, None) => {
                let marker = format!("<!-- cordon-run {} -->", self.cx.run);
                let item = match forge.find_issue(&marker)? {
                    Some(item) => item,
                    None => forge.create_issue(
                        &format!("cordon: {} ({})", self.cx.pipeline.name, self.cx.run),
                        &format!(
                            "cordon run `{}` of the pipeline `{}` reports here.\n\n{marker}",
                            self.cx.run,
                            plain(&self.cx.pipeline.name)
                        ),
                    )?,
                };
                item.number
            }
        };
        self.progress.issue = Some(issue);
        let index = self.state.report_comments;
        let marker = format!("<!-- cordon-report {} {index} -->", self.cx.run);
        let found = if self.progress.synced {
            None
        } else {
            forge.find_comment(issue, &marker)?
        };
        self.progress.synced = true;
        let url = match found {
            Some(url) => url,
            None => forge.comment(issue, &format!("{}\n\n{marker}", self.report_text(moment)))?,
        };
        self.append(None, Event::ReportComment { url })?;
        Ok(())
    }

    /// A comment's text, from cordon's own fields only.
    fn report_text(&self, moment: Moment) -> String {
        let run = self.cx.run;
        let name = plain(&self.cx.pipeline.name);
        match moment {
            Moment::Start => {
                let what = if self.cx.pipeline.outcome.is_some() {
                    "an outcome run".to_owned()
                } else {
                    format!("{} steps", self.cx.pipeline.steps.len())
                };
                format!("cordon run `{run}` started: the pipeline `{name}`, {what}.")
            }
            Moment::Step(n) => match self.state.results.get(n) {
                Some((step, attempt, verdict)) => format!(
                    "Step `{step}` (attempt {attempt}): **{}**.",
                    match verdict {
                        Verdict::Pass => "passed",
                        Verdict::Fail => "failed",
                        Verdict::Unverifiable => "unverifiable",
                    }
                ),
                None => format!("Step {n} finished."),
            },
            Moment::End(outcome) => {
                let mut text = format!(
                    "cordon run `{run}` of the pipeline `{name}` finished: **{}**.\n",
                    match outcome {
                        Outcome::Success => "success",
                        Outcome::Failure => "failure",
                    }
                );
                let commits = &self.state.commits;
                if commits.is_empty() {
                    text.push_str("\n- Commits: none");
                } else {
                    let list: Vec<String> = commits
                        .iter()
                        .take(20)
                        .map(|c| format!("`{}`", &c[..c.len().min(12)]))
                        .collect();
                    text.push_str(&format!("\n- Commits: {}", list.join(", ")));
                    if commits.len() > 20 {
                        text.push_str(&format!(" and {} more", commits.len() - 20));
                    }
                }
                if let Some((url, number)) = &self.state.pull_request {
                    text.push_str(&format!("\n- Pull request: #{number} {url}"));
                }
                let (input, output, cost) = self.cx.meter.used();
                text.push_str(&format!(
                    "\n- Tokens: {} ({input} in, {output} out)",
                    input.saturating_add(output)
                ));
                if let Some(cost) = cost {
                    text.push_str(&format!("\n- Cost: ${cost:.4}"));
                }
                text
            }
        }
    }
}

/// A URL with any credentials in it replaced (a remote's URL in the user's config may hold one).
fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// `text` without backticks and line breaks, for inside a code span.
fn plain(text: &str) -> String {
    text.chars()
        .map(|c| if c == '`' || c.is_control() { ' ' } else { c })
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_a_remotes_url_are_never_shown() {
        let cases = [
            (
                "https://me:s3cret@forge.test/o/r.git",
                "https://***@forge.test/o/r.git",
            ),
            ("https://forge.test/o/r.git", "https://forge.test/o/r.git"),
            ("https://forge.test/a@b", "https://forge.test/a@b"),
            ("git@forge.test:o/r.git", "git@forge.test:o/r.git"),
        ];
        for (url, want) in cases {
            assert_eq!(redacted(url), want, "{url}");
        }
    }
}
