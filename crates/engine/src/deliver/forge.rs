//! Forge APIs (DESIGN §15): find or open a pull request, find or open an issue, comment on it.
//! GitHub's REST API first; Gitea (and Forgejo) and GitLab behind the same [`Forge`] trait.
//!
//! Each operation is a pure [`Call`] (method, path segments, query, JSON body) built by the
//! forge's adapter and read back by it from the JSON answer, so the shapes are unit tables; one
//! [`Api`] sends them: the token in a sensitive header, no redirects, no environment proxy, the
//! destination pinned to the addresses the delivery bounds admitted, every answer bounded.

use std::io::Read as _;
use std::net::SocketAddr;
use std::time::Duration;

use cordon_pipeline::{Forge as ForgeKind, HttpUrl};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::DeliveryError;

/// The most bytes of one listing's page read.
pub const MAX_ANSWER: u64 = 4 << 20;
/// The most bytes of any other answer read, and of one entry of a listing: what is parsed
/// into a JSON tree at once (a tree of tiny values takes many times its text's size).
pub const MAX_SINGLE: u64 = 256 << 10;
/// The most bytes of an error answer whose text is read for the forge's message.
const MAX_ERROR: usize = 64 << 10;
/// The most pages of a listing read (pull requests, issues, comments).
pub const MAX_PAGES: u32 = 10;
/// Entries asked for per page.
const PER_PAGE: u32 = 100;
/// The most entries one page of a listing may hold (twice what is asked for).
const MAX_ENTRIES: usize = 2 * PER_PAGE as usize;
/// How many `[delivery] api_timeout`s the calls of one `deliver` action or one report comment
/// get together: each call has one, all of them this many.
pub const CALLS_BUDGET: u32 = 4;

/// A pull request or an issue: its number and its page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub number: u64,
    pub url: String,
}

/// One API call, before it is sent.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub method: &'static str,
    /// Path segments under the API root, each percent-encoded as one segment.
    pub path: Vec<String>,
    pub query: Vec<(&'static str, String)>,
    pub body: Option<Value>,
}

impl Call {
    fn get(path: Vec<String>, query: Vec<(&'static str, String)>) -> Call {
        Call {
            method: "GET",
            path,
            query,
            body: None,
        }
    }

    fn post(path: Vec<String>, body: Value) -> Call {
        Call {
            method: "POST",
            path,
            query: Vec::new(),
            body: Some(body),
        }
    }
}

/// What a pull request is opened with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewPull<'a> {
    pub title: &'a str,
    pub body: &'a str,
    pub head: &'a str,
    pub base: &'a str,
    pub draft: bool,
}

/// A forge's API, as `deliver` and `report` use it.
pub trait Forge {
    /// The open pull request from `head` into `base`, if there is one.
    fn find_pull(&self, head: &str, base: &str) -> Result<Option<Item>, DeliveryError>;
    fn create_pull(&self, pull: &NewPull<'_>) -> Result<Item, DeliveryError>;
    /// The issue whose description holds `marker` (the run's own), among the latest ones.
    fn find_issue(&self, marker: &str) -> Result<Option<Item>, DeliveryError>;
    fn create_issue(&self, title: &str, body: &str) -> Result<Item, DeliveryError>;
    /// The URL of the comment on `issue` whose text holds `marker`, if there is one.
    fn find_comment(&self, issue: u64, marker: &str) -> Result<Option<String>, DeliveryError>;
    /// Comments on `issue`; returns the comment's URL.
    fn comment(&self, issue: u64, body: &str) -> Result<String, DeliveryError>;
}

/// The adapter of `kind` over `api`.
pub fn adapter(kind: ForgeKind, api: Api, repo: &str) -> Box<dyn Forge> {
    let shape = match kind {
        ForgeKind::Github => Shape::Github,
        ForgeKind::Gitea => Shape::Gitea,
        ForgeKind::Gitlab => Shape::Gitlab,
    };
    Box::new(Adapter {
        api,
        shape,
        repo: repo.to_owned(),
        me: std::cell::OnceCell::new(),
    })
}

/// The request and answer shapes of each forge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Github,
    Gitea,
    Gitlab,
}

impl Shape {
    /// `repos/OWNER/NAME` or `projects/<the path as one segment>`.
    fn base(self, repo: &str) -> Vec<String> {
        match self {
            Shape::Github | Shape::Gitea => {
                let mut path = vec!["repos".to_owned()];
                path.extend(repo.split('/').map(str::to_owned));
                path
            }
            Shape::Gitlab => vec!["projects".to_owned(), repo.to_owned()],
        }
    }

