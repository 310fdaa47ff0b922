//! `cordon batch` (DESIGN §16): the tasks file read into tasks, each checked before anything is
//! created, and a task's workspace made (`clone`). The tasks file is the user's own input, but
//! everything in it reaches a host program (git) or a model, so each field has a grammar and a
//! bound, and every problem is reported as `FILE:LINE: problem; fix`.

pub mod clone;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The most tasks one batch takes.
pub const MAX_TASKS: usize = 10_000;
/// The most bytes of one line of the tasks file.
pub const MAX_LINE: usize = 2 << 20;
/// The most bytes of the tasks file.
pub const MAX_FILE: usize = 64 << 20;
/// The most `vars` of one task, and the most bytes of one value.
pub const MAX_VARS: usize = 64;
pub const MAX_VAR_VALUE: usize = 64 << 10;
/// The most bytes of a task's prompt (as `--prompt-file` takes).
pub const MAX_PROMPT: usize = 1 << 20;
/// The most problems reported for one tasks file (the rest are counted).
const MAX_PROBLEMS: usize = 50;

/// Where a task's repository is cloned from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Repo {
    /// An `https://` URL without credentials.
    Https(String),
    /// An absolute local path (a relative one in the file is taken from the file's directory).
    Local(PathBuf),
}

impl Repo {
    /// As stored and shown: the URL, or the path.
    pub fn as_text(&self) -> String {
        match self {
            Repo::Https(url) => url.clone(),
            Repo::Local(path) => path.display().to_string(),
        }
    }
}

/// A task read back from the store, checked again field by field as the tasks file's lines are:
/// the store may be shared with other machines and written by whoever holds its password, and a
/// stored id names a directory the worker removes and makes.
pub fn parse_stored(
    id: &str,
    repo: &str,
    git_ref: Option<&str>,
    prompt: Option<&str>,
    vars: &[(String, String)],
) -> Result<Task, String> {
    check_id(id)?;
    if !repo.starts_with("https://") && !repo.starts_with('/') {
        return Err(format!(
            "the stored repo `{}` is neither an https:// URL nor an absolute path",
            cordon_protocol::text::escape_line(repo)
        ));
    }
    let repo = parse_repo(repo, Path::new("/"))?;
    if let Some(git_ref) = git_ref {
        check_ref(git_ref)?;
    }
    if vars.len() > MAX_VARS {
        return Err(format!("a task takes at most {MAX_VARS} vars"));
    }
    for (name, value) in vars {
        check_var_name(name)?;
        if value.len() > MAX_VAR_VALUE || value.contains('\0') {
            return Err(format!("the var `{name}` is too long or holds a NUL byte"));
        }
    }
    let prompt = match prompt {
        Some(prompt) if prompt.len() > MAX_PROMPT => {
            return Err(format!(
                "the prompt is longer than {} MiB",
                MAX_PROMPT >> 20
            ));
        }
        Some(prompt) => Some(fill(prompt, vars)?),
        None => None,
    };
    Ok(Task {
        id: id.to_owned(),
        repo,
        git_ref: git_ref.map(str::to_owned),
        prompt,
        vars: vars.to_vec(),
    })
}

/// A stored pipeline file name: one plain name (the batch keeps the pipeline's directory).
pub fn check_pipeline_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\0');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the stored pipeline name `{}` is not a plain file name",
            cordon_protocol::text::escape_line(name)
        ))
    }
}

/// One task: a line `{"id", "repo", "ref", "prompt", "vars"}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    pub id: String,
    pub repo: Repo,
    pub git_ref: Option<String>,
    pub prompt: Option<String>,
    pub vars: Vec<(String, String)>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    id: String,
    repo: String,
    #[serde(rename = "ref")]
    git_ref: Option<String>,
    prompt: Option<String>,
    vars: Option<serde_json::Map<String, serde_json::Value>>,
}

/// The tasks of `text` (the file `shown`, in the directory `base`), or every problem found.
pub fn parse(text: &str, shown: &str, base: &Path) -> Result<Vec<Task>, Vec<String>> {
    let mut tasks = Vec::new();
    let mut problems = Vec::new();
    let mut ids = BTreeSet::new();
    for (number, line) in text.lines().enumerate() {
        let at = format!("{shown}:{}", number + 1);
        if line.trim().is_empty() {
            continue;
        }
        match parse_line(line, base) {
            Ok(task) if !ids.insert(task.id.clone()) => problems.push(format!(
                "{at}: the id `{}` is already a task's above; give each task its own id",
                task.id
            )),
            Ok(task) => tasks.push(task),
            Err(problem) => problems.push(format!("{at}: {problem}")),
        }
        if tasks.len() > MAX_TASKS {
            problems.push(format!(
                "{at}: a batch takes at most {MAX_TASKS} tasks; split the file into batches"
            ));
            break;
        }
    }
    if tasks.is_empty() && problems.is_empty() {
        problems.push(format!(
            "{shown}: there are no tasks; write one JSON object per line, like \
             {{\"id\": \"fix-1\", \"repo\": \"https://forge.example.com/org/repo.git\", \
             \"prompt\": \"Fix the failing test\"}}"
        ));
    }
    if problems.is_empty() {
        return Ok(tasks);
    }
    let more = problems.len().saturating_sub(MAX_PROBLEMS);
    problems.truncate(MAX_PROBLEMS);
    if more > 0 {
        problems.push(format!("{shown}: {more} more problems"));
    }
    Err(problems)
}

