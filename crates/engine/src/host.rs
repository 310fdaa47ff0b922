//! `HostGit`: the one place besides sandbox exec that spawns processes. Every git command runs
//! with a pinned environment (DESIGN §3 "Host boundary"): `GIT_DIR`, `GIT_COMMON_DIR` and
//! `GIT_WORK_TREE` fixed to the directories opened at run start (device and inode re-checked
//! before each command), no system config, a global config file cordon writes holding only the
//! user's name and e-mail, and hooks, fsmonitor and the attributes file switched off. The commit
//! action stages with `hash-object --no-filters` + `update-index` and commits with `commit-tree`
//! + `update-ref`, so no content filter, hook or attribute planted by an agent ever runs.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cordon_protocol::RunId;

/// The author when neither the user's global config nor the repository names one.
pub const DEFAULT_NAME: &str = "cordon";
pub const DEFAULT_EMAIL: &str = "cordon@localhost";

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(
        "the workspace `{0}` is not a git work tree cordon can use (no .git, or a .git file that does not check out); run `git init` there or pass the top of the work tree with -w"
    )]
    NotGit(PathBuf),
    #[error("cannot run git: {0}; install git")]
    Spawn(String),
    #[error("`git {args}` failed: {stderr}")]
    Git { args: String, stderr: String },
    #[error(
        "the repository has no commit yet; commit the pipeline and its tooling files first (`git add` + `git commit`)"
    )]
    NoHead,
    #[error(
        "tooling file `{0}` is not tracked by git; commit it first (`git add {0} && git commit`)"
    )]
    Untracked(String),
    #[error("tooling file `{0}` has uncommitted changes; commit or restore it before `cordon run`")]
    Modified(String),
    #[error(
        "the pipeline has a commit action and the worktree is dirty; commit or stash these paths first:\n{0}"
    )]
    Dirty(String),
    #[error(
        "refusing to commit: `{0}` changed since the run started (a step may have planted git configuration); inspect it, then resume"
    )]
    Tampered(PathBuf),
    #[error("refusing to run git: `{0}` was replaced since the run started; inspect the workspace")]
    Replaced(PathBuf),
    #[error("cannot {action} `{path}`")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl HostError {
    /// Errors that are the user's configuration to fix (exit 2).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            HostError::NotGit(_)
                | HostError::NoHead
                | HostError::Untracked(_)
                | HostError::Modified(_)
                | HostError::Dirty(_)
        )
    }
}

/// A commit the action created, or found already made by this run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    pub sha: String,
    /// `false` when the commit already existed (resume after a crash).
    pub created: bool,
}

/// The repository facts the run started with.
#[derive(serde::Serialize, serde::Deserialize)]
struct Baseline {
    config: Option<Vec<u8>>,
    absent: Vec<String>,
}