    fn at(self, repo: &str, rest: &[&str]) -> Vec<String> {
        let mut path = self.base(repo);
        path.extend(rest.iter().map(|s| (*s).to_owned()));
        path
    }

    fn page(self, page: u32) -> Vec<(&'static str, String)> {
        let size = match self {
            Shape::Gitea => ("limit", "50".to_owned()),
            Shape::Github | Shape::Gitlab => ("per_page", PER_PAGE.to_string()),
        };
        vec![size, ("page", page.to_string())]
    }

    pub fn find_pull(self, repo: &str, head: &str, base: &str, page: u32) -> Call {
        let mut query = match self {
            Shape::Github => {
                let owner = repo.split('/').next().unwrap_or_default();
                vec![
                    ("state", "open".to_owned()),
                    ("head", format!("{owner}:{head}")),
                    ("base", base.to_owned()),
                ]
            }
            Shape::Gitea => vec![("state", "open".to_owned())],
            Shape::Gitlab => vec![
                ("state", "opened".to_owned()),
                ("source_branch", head.to_owned()),
                ("target_branch", base.to_owned()),
            ],
        };
        query.extend(self.page(page));
        let what = match self {
            Shape::Github | Shape::Gitea => "pulls",
            Shape::Gitlab => "merge_requests",
        };
        Call::get(self.at(repo, &[what]), query)
    }

    /// The pull request of `head` into `base` in one listed entry.
    pub fn pull_of(self, entry: &Value, head: &str, base: &str) -> Option<Item> {
        let matches = match self {
            // GitHub filtered by the query.
            Shape::Github => true,
            Shape::Gitea => {
                entry["head"]["ref"].as_str() == Some(head)
                    && entry["base"]["ref"].as_str() == Some(base)
            }
            Shape::Gitlab => {
                entry["source_branch"].as_str() == Some(head)
                    && entry["target_branch"].as_str() == Some(base)
            }
        };
        matches.then(|| self.item(entry)).flatten()
    }

    pub fn create_pull(self, repo: &str, pull: &NewPull<'_>) -> Call {
        match self {
            Shape::Github => Call::post(
                self.at(repo, &["pulls"]),
                json!({"title": pull.title, "body": pull.body, "head": pull.head,
                       "base": pull.base, "draft": pull.draft}),
            ),
            // Gitea marks a draft by its title's prefix.
            Shape::Gitea => Call::post(
                self.at(repo, &["pulls"]),
                json!({"title": draft_title("WIP: ", pull), "body": pull.body,
                       "head": pull.head, "base": pull.base}),
            ),
            Shape::Gitlab => Call::post(
                self.at(repo, &["merge_requests"]),
                json!({"title": draft_title("Draft: ", pull), "description": pull.body,
                       "source_branch": pull.head, "target_branch": pull.base}),
            ),
        }
    }

    pub fn list_issues(self, repo: &str, run_marker: &str, page: u32) -> Call {
        let mut query = match self {
            Shape::Github => vec![
                ("state", "all".to_owned()),
                ("sort", "created".to_owned()),
                ("direction", "desc".to_owned()),
            ],
            Shape::Gitea => vec![("state", "all".to_owned()), ("type", "issues".to_owned())],
            Shape::Gitlab => vec![
                ("search", run_marker.to_owned()),
                ("in", "description".to_owned()),
            ],
        };
        query.extend(self.page(page));
        Call::get(self.at(repo, &["issues"]), query)
    }

    /// The issue of one listed entry when its description holds `marker` (GitHub lists pull
    /// requests among issues: those are passed over).
    pub fn issue_with(self, entry: &Value, marker: &str) -> Option<Item> {
        let text = match self {
            Shape::Github | Shape::Gitea => entry["body"].as_str(),
            Shape::Gitlab => entry["description"].as_str(),
        };
        let pull = self == Shape::Github && !entry["pull_request"].is_null();
        (!pull && text.is_some_and(|t| t.contains(marker)))
            .then(|| self.item(entry))
            .flatten()
    }

    pub fn create_issue(self, repo: &str, title: &str, body: &str) -> Call {
        let text = match self {
            Shape::Github | Shape::Gitea => "body",
            Shape::Gitlab => "description",
        };
        Call::post(
            self.at(repo, &["issues"]),
            json!({"title": title, text: body}),
        )
    }

    fn comments_path(self, repo: &str, issue: u64) -> Vec<String> {
        let what = match self {
            Shape::Github | Shape::Gitea => "comments",
            Shape::Gitlab => "notes",
        };
        self.at(repo, &["issues", &issue.to_string(), what])
    }

    pub fn list_comments(self, repo: &str, issue: u64, page: u32) -> Call {
        Call::get(self.comments_path(repo, issue), self.page(page))
    }

