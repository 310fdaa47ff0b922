//! A batch task's workspace: a fresh clone of its repository at its ref, made by the host's git
//! under a pinned environment, with the batch's tooling committed on top.
//!
//! The repository is data from elsewhere, so git runs as the push does (DESIGN §10, §18): the
//! program from fixed system directories, never `PATH`; no system or global configuration; hooks
//! off; only the `https` protocol, or `file` for a local path, which is cloned with `--no-local`
//! (objects copied through git's own transport, never hard links into the source);
//! no submodules; no redirects; every object checked (`transfer.fsckObjects`); each command in
//! its own process group, stopped at its time limit; a local source that borrows another
//! repository's objects or refs is refused, and a checkout larger than [`MAX_CHECKOUT`] too. The
//! tooling is written through a view of the clone (no link followed) into `.cordon-batch/`,
//! which the repository must not have.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use cordon_workspace::{View, WsPath};

use super::{Repo, Task};
use crate::run::ToolingSnapshot;

/// The directory of the clone holding the batch's tooling.
pub const TOOLING_DIR: &str = ".cordon-batch";
/// The branch a task's clone works on.
pub const BRANCH: &str = "cordon-batch";
/// How long one git command of a clone may take.
pub const GIT_TIMEOUT: Duration = Duration::from_secs(600);
/// Bytes of data memory git and each helper it starts may use.
const GIT_MEMORY: u64 = 2 << 30;
/// The most bytes a task's checkout may hold (the sum of its files' sizes), checked before any
/// file is written: a small repository can name one large blob many times.
pub const MAX_CHECKOUT: u64 = 8 << 30;

/// The task's workspace at `dest` (which must not exist; its parent must), with `tooling` in
/// [`TOOLING_DIR`] committed on [`BRANCH`]. `home` is an empty directory of cordon's own, git's
/// `HOME`. Errors name the task's repository and what to fix.
pub fn make(
    task: &Task,
    tooling: &ToolingSnapshot,
    dest: &Path,
    home: &Path,
) -> Result<(), String> {
    let program = crate::deliver::push::git_program().map_err(|e| e.to_string())?;
    let git = Git::clone_to(&program, home, &task.repo, dest)?;
    let commit = git.resolve(dest, task.git_ref.as_deref())?;
    git.check_size(dest, &commit)?;
    git.run(
        dest,
        &owned(&["checkout", "--quiet", "-B", BRANCH, &commit]),
        "check out",
    )?;
    let view =
        View::open(dest).map_err(|e| format!("cannot open the clone {}: {e}", dest.display()))?;
    let dir = WsPath::new(TOOLING_DIR).map_err(|e| e.to_string())?;
    if view.meta(&dir).map_err(|e| e.to_string())?.is_some() {
        return Err(format!(
            "the repository {} has a `{TOOLING_DIR}` entry, where cordon puts the batch's \
             pipeline; rename it in the repository",
            git.shown()
        ));
    }
    for (path, text) in tooling.files() {
        let path = WsPath::new(&format!("{TOOLING_DIR}/{path}")).map_err(|e| e.to_string())?;
        if let (Some(parent), _) = path.split() {
            let parent = WsPath::from_bytes(parent).map_err(|e| e.to_string())?;
            view.create_dirs(&parent).map_err(|e| e.to_string())?;
        }
        view.write(&path, text.as_bytes())
            .map_err(|e| e.to_string())?;
    }
    git.run(dest, &owned(&["add", "--", TOOLING_DIR]), "add the tooling")?;
    git.run(
        dest,
        &owned(&[
            "-c",
            "user.name=cordon batch",
            "-c",
            "user.email=cordon@localhost",
            "commit",
            "--quiet",
            "--no-verify",
            "--no-gpg-sign",
            "-m",
            "cordon batch: the pipeline and its agent files",
        ]),
        "commit the tooling",
    )?;
    Ok(())
}