fn parse_line(line: &str, base: &Path) -> Result<Task, String> {
    if line.len() > MAX_LINE {
        return Err(format!(
            "the line is longer than {} MiB; keep a long prompt shorter",
            MAX_LINE >> 20
        ));
    }
    let line: Line = serde_json::from_str(line).map_err(|err| {
        format!(
            "not a task ({err}); a task is one JSON object with `id` and `repo`, and optionally \
             `ref`, `prompt` and `vars`"
        )
    })?;
    check_id(&line.id)?;
    let repo = parse_repo(&line.repo, base)?;
    if let Some(git_ref) = &line.git_ref {
        check_ref(git_ref)?;
    }
    let mut vars = Vec::new();
    for (name, value) in line.vars.unwrap_or_default() {
        check_var_name(&name)?;
        let serde_json::Value::String(value) = value else {
            return Err(format!(
                "the var `{name}` is not a string; write its value in quotes"
            ));
        };
        if value.len() > MAX_VAR_VALUE || value.contains('\0') {
            return Err(format!(
                "the var `{name}` is longer than {} KiB or holds a NUL byte",
                MAX_VAR_VALUE >> 10
            ));
        }
        vars.push((name, value));
    }
    if vars.len() > MAX_VARS {
        return Err(format!("a task takes at most {MAX_VARS} vars"));
    }
    let prompt = match line.prompt {
        Some(prompt) if prompt.len() > MAX_PROMPT => {
            return Err(format!(
                "the prompt is longer than {} MiB",
                MAX_PROMPT >> 20
            ));
        }
        Some(prompt) => {
            fill(&prompt, &vars)?;
            Some(prompt)
        }
        None => None,
    };
    Ok(Task {
        id: line.id,
        repo,
        git_ref: line.git_ref,
        prompt,
        vars,
    })
}

/// Whether `id` is a task id (`[A-Za-z0-9_-]{1,64}`), as a file name may be made of it.
pub fn valid_id(id: &str) -> bool {
    check_id(id).is_ok()
}

/// `[A-Za-z0-9_-]{1,64}`: it names the task's clone directory and branch.
fn check_id(id: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the id `{}` is not 1 to 64 letters, digits, `_` or `-`; rename it",
            cordon_protocol::text::escape_line(id)
        ))
    }
}

/// `[A-Za-z_][A-Za-z0-9_]{0,63}`: it becomes `CORDON_VAR_<NAME>`.
fn check_var_name(name: &str) -> Result<(), String> {
    let mut bytes = name.bytes();
    let ok = name.len() <= 64
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the var name `{}` is not a letter or `_` followed by up to 63 letters, digits or \
             `_`; rename it (steps see it as CORDON_VAR_<NAME>)",
            cordon_protocol::text::escape_line(name)
        ))
    }
}

/// A branch, a tag or a commit id: `[A-Za-z0-9._/-]`, no `..`, no empty or dot-led component,
/// nothing git could read as an option or a revision expression.
fn check_ref(git_ref: &str) -> Result<(), String> {
    let chars_ok = git_ref
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._/-".contains(&b));
    let ok = (1..=255).contains(&git_ref.len())
        && chars_ok
        && !git_ref.starts_with('-')
        && !git_ref.contains("..")
        && !git_ref.ends_with(".lock")
        && git_ref
            .split('/')
            .all(|part| !part.is_empty() && !part.starts_with('.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the ref `{}` is not a branch, tag or commit id (letters, digits, `.`, `_`, `-` and \
             `/` between names; no `..`, no leading `-` or `.`)",
            cordon_protocol::text::escape_line(git_ref)
        ))
    }
}