    pub fn comment(self, repo: &str, issue: u64, body: &str) -> Call {
        Call::post(self.comments_path(repo, issue), json!({"body": body}))
    }

    /// A comment's URL from its entry: its page (`html_url`), or on GitLab, whose notes have
    /// none, the note's API address.
    pub fn comment_url(self, entry: &Value, api: &str, repo: &str, issue: u64) -> Option<String> {
        match self {
            Shape::Github | Shape::Gitea => entry["html_url"].as_str().and_then(page_url),
            Shape::Gitlab => entry["id"].as_u64().map(|id| {
                format!(
                    "{}/projects/{}/issues/{issue}/notes/{id}",
                    api.trim_end_matches('/'),
                    repo.replace('/', "%2F")
                )
            }),
        }
    }

    /// Number and page of a pull request or issue (the page a plain URL, see [`page_url`]).
    pub fn item(self, entry: &Value) -> Option<Item> {
        let (number, url) = match self {
            Shape::Github | Shape::Gitea => (&entry["number"], &entry["html_url"]),
            Shape::Gitlab => (&entry["iid"], &entry["web_url"]),
        };
        Some(Item {
            number: number.as_u64()?,
            url: page_url(url.as_str()?)?,
        })
    }

    /// Who the token is: `GET user`.
    pub fn whoami(self) -> Call {
        Call::get(vec!["user".to_owned()], Vec::new())
    }

    /// The account name in the answer to [`Shape::whoami`].
    pub fn login(self, answer: &Value) -> Option<&str> {
        match self {
            Shape::Github | Shape::Gitea => answer["login"].as_str(),
            Shape::Gitlab => answer["username"].as_str(),
        }
        .filter(|name| !name.is_empty())
    }

    /// Whether a listed pull request, issue or comment was made by `account`.
    pub fn made_by(self, entry: &Value, account: &Account) -> bool {
        match account {
            Account::Named(name) => self.author(entry) == Some(name.as_str()),
            Account::AnyBot => entry["user"]["type"].as_str() == Some("Bot"),
        }
    }

    /// The account that made a listed pull request, issue or comment.
    pub fn author(self, entry: &Value) -> Option<&str> {
        match self {
            Shape::Github | Shape::Gitea => entry["user"]["login"].as_str(),
            Shape::Gitlab => entry["author"]["username"].as_str(),
        }
    }
}

/// The most bytes of a page URL kept from a forge's answer.
const MAX_URL: usize = 2048;

/// A page URL from a forge's answer, kept only when it is a plain `https://` or `http://` URL
/// of ASCII letters, digits and `-._~:/?#%=&+,;` — no whitespace, controls, quotes, brackets,
/// markdown (`*[]()!`), mentions (`@`) or invisible and bidirectional characters — of at most
/// [`MAX_URL`] bytes: it is put in events, printed, and written into comments on other forges.
fn page_url(text: &str) -> Option<String> {
    let plain = (text.starts_with("https://") || text.starts_with("http://"))
        && text.len() <= MAX_URL
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~:/?#%=&+,;".contains(&b));
    plain.then(|| text.to_owned())
}

fn draft_title(prefix: &str, pull: &NewPull<'_>) -> String {
    if pull.draft {
        format!("{prefix}{}", pull.title)
    } else {
        pull.title.to_owned()
    }
}

/// Whose entries cordon takes for its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Account {
    /// The token's account, by the name `GET user` gave.
    Named(String),
    /// Any bot account: GitHub answers 403 to `GET user` for the tokens of GitHub Actions
    /// (`GITHUB_TOKEN`) and of GitHub Apps, whose entries are made by a bot (`"type": "Bot"`).
    /// A forgery then has to come from another app installed on the repository, not from a
    /// person.
    AnyBot,
}

struct Adapter {
    api: Api,
    shape: Shape,
    repo: String,
    /// The token's account, asked once: only what it made is taken for cordon's own.
    me: std::cell::OnceCell<Account>,
}

impl Adapter {
    /// The token's account (`GET user`).
    fn me(&self) -> Result<&Account, DeliveryError> {
        if let Some(me) = self.me.get() {
            return Ok(me);
        }
        let account = match self.api.value(&self.shape.whoami()) {
            Ok(answer) => match self.shape.login(&answer) {
                Some(login) => Account::Named(login.to_owned()),
                None => {
                    return Err(self
                        .api
                        .unexpected("an answer to GET user without the account's name"));
                }
            },
            Err(DeliveryError::Auth { status: 403, .. }) if self.shape == Shape::Github => {
                Account::AnyBot
            }
            Err(e) => return Err(e),
        };
        Ok(self.me.get_or_init(|| account))
    }