/// The pinned git of one run.
#[derive(Debug)]
pub struct HostGit {
    git: PathBuf,
    workspace: PathBuf,
    git_dir: PathBuf,
    common_dir: PathBuf,
    config_file: PathBuf,
    /// `.git/config` (of the common dir) as it was at run start.
    config: Option<Vec<u8>>,
    /// Planted-file checks: these did not exist at start.
    absent: Vec<PathBuf>,
    ids: Vec<(PathBuf, (u64, u64))>,
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> HostError {
    let path = path.to_path_buf();
    move |source| HostError::Io {
        action,
        path,
        source,
    }
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

impl HostGit {
    /// Opens the workspace's git directories and writes the pinned global config into
    /// `scratch` (a per-run directory in the state dir). `identity` is the user's name and
    /// e-mail ([`user_identity`]); without one the author is `cordon <cordon@localhost>`.
    pub fn open(
        workspace: &Path,
        scratch: &Path,
        identity: Option<(String, String)>,
    ) -> Result<HostGit, HostError> {
        let dirs = cordon_sandbox::git::discover(workspace)
            .ok()
            .flatten()
            .ok_or_else(|| HostError::NotGit(workspace.to_path_buf()))?;
        let common_dir = dirs
            .common_dir
            .clone()
            .unwrap_or_else(|| dirs.git_dir.clone());
        let git = find_git().ok_or_else(|| HostError::Spawn("`git` is not on PATH".to_owned()))?;
        fs::create_dir_all(scratch).map_err(io("create", scratch))?;
        let (name, email) =
            identity.unwrap_or_else(|| (DEFAULT_NAME.to_owned(), DEFAULT_EMAIL.to_owned()));
        let config_file = scratch.join("gitconfig");
        let text = format!(
            "[user]\n\tname = {}\n\temail = {}\n",
            quote(&name),
            quote(&email)
        );
        fs::write(&config_file, text).map_err(io("write", &config_file))?;
        let _ = fs::set_permissions(&config_file, fs::Permissions::from_mode(0o600));
        // The baseline is what the repository looked like when the run started: written once
        // into the run's scratch directory, read back on resume, so a file planted before a
        // crash is still caught after it.
        let baseline = scratch.join("git-baseline.json");
        let (config, absent) = match fs::read(&baseline)
            .ok()
            .and_then(|b| serde_json::from_slice::<Baseline>(&b).ok())
        {
            Some(b) => (b.config, b.absent.into_iter().map(PathBuf::from).collect()),
            None => {
                let config = fs::read(common_dir.join("config")).ok();
                let absent: Vec<PathBuf> = [
                    dirs.git_dir.join("commondir"),
                    dirs.git_dir.join("config.worktree"),
                    common_dir.join("config.worktree"),
                ]
                .into_iter()
                .filter(|p| fs::symlink_metadata(p).is_err())
                .collect();
                let record = Baseline {
                    config: config.clone(),
                    absent: absent.iter().map(|p| p.display().to_string()).collect(),
                };
                fs::write(&baseline, serde_json::to_vec(&record).unwrap_or_default())
                    .map_err(io("write", &baseline))?;
                (config, absent)
            }
        };
        let ids = [
            workspace.to_path_buf(),
            dirs.git_dir.clone(),
            common_dir.clone(),
        ]
        .into_iter()
        .filter_map(|p| file_id(&p).map(|id| (p, id)))
        .collect();
        Ok(HostGit {
            git,
            workspace: workspace.to_path_buf(),
            git_dir: dirs.git_dir,
            common_dir,
            config_file,
            config,
            absent,
            ids,
        })
    }

    fn command(&self, args: &[&str]) -> Result<Command, HostError> {
        for (path, id) in &self.ids {
            if file_id(path) != Some(*id) {
                return Err(HostError::Replaced(path.clone()));
            }
        }
        let mut cmd = Command::new(&self.git);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("LC_ALL", "C")
            .env("GIT_DIR", &self.git_dir)
            .env("GIT_COMMON_DIR", &self.common_dir)
            .env("GIT_WORK_TREE", &self.workspace)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", &self.config_file)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .args([
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "core.fsmonitor=false",
                "-c",
                "core.attributesFile=/dev/null",
                // A submodule's `.git` is ordinary workspace content the sandbox can write; git
                // recursing into it would run its config (fsmonitor, filters) on the host. Never
                // recurse: status and diff ignore submodules, and no command descends into one.
                "-c",
                "diff.ignoreSubmodules=all",
                "-c",
                "submodule.recurse=false",
            ])
            .args(args)
            .current_dir(&self.workspace)
            .stdin(Stdio::null());
        Ok(cmd)
    }