/// An `https://` URL without credentials, or a local path (taken from `base` when relative).
fn parse_repo(text: &str, base: &Path) -> Result<Repo, String> {
    let shown = cordon_protocol::text::escape_line(text);
    if text.is_empty() || text.len() > 2048 || text.chars().any(|c| c.is_control() || c == ' ') {
        return Err(format!(
            "the repo `{shown}` is empty, longer than 2048 bytes or holds a space or control \
             character"
        ));
    }
    if let Some(rest) = text.strip_prefix("https://") {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if authority.contains('@') {
            return Err(format!(
                "the repo `{shown}` has credentials in its URL, which every process list would \
                 show; remove them (a private repository is cloned on the machine that runs the \
                 task, with that machine's own git credentials out of reach: use a local path)"
            ));
        }
        if authority.is_empty() {
            return Err(format!("the repo `{shown}` has no host"));
        }
        return Ok(Repo::Https(text.to_owned()));
    }
    if text.contains("://") || text.starts_with('-') || text.contains("::") {
        return Err(format!(
            "the repo `{shown}` is neither an https:// URL nor a local path; cordon clones only \
             over https or from this machine's files"
        ));
    }
    let path = base.join(text);
    if !path.is_absolute() {
        return Err(format!("the repo `{shown}` is not an absolute path"));
    }
    Ok(Repo::Local(path))
}