    /// Whether the listed `entry` was made by the token's account: a pull request, issue or
    /// comment holding cordon's marker but made by anyone else is someone's forgery.
    fn mine(&self, entry: &Value, me: &Account) -> bool {
        self.shape.made_by(entry, me)
    }

    /// Every entry of a listing, page by page, until `pick` finds one or the pages end. Each
    /// page is split into its entries' texts first ([`entries`]), and each entry is parsed on
    /// its own, so at most one entry's tree is held at a time.
    fn scan<T>(
        &self,
        call: impl Fn(u32) -> Call,
        pick: impl Fn(&Value) -> Option<T>,
    ) -> Result<Option<T>, DeliveryError> {
        for page in 1..=MAX_PAGES {
            let call = call(page);
            let body = self.api.send(&call, MAX_ANSWER)?;
            let listed = entries(&body).map_err(|e| {
                self.api.unexpected(&format!(
                    "a listing ({} {}) that is not a JSON array of at most {MAX_ENTRIES} \
                     entries of at most {} KiB each: {e}",
                    call.method,
                    call.path.join("/"),
                    MAX_SINGLE >> 10
                ))
            })?;
            for raw in &listed {
                let entry: Value = serde_json::from_str(raw.get())
                    .map_err(|_| self.api.unexpected("a listed entry that is not JSON"))?;
                if let Some(found) = pick(&entry) {
                    return Ok(Some(found));
                }
            }
            if listed.is_empty() {
                break;
            }
        }
        Ok(None)
    }

    fn item(&self, answer: &Value, what: &str) -> Result<Item, DeliveryError> {
        self.shape.item(answer).ok_or_else(|| {
            self.api
                .unexpected(&format!("a {what} without a number and a URL"))
        })
    }
}

impl Forge for Adapter {
    fn find_pull(&self, head: &str, base: &str) -> Result<Option<Item>, DeliveryError> {
        let me = self.me()?;
        self.scan(
            |page| self.shape.find_pull(&self.repo, head, base, page),
            |entry| {
                self.mine(entry, me)
                    .then(|| self.shape.pull_of(entry, head, base))
                    .flatten()
            },
        )
    }

    fn create_pull(&self, pull: &NewPull<'_>) -> Result<Item, DeliveryError> {
        let answer = self.api.value(&self.shape.create_pull(&self.repo, pull))?;
        self.item(&answer, "pull request")
    }

    fn find_issue(&self, marker: &str) -> Result<Option<Item>, DeliveryError> {
        let me = self.me()?;
        self.scan(
            |page| self.shape.list_issues(&self.repo, marker, page),
            |entry| {
                self.mine(entry, me)
                    .then(|| self.shape.issue_with(entry, marker))
                    .flatten()
            },
        )
    }

    fn create_issue(&self, title: &str, body: &str) -> Result<Item, DeliveryError> {
        let answer = self
            .api
            .value(&self.shape.create_issue(&self.repo, title, body))?;
        self.item(&answer, "issue")
    }

    fn find_comment(&self, issue: u64, marker: &str) -> Result<Option<String>, DeliveryError> {
        let api = self.api.root.as_str();
        let me = self.me()?;
        self.scan(
            |page| self.shape.list_comments(&self.repo, issue, page),
            |entry| {
                (self.mine(entry, me) && entry["body"].as_str().is_some_and(|b| b.contains(marker)))
                    .then(|| self.shape.comment_url(entry, api, &self.repo, issue))
                    .flatten()
            },
        )
    }

    fn comment(&self, issue: u64, body: &str) -> Result<String, DeliveryError> {
        let answer = self
            .api
            .value(&self.shape.comment(&self.repo, issue, body))?;
        self.shape
            .comment_url(&answer, self.api.root.as_str(), &self.repo, issue)
            .ok_or_else(|| self.api.unexpected("a comment without a URL"))
    }
}

/// One forge API root with its token: sends [`Call`]s.
pub struct Api {
    client: reqwest::blocking::Client,
    root: reqwest::Url,
    forge: ForgeKind,
    auth: (reqwest::header::HeaderName, reqwest::header::HeaderValue),
    /// Kept to scrub it from what the forge answers (a forge may echo it in an error).
    token: String,
    /// How long one call may take, from its request to the last byte of its answer.
    timeout: Duration,
    /// When every call of this API's action has to be done: [`CALLS_BUDGET`] timeouts after
    /// it was made.
    budget: std::time::Instant,
}