    fn run(
        &self,
        args: &[&str],
        input: Option<&[u8]>,
        index: Option<&Path>,
    ) -> Result<Vec<u8>, HostError> {
        let mut cmd = self.command(args)?;
        if let Some(index) = index {
            cmd.env("GIT_INDEX_FILE", index);
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        if input.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().map_err(|e| HostError::Spawn(e.to_string()))?;
        if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin
                .write_all(bytes)
                .map_err(|e| HostError::Spawn(e.to_string()))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| HostError::Spawn(e.to_string()))?;
        if !out.status.success() {
            return Err(HostError::Git {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(out.stdout)
    }

    fn text(&self, args: &[&str]) -> Result<String, HostError> {
        Ok(String::from_utf8_lossy(&self.run(args, None, None)?).into_owned())
    }

    fn head(&self) -> Result<String, HostError> {
        self.text(&["rev-parse", "--verify", "-q", "HEAD^{commit}"])
            .map(|s| s.trim().to_owned())
            .map_err(|err| match err {
                // `rev-parse --verify` fails exactly when there is no commit.
                HostError::Git { .. } => HostError::NoHead,
                other => other,
            })
    }

    /// What changed in the workspace against `HEAD`, one `M path` / `A path` / `D path` line each,
    /// computed from a filter-free tree (what resume prints, in `git status --short` form).
    pub fn status_short(&self) -> Result<String, HostError> {
        let (head, tree) = self.snapshot_tree()?;
        let out = self.text(&[
            "diff-tree",
            "-r",
            "--name-status",
            "--no-renames",
            &head,
            &tree,
        ])?;
        Ok(out
            .lines()
            .filter_map(|line| line.split_once('\t'))
            .map(|(status, path)| format!(" {status} {path}\n"))
            .collect())
    }

    /// The workspace as a tree object, staged without filters into a scratch index (the real
    /// index is untouched): `(HEAD, tree)`.
    fn snapshot_tree(&self) -> Result<(String, String), HostError> {
        let head = self.head()?;
        let index = self.config_file.with_file_name("scratch-index");
        let tree = self.stage(&head, Some(&index), &[])?;
        Ok((head, tree))
    }

    /// Every changed or untracked path (for the dirty-worktree refusal).
    pub fn dirty_paths(&self) -> Result<Vec<String>, HostError> {
        let out = self.run(
            &[
                "status",
                "--porcelain=v1",
                "-z",
                "--untracked-files=all",
                "--no-renames",
                "--ignore-submodules=all",
            ],
            None,
            None,
        )?;
        Ok(out
            .split(|&b| b == 0)
            .filter(|entry| entry.len() > 3)
            .map(|entry| String::from_utf8_lossy(&entry[3..]).into_owned())
            .collect())
    }

    /// Refuses unless every tooling path (workspace-relative) is tracked and unmodified.
    pub fn check_tooling(&self, paths: &[String]) -> Result<(), HostError> {
        self.head()?;
        for path in paths {
            if self
                .run(&["ls-files", "--error-unmatch", "--", path], None, None)
                .is_err()
            {
                return Err(HostError::Untracked(path.clone()));
            }
            let status = self.run(
                &[
                    "status",
                    "--porcelain=v1",
                    "--ignore-submodules=all",
                    "--",
                    path,
                ],
                None,
                None,
            )?;
            if !status.is_empty() {
                return Err(HostError::Modified(path.clone()));
            }
        }
        Ok(())
    }

    /// The workspace's changes against `HEAD` as a binary-safe patch between two trees, so no
    /// clean filter or diff driver ever reads a workspace file.
    pub fn diff(&self) -> Result<Vec<u8>, HostError> {
        let (head, tree) = self.snapshot_tree()?;
        self.run(
            &[
                "diff-tree",
                "-p",
                "--binary",
                "--no-ext-diff",
                "--no-textconv",
                "--no-renames",
                &head,
                &tree,
            ],
            None,
            None,
        )
    }

    /// Stages every file of the workspace except `exclude` into `index` (the real index when
    /// `None`), starting from `head`'s tree: contents are hashed with `--no-filters`, modes from
    /// the file system, deletions removed. Returns the written tree.
    fn stage(
        &self,
        head: &str,
        index: Option<&Path>,
        exclude: &[String],
    ) -> Result<String, HostError> {
        let excluded = |path: &str| {
            exclude
                .iter()
                .any(|e| path == e || path.starts_with(&format!("{}/", e.trim_end_matches('/'))))
        };
        // Start the index from HEAD's tree (no filters: read-tree reads objects only).
        self.run(&["read-tree", head], None, index)?;
        let tracked = self.run(&["ls-tree", "-r", "-z", "--name-only", head], None, None)?;
        let untracked = self.run(
            &["ls-files", "-z", "--others", "--exclude-standard"],
            None,
            None,
        )?;
        let mut paths: Vec<String> = tracked
            .split(|&b| b == 0)
            .chain(untracked.split(|&b| b == 0))
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .filter(|p| !excluded(p))
            .collect();
        paths.sort();
        paths.dedup();
        let mut index_info = String::new();
        let mut files = Vec::new();
        for path in &paths {
            let full = self.workspace.join(path);
            match fs::symlink_metadata(&full) {
                Err(_) => index_info.push_str(&format!("0 {}\t{path}\n", "0".repeat(40))),
                Ok(meta) if meta.file_type().is_symlink() => {
                    let target = fs::read_link(&full).map_err(io("read the link", &full))?;
                    let sha = self.run(
                        &["hash-object", "-w", "--no-filters", "--stdin"],
                        Some(target.as_os_str().as_encoded_bytes()),
                        None,
                    )?;
                    index_info.push_str(&format!(
                        "120000 {}\t{path}\n",
                        String::from_utf8_lossy(&sha).trim()
                    ));
                }
                Ok(meta) if meta.is_file() => files.push((
                    path.clone(),
                    if meta.mode() & 0o111 != 0 {
                        "100755"
                    } else {
                        "100644"
                    },
                )),
                // Directories (submodules) and other kinds keep HEAD's entry.
                Ok(_) => {}
            }
        }
        if !files.is_empty() {
            let list: String = files.iter().map(|(p, _)| format!("{p}\n")).collect();
            let shas = self.run(
                &["hash-object", "-w", "--no-filters", "--stdin-paths"],
                Some(list.as_bytes()),
                None,
            )?;
            for ((path, mode), sha) in files.iter().zip(String::from_utf8_lossy(&shas).lines()) {
                index_info.push_str(&format!("{mode} {sha}\t{path}\n"));
            }
        }
        self.run(
            &["update-index", "--index-info"],
            Some(index_info.as_bytes()),
            index,
        )?;
        let tree = String::from_utf8_lossy(&self.run(&["write-tree"], None, index)?)
            .trim()
            .to_owned();
        Ok(tree)
    }

    fn refuse_tampering(&self) -> Result<(), HostError> {
        let config_path = self.common_dir.join("config");
        if fs::read(&config_path).ok() != self.config {
            return Err(HostError::Tampered(config_path));
        }
        for path in &self.absent {
            if fs::symlink_metadata(path).is_ok() {
                return Err(HostError::Tampered(path.clone()));
            }
        }
        Ok(())
    }

    /// The `commit` action: every change in the workspace except `exclude` (tooling paths and
    /// declared artifacts) becomes one commit on `HEAD` whose message ends with the
    /// `Cordon-Run: <RUN_ID>` trailer. Idempotent: if `HEAD` already carries this run's trailer,
    /// that commit is returned. `Ok(None)` when there is nothing to commit.
    pub fn commit(
        &self,
        message: &str,
        run: RunId,
        exclude: &[String],
    ) -> Result<Option<Committed>, HostError> {
        self.refuse_tampering()?;
        let head = self.head()?;
        let trailer = format!("Cordon-Run: {run}");
        let head_message = self.text(&["log", "-1", "--format=%B", &head])?;
        if head_message.lines().any(|l| l.trim() == trailer) {
            return Ok(Some(Committed {
                sha: head,
                created: false,
            }));
        }
        let tree = self.stage(&head, None, exclude)?;
        let head_tree = self
            .text(&["rev-parse", &format!("{head}^{{tree}}")])?
            .trim()
            .to_owned();
        if tree == head_tree {
            return Ok(None);
        }
        let full_message = format!("{}\n\n{trailer}\n", message.trim_end());
        let sha = self.run(
            &["commit-tree", &tree, "-p", &head, "-F", "-"],
            Some(full_message.as_bytes()),
            None,
        )?;
        let sha = String::from_utf8_lossy(&sha).trim().to_owned();
        self.run(
            &[
                "update-ref",
                "-m",
                "cordon: commit action",
                "HEAD",
                &sha,
                &head,
            ],
            None,
            None,
        )?;
        Ok(Some(Committed { sha, created: true }))
    }
}

fn find_git() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("git"))
        .find(|candidate| candidate.is_file())
}

/// The user's name and e-mail from their own global config (read once, at run start, with no
/// system config); `None` unless both are set.
pub fn user_identity() -> Option<(String, String)> {
    let git = find_git()?;
    let get = |key: &str| {
        Command::new(&git)
            .args(["config", "--global", "--get", key])
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .filter(|v| !v.is_empty() && !v.contains('\n'))
    };
    Some((get("user.name")?, get("user.email")?))
}

/// A git config value in double quotes with `"` and `\` escaped.
fn quote(value: &str) -> String {
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}