/// `prompt` with each `{vars.NAME}` replaced by the task's value; a name the task has no var
/// for is an error (a typo would otherwise reach the model as text).
pub fn fill(prompt: &str, vars: &[(String, String)]) -> Result<String, String> {
    const OPEN: &str = "{vars.";
    let mut out = String::with_capacity(prompt.len());
    let mut rest = prompt;
    while let Some(at) = rest.find(OPEN) {
        out.push_str(&rest[..at]);
        let after = &rest[at + OPEN.len()..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[at..]);
            return Ok(out);
        };
        let name = &after[..end];
        match vars.iter().find(|(n, _)| n == name) {
            Some((_, value)) => out.push_str(value),
            None => {
                return Err(format!(
                    "the prompt names `{{vars.{}}}`, which is not one of the task's vars; add it \
                     to `vars` or fix the name",
                    cordon_protocol::text::escape_line(name)
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> Result<Task, String> {
        parse(line, "tasks.jsonl", Path::new("/batch"))
            .map(|mut t| t.remove(0))
            .map_err(|p| p.join("\n"))
    }

    #[test]
    fn a_full_line_becomes_a_task() {
        let task = one(
            r##"{"id":"fix-1","repo":"https://forge.example.com/o/r.git","ref":"release/1.2","prompt":"Fix {vars.issue} now","vars":{"issue":"#12"}}"##,
        )
        .expect("task");
        assert_eq!(
            task.repo,
            Repo::Https("https://forge.example.com/o/r.git".to_owned())
        );
        assert_eq!(task.git_ref.as_deref(), Some("release/1.2"));
        assert_eq!(
            fill(task.prompt.as_deref().unwrap_or_default(), &task.vars).as_deref(),
            Ok("Fix #12 now")
        );
    }

    #[test]
    fn a_relative_local_repo_is_taken_from_the_tasks_file_directory() {
        let task = one(r#"{"id":"a","repo":"repos/one"}"#).expect("task");
        assert_eq!(task.repo, Repo::Local(PathBuf::from("/batch/repos/one")));
    }

    #[test]
    fn each_bad_field_is_refused_with_its_line_and_fix() {
        let table = [
            (
                r#"{"id":"a b","repo":"/r"}"#,
                "tasks.jsonl:1: the id `a b` is not 1 to 64 letters",
            ),
            (r#"{"id":"../x","repo":"/r"}"#, "the id `../x` is not"),
            (
                r#"{"id":"a","repo":"/r","extra":1}"#,
                "unknown field `extra`",
            ),
            (r#"{"id":"a"}"#, "missing field `repo`"),
            (
                r#"{"id":"a","repo":"ssh://h/r"}"#,
                "neither an https:// URL nor a local path",
            ),
            (
                r#"{"id":"a","repo":"http://h/r"}"#,
                "neither an https:// URL nor a local path",
            ),
            (
                r#"{"id":"a","repo":"file:///r"}"#,
                "neither an https:// URL nor a local path",
            ),
            (r#"{"id":"a","repo":"ext::sh -c x"}"#, "holds a space"),
            (r#"{"id":"a","repo":"ext::x"}"#, "neither an https:// URL"),
            (
                r#"{"id":"a","repo":"--upload-pack=x"}"#,
                "neither an https:// URL",
            ),
            (
                r#"{"id":"a","repo":"https://u:p@forge.example.com/r"}"#,
                "has credentials in its URL",
            ),
            (r#"{"id":"a","repo":"https:///r"}"#, "has no host"),
            (
                r#"{"id":"a","repo":"/r","ref":"--force"}"#,
                "the ref `--force` is not",
            ),
            (
                r#"{"id":"a","repo":"/r","ref":"a..b"}"#,
                "the ref `a..b` is not",
            ),
            (
                r#"{"id":"a","repo":"/r","ref":"HEAD@{1}"}"#,
                "the ref `HEAD@{1}` is not",
            ),
            (
                r#"{"id":"a","repo":"/r","ref":"x/.hidden"}"#,
                "the ref `x/.hidden` is not",
            ),
            (
                r#"{"id":"a","repo":"/r","vars":{"1x":"v"}}"#,
                "the var name `1x` is not",
            ),
            (
                r#"{"id":"a","repo":"/r","vars":{"x":3}}"#,
                "the var `x` is not a string",
            ),
            (
                r#"{"id":"a","repo":"/r","prompt":"{vars.nope}"}"#,
                "names `{vars.nope}`",
            ),
            ("not json", "not a task"),
        ];
        for (line, want) in table {
            let err = one(line).expect_err(line);
            assert!(err.contains(want), "{line}: {err}");
        }
    }

    #[test]
    fn ids_must_differ_and_an_empty_file_says_what_a_task_looks_like() {
        let err = parse(
            "{\"id\":\"a\",\"repo\":\"/r\"}\n\n{\"id\":\"a\",\"repo\":\"/r\"}\n",
            "t.jsonl",
            Path::new("/"),
        )
        .expect_err("duplicate");
        assert_eq!(
            err,
            vec!["t.jsonl:3: the id `a` is already a task's above; give each task its own id"]
        );
        let err = parse("\n  \n", "t.jsonl", Path::new("/")).expect_err("empty");
        assert!(
            err[0].starts_with("t.jsonl: there are no tasks; write one JSON object"),
            "{err:?}"
        );
    }

    #[test]
    fn the_bounds_are_reached_and_named() {
        let big = format!(
            r#"{{"id":"a","repo":"/r","prompt":"{}"}}"#,
            "x".repeat(MAX_PROMPT + 1)
        );
        assert!(
            one(&big)
                .expect_err("big")
                .contains("the prompt is longer than 1 MiB")
        );
        let vars: Vec<String> = (0..=MAX_VARS).map(|i| format!("\"v{i}\":\"x\"")).collect();
        let many = format!(r#"{{"id":"a","repo":"/r","vars":{{{}}}}}"#, vars.join(","));
        assert!(one(&many).expect_err("many").contains("at most 64 vars"));
        let lines: String = (0..=MAX_TASKS)
            .map(|i| format!("{{\"id\":\"t{i}\",\"repo\":\"/r\"}}\n"))
            .collect();
        let err = parse(&lines, "t.jsonl", Path::new("/")).expect_err("too many");
        assert!(
            err.iter().any(|p| p.contains("at most 10000 tasks")),
            "{err:?}"
        );
        let bad: String = (0..60).map(|_| "x\n").collect();
        let err = parse(&bad, "t.jsonl", Path::new("/")).expect_err("bad");
        assert_eq!(err.len(), MAX_PROBLEMS + 1);
        assert_eq!(
            err.last().map(String::as_str),
            Some("t.jsonl: 10 more problems")
        );
    }

    #[test]
    fn a_stored_task_is_checked_again_and_a_tampered_one_refused() {
        let ok = parse_stored(
            "t-1",
            "/r",
            Some("main"),
            Some("{vars.n}"),
            &[("n".into(), "1".into())],
        )
        .expect("stored");
        assert_eq!(ok.prompt.as_deref(), Some("1"));
        for (id, repo, git_ref, want) in [
            ("../../victim", "/r", None, "the id `../../victim` is not"),
            ("x\u{1b}]0;t\u{7}", "/r", None, "is not 1 to 64 letters"),
            (
                "t",
                "relative",
                None,
                "neither an https:// URL nor an absolute path",
            ),
            ("t", "/r", Some("-x"), "the ref `-x` is not"),
        ] {
            let err = parse_stored(id, repo, git_ref, None, &[]).expect_err(id);
            assert!(err.contains(want) && !err.contains('\u{1b}'), "{id}: {err}");
        }
        assert!(parse_stored("t", "/r", None, None, &[("1".into(), "v".into())]).is_err());
        for bad in ["", "..", "a/b", "."] {
            assert!(check_pipeline_name(bad).is_err(), "{bad}");
        }
        assert!(check_pipeline_name("pipeline.yaml").is_ok());
    }

    #[test]
    fn fill_keeps_other_braces_and_an_unclosed_reference() {
        let vars = vec![("n".to_owned(), "1".to_owned())];
        assert_eq!(
            fill("{x} {vars.n}{vars.n} {vars.", &vars).as_deref(),
            Ok("{x} 11 {vars.")
        );
    }
}