impl Api {
    /// A client for `url` that dials only `addresses` (what the delivery bounds admitted), each
    /// call ended after `timeout`.
    pub fn new(
        forge: ForgeKind,
        url: &HttpUrl,
        addresses: &[SocketAddr],
        token: &str,
        timeout: Duration,
    ) -> Result<Api, DeliveryError> {
        use reqwest::header::{AUTHORIZATION, HeaderName, HeaderValue};
        let root = reqwest::Url::parse(&url.text)
            .map_err(|e| DeliveryError::Refused(format!("the forge API URL {url}: {e}")))?;
        let (name, value) = match forge {
            ForgeKind::Github => (AUTHORIZATION, format!("Bearer {token}")),
            ForgeKind::Gitea => (AUTHORIZATION, format!("token {token}")),
            ForgeKind::Gitlab => (HeaderName::from_static("private-token"), token.to_owned()),
        };
        let mut value = HeaderValue::from_str(&value).map_err(|_| {
            DeliveryError::Refused(
                "the token holds characters no HTTP header can carry; check the secret's value"
                    .to_owned(),
            )
        })?;
        value.set_sensitive(true);
        let mut builder = reqwest::blocking::Client::builder()
            .use_rustls_tls()
            // A redirect would carry the token wherever it points.
            .redirect(reqwest::redirect::Policy::none())
            // Only the destination the bounds admitted: no `HTTPS_PROXY` from the environment.
            .no_proxy()
            // Bounds each read (and the wait for the answer's head); the whole answer is bounded
            // by the deadline `send` keeps.
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("cordon/", env!("CARGO_PKG_VERSION")));
        if !addresses.is_empty() {
            builder = builder.resolve_to_addrs(&url.host, addresses);
        }
        let client = builder
            .build()
            .map_err(|e| DeliveryError::Down(format!("the HTTP client: {e}")))?;
        Ok(Api {
            client,
            root,
            forge,
            auth: (name, value),
            token: token.to_owned(),
            timeout,
            budget: std::time::Instant::now() + timeout * CALLS_BUDGET,
        })
    }

    /// Sends `call`; a 2xx answer's JSON (of at most [`MAX_SINGLE`] bytes).
    pub fn value(&self, call: &Call) -> Result<Value, DeliveryError> {
        let body = self.send(call, MAX_SINGLE)?;
        serde_json::from_slice(&body).map_err(|_| {
            self.unexpected(&format!(
                "an answer to {} {} that is not JSON",
                call.method,
                call.path.join("/")
            ))
        })
    }

    /// Sends `call`; a 2xx answer's bytes (at most `limit`), else the error its status means.
    /// The call gets `api_timeout`, or what is left of the action's budget when that is less,
    /// from its request to the last byte of its answer.
    pub fn send(&self, call: &Call, limit: u64) -> Result<Vec<u8>, DeliveryError> {
        let mut url = self.root.clone();
        {
            let Ok(mut segments) = url.path_segments_mut() else {
                return Err(DeliveryError::Refused(format!(
                    "the forge API URL {} cannot take a path",
                    self.root
                )));
            };
            segments.pop_if_empty();
            for segment in &call.path {
                segments.push(segment);
            }
        }
        if !call.query.is_empty() {
            url.query_pairs_mut()
                .extend_pairs(call.query.iter().map(|(k, v)| (*k, v.as_str())));
        }
        let method =
            reqwest::Method::from_bytes(call.method.as_bytes()).unwrap_or(reqwest::Method::GET);
        let mut request = self
            .client
            .request(method, url.clone())
            .header(self.auth.0.clone(), self.auth.1.clone())
            .header(reqwest::header::ACCEPT, "application/json");
        if self.forge == ForgeKind::Github {
            request = request.header("x-github-api-version", "2022-11-28");
        }
        if let Some(body) = &call.body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        let what = format!("{} {}", call.method, url.path());
        let started = std::time::Instant::now();
        let left = self.budget.saturating_duration_since(started);
        let over = |started: std::time::Instant| {
            let elapsed = started.elapsed();
            if elapsed >= left && left < self.timeout {
                Some(DeliveryError::Down(format!(
                    "the {} API at {} took more than {} s, {CALLS_BUDGET} × `[delivery] \
                     api_timeout`, for the calls of one action, and {what} was stopped",
                    self.forge,
                    self.root,
                    (self.timeout * CALLS_BUDGET).as_secs()
                )))
            } else if elapsed >= self.timeout {
                Some(DeliveryError::Down(format!(
                    "the {} API at {} took more than {} s (`[delivery] api_timeout`) to answer \
                     {what}",
                    self.forge,
                    self.root,
                    self.timeout.as_secs()
                )))
            } else {
                None
            }
        };
        if left.is_zero() {
            return Err(over(started).unwrap_or_else(|| self.unexpected("no time left")));
        }
        // The whole call, head and answer, in at most this (reqwest's total timeout for the
        // request, which also bounds each read).
        let request = request.timeout(left.min(self.timeout));
        let response = request.send().map_err(|e| {
            over(started).unwrap_or_else(|| {
                DeliveryError::Down(format!(
                    "the {} API at {} did not answer {what}: {}",
                    self.forge,
                    self.root,
                    describe(&e)
                ))
            })
        })?;
        let status = response.status().as_u16();
        let limit = if (200..=299).contains(&status) {
            limit
        } else {
            MAX_ERROR as u64
        };
        let mut body = Vec::new();
        let mut answer = response.take(limit + 1);
        let mut buffer = [0u8; 16 << 10];
        loop {
            let n = answer.read(&mut buffer).map_err(|e| {
                over(started).unwrap_or_else(|| {
                    DeliveryError::Down(format!("the {} API's answer to {what}: {e}", self.forge))
                })
            })?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&buffer[..n]);
            if let Some(e) = over(started) {
                return Err(e);
            }
        }
        if body.len() as u64 > limit && (200..=299).contains(&status) {
            return Err(self.unexpected(&format!("an answer to {what} over {limit} bytes")));
        }
        body.truncate(limit as usize);
        match status {
            200..=299 => Ok(body),
            401 | 403 => Err(DeliveryError::Auth {
                forge: self.forge.to_string(),
                status,
                what,
                message: message(&body, &self.token),
            }),
            408 | 429 | 500..=599 => Err(DeliveryError::Down(format!(
                "the {} API answered {status} to {what}{}",
                self.forge,
                message(&body, &self.token)
            ))),
            _ => Err(DeliveryError::Refused(format!(
                "the {} API answered {status} to {what}{}; check `api_url` and `repo`, and that \
                 the token may reach that repository",
                self.forge,
                message(&body, &self.token)
            ))),
        }
    }

    fn unexpected(&self, what: &str) -> DeliveryError {
        DeliveryError::Down(format!(
            "the {} API at {} sent {what}",
            self.forge, self.root
        ))
    }
}

