//! Delivery and reports (DESIGN §15): the `deliver` action's parameters and the top-level
//! `report`. Both run host-side in cordon, with a token that never enters a sandbox.

use std::fmt;

use crate::{HttpUrl, SecretName};

/// A forge whose API opens pull requests and comments on issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Forge {
    Github,
    Gitea,
    Gitlab,
}

impl Forge {
    pub const NAMES: &'static [&'static str] = &["github", "gitea", "gitlab"];

    pub fn parse(text: &str) -> Option<Forge> {
        match text {
            "github" => Some(Forge::Github),
            "gitea" => Some(Forge::Gitea),
            "gitlab" => Some(Forge::Gitlab),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Forge::Github => "github",
            Forge::Gitea => "gitea",
            Forge::Gitlab => "gitlab",
        }
    }
}

impl fmt::Display for Forge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where `deliver` pushes: a remote of the workspace's repository by name, or a URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Remote {
    Name(String),
    Url(HttpUrl),
}

impl fmt::Display for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Remote::Name(name) => f.write_str(name),
            Remote::Url(url) => f.write_str(&url.text),
        }
    }
}

/// `action: deliver` and its `params`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deliver {
    pub remote: Remote,
    /// May hold `{name}` and `{run_id}`; default [`Deliver::DEFAULT_BRANCH`].
    pub branch: String,
    /// The branch the pull request targets; default `main`.
    pub base: String,
    pub token: SecretName,
    pub pull_request: Option<PullRequest>,
}

impl Deliver {
    pub const DEFAULT_BRANCH: &'static str = "cordon/{run_id}";
    pub const DEFAULT_BASE: &'static str = "main";
}

/// `params.pull_request`: the forge API the pull request is found or opened through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullRequest {
    pub forge: Forge,
    pub api_url: HttpUrl,
    /// `OWNER/NAME` (GitLab: the project's full path).
    pub repo: String,
    /// Templates over cordon's own fields: `{name}`, `{run_id}`, `{branch}`, `{base}`, `{sha}`.
    pub title: String,
    pub body: String,
    pub draft: bool,
}

impl PullRequest {
    pub const DEFAULT_TITLE: &'static str = "cordon: {name} ({run_id})";
    pub const DEFAULT_BODY: &'static str =
        "Delivered by cordon run `{run_id}` of the pipeline `{name}`.\n\nHead: `{sha}`.";
    /// The placeholders a title or body may use.
    pub const PLACEHOLDERS: &'static [&'static str] = &["name", "run_id", "branch", "base", "sha"];
}

/// The top-level `report`: comments on an issue as the run goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub forge: Forge,
    pub api_url: HttpUrl,
    pub repo: String,
    pub issue: ReportIssue,
    pub token: SecretName,
    pub on: ReportOn,
}

/// The issue a report comments on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportIssue {
    /// `issue: N`, an existing issue.
    Number(u64),
    /// `create: true`: the run opens one (and finds it again on resume).
    Create,
}

/// `on: [start, step, end]`: when the report comments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportOn {
    pub start: bool,
    /// After every step (an outcome run's phase steps included).
    pub step: bool,
    pub end: bool,
}

impl ReportOn {
    pub const NAMES: &'static [&'static str] = &["start", "step", "end"];
}

impl Default for ReportOn {
    /// `[start, end]`.
    fn default() -> ReportOn {
        ReportOn {
            start: true,
            step: false,
            end: true,
        }
    }
}