/// Rebuilds a task's workspace at `dest` (which must not exist; its parent must) from its run's
/// latest record (`record`, DESIGN §16): a fresh clone of the task's repository, which must hold the
/// record's origin; the record's objects written in (each re-hashed); HEAD's branch
/// [`BRANCH`] at the recorded HEAD, checked out by git as a fresh clone is; then the recorded
/// work tree's difference from that commit written through a view of the clone. `home` is as
/// for [`make`].
pub fn rebuild(task: &Task, record: &[u8], dest: &Path, home: &Path) -> Result<(), String> {
    let carried = &cordon_git::Carried::decode(record).map_err(|e| e.to_string())?;
    let program = crate::deliver::push::git_program().map_err(|e| e.to_string())?;
    let git = Git::clone_to(&program, home, &task.repo, dest)?;
    let origin = carried.origin.to_string();
    if git.resolve(dest, Some(&origin)).as_deref() != Ok(origin.as_str()) {
        return Err(format!(
            "the repository {} no longer has the run's origin commit {origin}; the run can be \
             resumed only on the machine that began it",
            git.shown()
        ));
    }
    let repo = || {
        let view = View::open(dest)
            .map_err(|e| format!("cannot open the clone {}: {e}", dest.display()))?;
        let dirs = cordon_git::Dirs {
            git_dir: dest.join(".git"),
            common_dir: dest.join(".git"),
        };
        let repo = cordon_git::Repo::open(
            &view,
            dirs,
            None,
            cordon_git::Identity::default(),
            cordon_git::Guard::default(),
        )
        .map_err(|e| format!("cannot open the clone {}: {e}", dest.display()))?;
        Ok::<_, String>((view, repo))
    };
    let (_, opened) = repo()?;
    opened
        .import_carried(carried)
        .map_err(|e| format!("the run's workspace record: {e}"))?;
    // The record's objects were written as they came: git checks them (and the clone's, once
    // more: a whole-repository check, within git's time and memory bounds, so a very large
    // repository may be refused here rather than rebuilt unchecked) as strictly as a fetch does
    // (`transfer.fsckObjects`) before it checks any out. Both checkouts, HEAD's and
    // the recorded work tree, are sized as a task's first checkout is.
    git.run(
        dest,
        &owned(&["fsck", "--strict", "--no-progress", "--no-dangling"]),
        "check the record's objects",
    )?;
    let head = carried.head.to_string();
    git.check_size(dest, &head)?;
    git.check_size(dest, &carried.tree.to_string())?;
    git.run(
        dest,
        &owned(&["checkout", "--quiet", "-B", BRANCH, &head]),
        "check out",
    )?;
    let (view, opened) = repo()?;
    opened
        .restore_carried(&view, carried)
        .map_err(|e| format!("the run's workspace record: {e}"))?;
    view.sync_filesystem()
        .map_err(|e| format!("cannot flush the clone {}: {e}", dest.display()))
}

/// Refuses a local source whose repository reaches elsewhere: git's upload-pack follows a
/// `.git` file, a linked `objects` or `refs`, a `commondir` and the alternates files, so a
/// hostile repository could hand the clone another repository of this machine (a password
/// store, a private checkout). Each entry is looked at without following links; the source is
/// data at rest (a checkout the user named), read once by the clone right after.
fn refuse_indirections(source: &Path) -> Result<(), String> {
    let shown = cordon_protocol::text::escape_line(&source.display().to_string()).into_owned();
    let kind = |path: &Path| std::fs::symlink_metadata(path).ok().map(|m| m.file_type());
    let git_dir = match kind(&source.join(".git")) {
        Some(t) if t.is_dir() => source.join(".git"),
        Some(_) => {
            return Err(format!(
                "the repository {shown} has a `.git` that is a link or a file (a worktree or a                  gitfile pointing elsewhere); clone it to a plain repository and name that"
            ));
        }
        // A bare repository.
        None => source.to_path_buf(),
    };
    for entry in ["objects", "refs", "HEAD", "packed-refs", "config"] {
        if kind(&git_dir.join(entry)).is_some_and(|t| t.is_symlink()) {
            return Err(format!(
                "the repository {shown} has a link at `{entry}` in its git directory; cordon                  clones only a repository whose git directory is its own"
            ));
        }
    }
    for entry in [
        "commondir",
        "objects/info/alternates",
        "objects/info/http-alternates",
    ] {
        if kind(&git_dir.join(entry)).is_some() {
            return Err(format!(
                "the repository {shown} borrows from another (`{entry}`); make a standalone                  copy (`git repack -a -d`, then remove `{entry}`) and name that"
            ));
        }
    }
    Ok(())
}

fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

struct Git<'a> {
    program: &'a Path,
    home: &'a Path,
    repo: &'a Repo,
}