/// A listing's page split into its entries' texts: a JSON array of at most [`MAX_ENTRIES`]
/// entries of at most [`MAX_SINGLE`] bytes each (nothing of it parsed into a tree).
fn entries(body: &[u8]) -> Result<Vec<&RawValue>, serde_json::Error> {
    struct Entries<'a>(Vec<&'a RawValue>);
    impl<'de> serde::Deserialize<'de> for Entries<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Bounded;
            impl<'de> serde::de::Visitor<'de> for Bounded {
                type Value = Entries<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a JSON array")
                }
                fn visit_seq<A: serde::de::SeqAccess<'de>>(
                    self,
                    mut seq: A,
                ) -> Result<Self::Value, A::Error> {
                    use serde::de::Error as _;
                    let mut entries = Vec::new();
                    while let Some(raw) = seq.next_element::<&'de RawValue>()? {
                        if entries.len() == MAX_ENTRIES {
                            return Err(A::Error::custom(format!(
                                "more than {MAX_ENTRIES} entries"
                            )));
                        }
                        if raw.get().len() as u64 > MAX_SINGLE {
                            return Err(A::Error::custom("an entry over the bound"));
                        }
                        entries.push(raw);
                    }
                    Ok(Entries(entries))
                }
            }
            d.deserialize_seq(Bounded)
        }
    }
    serde_json::from_slice::<Entries<'_>>(body).map(|e| e.0)
}

/// The forge's own error text (`{"message": …}`), one escaped line, bounded (the answer was
/// read to [`MAX_ERROR`] bytes at most).
fn message(body: &[u8], token: &str) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let text = parsed
        .as_ref()
        .and_then(|v| v["message"].as_str().or_else(|| v["error"].as_str()))
        .unwrap_or_default();
    if text.is_empty() {
        return String::new();
    }
    let mut line = cordon_protocol::text::escape_line(&text.replace(token, "[token]")).into_owned();
    if line.len() > 200 {
        let cut = line.floor_char_boundary(200);
        line.truncate(cut);
        line.push('…');
    }
    format!(" ({line})")
}

fn describe(err: &reqwest::Error) -> String {
    let mut cause = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        cause = s.to_string();
        source = s.source();
    }
    if err.is_timeout() {
        format!("timed out ({cause})")
    } else {
        cause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pull() -> NewPull<'static> {
        NewPull {
            title: "t",
            body: "b",
            head: "cordon/x",
            base: "main",
            draft: true,
        }
    }

    #[test]
    fn each_forge_finds_and_opens_pull_requests_in_its_own_shape() {
        let cases: &[(Shape, Call, &str, Value)] = &[
            (
                Shape::Github,
                Shape::Github.create_pull("octo/w", &pull()),
                "repos/octo/w/pulls",
                json!({"title": "t", "body": "b", "head": "cordon/x", "base": "main", "draft": true}),
            ),
            (
                Shape::Gitea,
                Shape::Gitea.create_pull("octo/w", &pull()),
                "repos/octo/w/pulls",
                json!({"title": "WIP: t", "body": "b", "head": "cordon/x", "base": "main"}),
            ),
            (
                Shape::Gitlab,
                Shape::Gitlab.create_pull("grp/sub/w", &pull()),
                "projects/grp/sub/w/merge_requests",
                json!({"title": "Draft: t", "description": "b", "source_branch": "cordon/x",
                       "target_branch": "main"}),
            ),
        ];
        for (shape, call, path, body) in cases {
            assert_eq!(call.method, "POST", "{shape:?}");
            assert_eq!(call.path.join("/"), *path, "{shape:?}");
            assert_eq!(call.body.as_ref(), Some(body), "{shape:?}");
        }
        // GitLab's project path is one segment (percent-encoded when sent).
        assert_eq!(
            Shape::Gitlab.create_pull("grp/sub/w", &pull()).path[1],
            "grp/sub/w"
        );
        let find = Shape::Github.find_pull("octo/w", "cordon/x", "main", 1);
        assert!(find.query.contains(&("head", "octo:cordon/x".to_owned())));
        let find = Shape::Gitlab.find_pull("g/w", "cordon/x", "main", 2);
        assert!(
            find.query
                .contains(&("source_branch", "cordon/x".to_owned()))
        );
        assert!(find.query.contains(&("page", "2".to_owned())));
    }

    #[test]
    fn listed_entries_are_matched_by_branch_and_marker_and_pull_requests_are_not_issues() {
        let gitea = json!({"number": 4, "html_url": "https://f.test/o/r/pulls/4",
                           "head": {"ref": "cordon/x"}, "base": {"ref": "main"}});
        assert_eq!(
            Shape::Gitea.pull_of(&gitea, "cordon/x", "main"),
            Some(Item {
                number: 4,
                url: "https://f.test/o/r/pulls/4".into()
            })
        );
        assert_eq!(Shape::Gitea.pull_of(&gitea, "cordon/y", "main"), None);
        let mr = json!({"iid": 9, "web_url": "https://f.test/g/w/-/merge_requests/9",
                        "source_branch": "cordon/x", "target_branch": "main"});
        assert_eq!(
            Shape::Gitlab
                .pull_of(&mr, "cordon/x", "main")
                .map(|i| i.number),
            Some(9)
        );
        let issue =
            json!({"number": 3, "html_url": "https://f.test/i/3", "body": "x <!-- m --> y"});
        assert!(Shape::Github.issue_with(&issue, "<!-- m -->").is_some());
        assert!(Shape::Github.issue_with(&issue, "<!-- n -->").is_none());
        let pr = json!({"number": 3, "html_url": "https://f.test/p/3", "body": "<!-- m -->",
                        "pull_request": {"url": "p"}});
        assert!(Shape::Github.issue_with(&pr, "<!-- m -->").is_none());
        let gl = json!({"iid": 2, "web_url": "https://f.test/i/2", "description": "<!-- m -->"});
        assert_eq!(
            Shape::Gitlab
                .issue_with(&gl, "<!-- m -->")
                .map(|i| i.number),
            Some(2)
        );
    }

    #[test]
    fn a_forges_page_urls_are_kept_only_when_plain_and_bounded() {
        let cases: &[(&str, bool)] = &[
            ("https://f.test/o/r/pull/1", true),
            ("http://127.0.0.1:8080/o/r/pull/1", true),
            ("javascript:alert(1)", false),
            ("https://f.test/a b", false),
            ("https://f.test/a\n- Commits: forged", false),
            ("https://f.test/\u{1b}[2J", false),
            ("https://f.test/\"><img>", false),
            ("https://f.test/g/s/p/-/merge_requests/9", true),
            (
                "https://f.test/o/r/issues/3#issuecomment-12?x=1&y=%2F",
                true,
            ),
            (
                "https://f.test/7)**APPROVED**![x](https://e.test/t.png)",
                false,
            ),
            ("https://f.test/7@octo/security-team", false),
            ("https://f.test/pull/7\u{202e}txt.exe", false),
            ("https://f.test/pull/7\u{200b}", false),
            ("ftp://f.test/x", false),
        ];
        for (url, kept) in cases {
            assert_eq!(page_url(url).is_some(), *kept, "{url:?}");
        }
        assert!(page_url(&format!("https://f.test/{}", "a".repeat(MAX_URL))).is_none());
        let entry = json!({"number": 1, "html_url": "https://f.test/x\ny"});
        assert_eq!(Shape::Github.item(&entry), None);
    }

    #[test]
    fn the_tokens_account_and_each_entrys_author_are_read_in_each_forges_shape() {
        assert_eq!(Shape::Github.whoami().path, ["user"]);
        assert_eq!(Shape::Github.login(&json!({"login": "bot"})), Some("bot"));
        assert_eq!(Shape::Gitea.login(&json!({"login": ""})), None);
        assert_eq!(
            Shape::Gitlab.login(&json!({"username": "bot"})),
            Some("bot")
        );
        let github = json!({"user": {"login": "bot"}, "author": {"username": "mallory"}});
        assert_eq!(Shape::Github.author(&github), Some("bot"));
        assert_eq!(Shape::Gitea.author(&github), Some("bot"));
        assert_eq!(Shape::Gitlab.author(&github), Some("mallory"));
        assert_eq!(Shape::Github.author(&json!({})), None);
        let named = Account::Named("bot".to_owned());
        let bot = json!({"user": {"login": "github-actions[bot]", "type": "Bot"}});
        let person = json!({"user": {"login": "mallory", "type": "User"}});
        for (entry, by_named, by_any_bot) in [
            (&github, true, false),
            (&bot, false, true),
            (&person, false, false),
        ] {
            assert_eq!(Shape::Github.made_by(entry, &named), by_named, "{entry}");
            assert_eq!(
                Shape::Github.made_by(entry, &Account::AnyBot),
                by_any_bot,
                "{entry}"
            );
        }
    }

    #[test]
    fn a_listing_is_split_into_at_most_200_entries_of_at_most_256_kib_each() {
        let big = format!("[{{\"body\": \"{}\"}}]", "x".repeat(MAX_SINGLE as usize));
        let many = format!("[{}]", vec!["{}"; MAX_ENTRIES + 1].join(","));
        let full = format!("[{}]", vec!["{}"; MAX_ENTRIES].join(","));
        let cases: &[(&str, Result<usize, &str>)] = &[
            ("[]", Ok(0)),
            (r#"[{"number": 1}, {"number": 2}]"#, Ok(2)),
            (&full, Ok(MAX_ENTRIES)),
            (&many, Err("more than 200 entries")),
            (&big, Err("an entry over the bound")),
            (r#"{"message": "not a list"}"#, Err("a JSON array")),
            ("[{}", Err("EOF")),
        ];
        for (text, want) in cases {
            let got = entries(text.as_bytes())
                .map(|e| e.len())
                .map_err(|e| e.to_string());
            match (got, want) {
                (Ok(n), Ok(m)) => assert_eq!(n, *m),
                (Err(e), Err(w)) => assert!(e.contains(w), "{e}"),
                (got, want) => panic!("{}: {got:?}, not {want:?}", &text[..text.len().min(40)]),
            }
        }
    }

    #[test]
    fn comments_go_to_each_forges_comment_path_and_gitlab_notes_get_their_api_address() {
        assert_eq!(
            Shape::Github.comment("o/r", 3, "hi").path.join("/"),
            "repos/o/r/issues/3/comments"
        );
        assert_eq!(
            Shape::Gitlab.comment("g/r", 3, "hi").path.join("/"),
            "projects/g/r/issues/3/notes"
        );
        assert_eq!(
            Shape::Gitlab.comment_url(&json!({"id": 77}), "https://f.test/api/v4/", "g/r", 3),
            Some("https://f.test/api/v4/projects/g%2Fr/issues/3/notes/77".to_owned())
        );
        assert_eq!(
            Shape::Gitea.list_comments("o/r", 3, 2).query,
            vec![("limit", "50".to_owned()), ("page", "2".to_owned())]
        );
    }

    #[test]
    fn a_forges_error_text_is_one_escaped_bounded_line_without_the_token() {
        let t = "tok-0123456789";
        assert_eq!(
            message(br#"{"message":"Bad\ncredentials"}"#, t),
            " (Bad\\ncredentials)"
        );
        assert_eq!(message(b"<html>", t), "");
        let long = format!(r#"{{"message":"{}"}}"#, "x".repeat(500));
        assert!(message(long.as_bytes(), t).chars().count() < 210);
        assert_eq!(
            message(br#"{"message":"token tok-0123456789 is bad"}"#, t),
            " (token [token] is bad)",
            "a forge that echoes the token does not get it printed"
        );
    }
}