impl<'a> Git<'a> {
    /// `program` (git, from the fixed directories) run for `repo` with `home`, once it has made
    /// a clone of `repo` at `dest`, without a checkout.
    fn clone_to(
        program: &'a Path,
        home: &'a Path,
        repo: &'a Repo,
        dest: &Path,
    ) -> Result<Git<'a>, String> {
        let git = Git {
            program,
            home,
            repo,
        };
        git.clone_without_checkout(dest)?;
        Ok(git)
    }

    /// A clone of the task's repository at `dest`, without a checkout.
    fn clone_without_checkout(&self, dest: &Path) -> Result<(), String> {
        let parent = dest.parent().unwrap_or(Path::new("/"));
        let source = match &self.repo {
            Repo::Https(url) => url.clone(),
            Repo::Local(path) => {
                refuse_indirections(path)?;
                path.display().to_string()
            }
        };
        self.run(
            parent,
            &[
                "clone",
                "--no-local",
                "--no-checkout",
                "--no-recurse-submodules",
                "--quiet",
                "--",
                &source,
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .chain([dest.display().to_string()])
            .collect::<Vec<_>>(),
            "clone",
        )?;
        Ok(())
    }

    fn shown(&self) -> String {
        cordon_protocol::text::escape_line(&self.repo.as_text()).into_owned()
    }

    /// The commit `git_ref` names in the clone (a branch of the remote, a tag or a commit id;
    /// none: the remote's default branch).
    fn resolve(&self, clone: &Path, git_ref: Option<&str>) -> Result<String, String> {
        let candidates: Vec<String> = match git_ref {
            None => vec!["HEAD".to_owned()],
            Some(name) => vec![
                format!("refs/remotes/origin/{name}"),
                format!("refs/tags/{name}"),
                name.to_owned(),
            ],
        };
        for candidate in &candidates {
            let spec = format!("{candidate}^{{commit}}");
            if let Ok(out) = self.run(
                clone,
                &owned(&[
                    "rev-parse",
                    "--verify",
                    "--quiet",
                    "--end-of-options",
                    &spec,
                ]),
                "resolve the ref",
            ) {
                let commit = out.trim();
                if commit.len() >= 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Ok(commit.to_owned());
                }
            }
        }
        Err(format!(
            "the repository {} has no branch, tag or commit `{}`; fix the task's `ref`",
            self.shown(),
            cordon_protocol::text::escape_line(git_ref.unwrap_or("HEAD"))
        ))
    }

    /// Refuses a checkout of `commit` larger than [`MAX_CHECKOUT`], or with more files than
    /// one bounded listing holds (about 150,000), before any file is written.
    fn check_size(&self, clone: &Path, commit: &str) -> Result<(), String> {
        let listing = self.run(
            clone,
            &owned(&[
                "ls-tree",
                "-r",
                "--format=%(objectsize)",
                "--end-of-options",
                commit,
            ]),
            "size the checkout",
        )?;
        if listing.len() >= crate::host_program::MAX_OUTPUT {
            return Err(format!(
                "the repository {} has more files at its ref than cordon sizes before a checkout                  (a listing of {} MiB); a batch takes smaller repositories",
                self.shown(),
                crate::host_program::MAX_OUTPUT >> 20
            ));
        }
        let total = listing
            .lines()
            .filter_map(|line| line.trim().parse::<u64>().ok())
            .fold(0u64, u64::saturating_add);
        if total > MAX_CHECKOUT {
            return Err(format!(
                "the repository {} would check out {} MiB, more than the {} MiB a task's clone                  may hold",
                self.shown(),
                total >> 20,
                MAX_CHECKOUT >> 20
            ));
        }
        Ok(())
    }

    /// git with `args` after the pinned configuration, in `dir`; its stdout.
    fn run(&self, dir: &Path, args: &[String], what: &str) -> Result<String, String> {
        let mut command = Command::new(self.program);
        command
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ASKPASS", "")
            // A partial clone's source could otherwise make git fetch missing objects by
            // running its configured upload-pack (host git before 2.45.1 did).
            .env("GIT_NO_LAZY_FETCH", "1")
            .env("LC_ALL", "C")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for setting in [
            "core.hooksPath=/dev/null",
            "core.fsmonitor=false",
            "core.attributesFile=/dev/null",
            "core.askPass=",
            "credential.helper=",
            "http.followRedirects=false",
            "http.lowSpeedLimit=1024",
            "http.lowSpeedTime=60",
            "protocol.allow=never",
            "protocol.https.allow=always",
            "protocol.file.allow=always",
            "submodule.recurse=false",
            "transfer.fsckObjects=true",
            "gc.auto=0",
            "advice.detachedHead=false",
        ] {
            command.arg("-c").arg(setting);
        }
        command.args(args);
        cordon_sandbox::host::confine(&mut command, GIT_MEMORY);
        let finished = crate::host_program::run_bounded(command, GIT_TIMEOUT)
            .map_err(|e| format!("git ({what}) of {}: {e}", self.shown()))?;
        if finished.timed_out {
            return Err(format!(
                "git ({what}) of {} took more than {} s and was stopped",
                self.shown(),
                GIT_TIMEOUT.as_secs()
            ));
        }
        if !finished.status.success() {
            let stderr = String::from_utf8_lossy(&finished.stderr);
            // git's reason is its first `fatal:` line (a refused owner is explained there and
            // in the lines after it); else the last lines.
            let lines: Vec<&str> = stderr.lines().collect();
            let from = lines
                .iter()
                .position(|l| l.starts_with("fatal:"))
                .unwrap_or(lines.len().saturating_sub(3));
            let tail: Vec<&str> = lines.iter().skip(from).take(4).copied().collect();
            return Err(format!(
                "git ({what}) of {} failed: {}",
                self.shown(),
                cordon_protocol::text::escape_line(&tail.join(" / "))
            ));
        }
        Ok(String::from_utf8_lossy(&finished.stdout).into_owned())
    }
}

/// Where a task's clone lives on the machine that runs it: `<state>/batches/<BATCH>/<TASK_ID>`.
pub fn workspace_dir(state: &Path, batch: cordon_protocol::RunId, task: &str) -> PathBuf {
    state.join("batches").join(batch.to_string()).join(task)
}
