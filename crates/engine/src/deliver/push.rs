//! The push of the `deliver` action, by the host's `git` (gitoxide does not push).
//!
//! The repository git runs in is not the workspace's: it is a scratch bare repository under
//! the state directory whose config, `HEAD` and refs cordon writes, and whose objects are the
//! workspace's, reached through `objects/info/alternates` — so nothing a step or the workspace
//! wrote (config, hooks, attributes, refs) is read. The program is resolved once from fixed
//! system directories, never through `PATH`, and runs with a scrubbed environment (DESIGN §10):
//! no system or global config, hooks off, no redirects, only the `https` protocol (`http` for a
//! destination in `[delivery] allow_insecure`), the destination pinned to the addresses the
//! bounds admitted, no proxy. The token is written into a pipe whose read end is the program's
//! descriptor 3; the credential helper cordon configures copies it from there when git asks,
//! so it is never in an argument or an environment variable.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{Admitted, DeliveryError};

/// Where the host's `git` may be (DESIGN §10): never the user's `PATH`.
const GIT_DIRS: &[&str] = &["/usr/bin", "/bin", "/usr/local/bin"];

/// The only programs git may start from its exec path: smart HTTP's remote helpers (and git
/// itself). Without `git-http-push` and `git-http-fetch` a push to a dumb-HTTP or WebDAV
/// remote fails at once, instead of downloading the pack indexes such a remote lists into the
/// scratch repository without bound.
const EXEC: &[&str] = &["git-remote-http", "git-remote-https"];

/// The credential helper: answers `get` with what descriptor 3 holds (`username=…` and
/// `password=…` lines cordon wrote), and nothing for `store` and `erase`.
const HELPER: &str = "!f() { if test \"$1\" = get; then cat <&3; fi; }; f";

/// The host's git, resolved from [`GIT_DIRS`].
pub fn git_program() -> Result<PathBuf, DeliveryError> {
    use std::os::unix::fs::PermissionsExt as _;
    GIT_DIRS
        .iter()
        .map(|dir| Path::new(dir).join("git"))
        .find(|path| {
            std::fs::metadata(path)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| {
            DeliveryError::Refused(format!(
                "`deliver` pushes with the host's git, and there is none in {}; install git",
                GIT_DIRS.join(", ")
            ))
        })
}

/// One remote, as the push sees it.
pub struct Remote<'a> {
    pub git: &'a Path,
    /// The scratch directory (`<state>/delivery/<run>`).
    pub scratch: &'a Path,
    /// The workspace repository's object directory.
    pub objects: &'a Path,
    pub url: &'a cordon_pipeline::HttpUrl,
    pub admitted: &'a Admitted,
    pub username: &'a str,
    pub token: &'a str,
    /// `[delivery] git_memory`: bytes of data memory for git and each helper it starts.
    pub memory: u64,
    /// `[delivery] git_timeout`: how long one git command may take before its whole process
    /// group is stopped.
    pub timeout: Duration,
}

impl Drop for Remote<'_> {
    /// The scratch repository, exec path and home go with the delivery (a hostile remote may
    /// have made git write into the repository): the next delivery makes them anew. (An
    /// interrupted cordon removes them in its signal handler; after `kill -9` the run's resume
    /// does, before anything else.)
    fn drop(&mut self) {
        for made in ["repo.git", "exec", "home"] {
            let _ = std::fs::remove_dir_all(self.scratch.join(made));
        }
    }
}

impl Remote<'_> {
    /// The sha `refs/heads/<branch>` has on the remote, `None` when it does not exist. The first
    /// call of a delivery: it makes the scratch repository [`Remote::push`] uses too.
    pub fn head(&self, branch: &str) -> Result<Option<String>, DeliveryError> {
        self.prepare()?;
        let name = format!("refs/heads/{branch}");
        let out = self.run(&["ls-remote", "--refs", &self.url.text, &name], "list")?;
        Ok(out.lines().find_map(|line| {
            let (sha, reference) = line.split_once('\t')?;
            (reference == name && sha.len() == 40 && sha.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| sha.to_owned())
        }))
    }

    /// Pushes `sha` to `refs/heads/<branch>`, never forcing (after [`Remote::head`]).
    pub fn push(&self, sha: &str, branch: &str) -> Result<(), DeliveryError> {
        let spec = format!("{sha}:refs/heads/{branch}");
        self.run(
            &["push", "--porcelain", "--no-verify", &self.url.text, &spec],
            "push",
        )?;
        Ok(())
    }

    /// The scratch repository, made anew: cordon's own config, the workspace's objects; and
    /// git's private exec path, holding only [`EXEC`].
    fn prepare(&self) -> Result<PathBuf, DeliveryError> {
        let repo = self.scratch.join("repo.git");
        let home = self.scratch.join("home");
        let exec = self.scratch.join("exec");
        let io = |what: &str, e: std::io::Error| {
            DeliveryError::Refused(format!(
                "cannot prepare the push's scratch repository ({what} under {}): {e}",
                self.scratch.display()
            ))
        };
        for old in [&repo, &exec] {
            if old.exists() {
                std::fs::remove_dir_all(old).map_err(|e| io("remove the old one", e))?;
            }
        }
        for dir in [
            exec.clone(),
            repo.join("objects/info"),
            repo.join("objects/pack"),
            repo.join("refs/heads"),
            repo.join("refs/tags"),
            home.clone(),
        ] {
            std::fs::create_dir_all(&dir).map_err(|e| io("create a directory", e))?;
        }
        let objects = self.objects.to_str().ok_or_else(|| {
            DeliveryError::Refused(format!(
                "the workspace's object directory {} is not UTF-8, which git's alternates cannot name",
                self.objects.display()
            ))
        })?;
        if objects.contains('\n') {
            return Err(DeliveryError::Refused(
                "the workspace's object directory has a newline in its path".to_owned(),
            ));
        }
        for (path, text) in [
            (repo.join("HEAD"), "ref: refs/heads/main\n".to_owned()),
            (
                repo.join("config"),
                "[core]\n\trepositoryformatversion = 0\n\tbare = true\n".to_owned(),
            ),
            (repo.join("objects/info/alternates"), format!("{objects}\n")),
        ] {
            std::fs::write(&path, text).map_err(|e| io("write a file", e))?;
        }
        let system = self.exec_path()?;
        std::os::unix::fs::symlink(self.git, exec.join("git")).map_err(|e| io("link git", e))?;
        for helper in EXEC {
            std::os::unix::fs::symlink(system.join(helper), exec.join(helper))
                .map_err(|e| io("link a helper", e))?;
        }
        Ok(repo)
    }

    /// Where the host's git keeps its helpers (`git --exec-path`), checked to hold smart
    /// HTTP's.
    fn exec_path(&self) -> Result<PathBuf, DeliveryError> {
        let out = Command::new(self.git)
            .arg("--exec-path")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .map_err(|e| DeliveryError::Down(format!("cannot start git --exec-path: {e}")))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let path = PathBuf::from(text.trim_end_matches('\n'));
        if !out.status.success() || !path.is_absolute() || !path.join(EXEC[0]).is_file() {
            return Err(DeliveryError::Refused(format!(
                "the host's git ({}) has no HTTP helper ({} in its exec path {}); install \
                 git's HTTP support (the distribution's git package has it)",
                self.git.display(),
                EXEC[0],
                cordon_protocol::text::escape_line(text.trim())
            )));
        }
        Ok(path)
    }

    /// Runs git with `args` after the pinned configuration; its stdout, or the error its exit
    /// means.
    fn run(&self, args: &[&str], what: &str) -> Result<String, DeliveryError> {
        let repo = self.scratch.join("repo.git");
        let mut config: Vec<String> = [
            "core.hooksPath=/dev/null",
            "core.fsmonitor=false",
            "core.attributesFile=/dev/null",
            "core.askPass=",
            "credential.helper=",
            "http.followRedirects=false",
            "http.proxy=",
            // Under 1 KiB/s for a minute is a stalled (or dripping) remote.
            "http.lowSpeedLimit=1024",
            "http.lowSpeedTime=60",
            "protocol.allow=never",
            "protocol.https.allow=always",
            "push.recurseSubmodules=no",
            "submodule.recurse=false",
            "gc.auto=0",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        config.push(format!("credential.helper={HELPER}"));
        if !self.url.is_https() {
            config.push("protocol.http.allow=always".to_owned());
        }
        for address in &self.admitted.addresses {
            let ip = match address.ip() {
                std::net::IpAddr::V6(v6) => format!("[{v6}]"),
                std::net::IpAddr::V4(v4) => v4.to_string(),
            };
            config.push(format!(
                "http.curloptResolve={}:{}:{ip}",
                self.admitted.host, self.admitted.port
            ));
        }
        let mut command = Command::new(self.git);
        command
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", self.scratch.join("home"))
            .env("GIT_DIR", &repo)
            .env("GIT_EXEC_PATH", self.scratch.join("exec"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("LC_ALL", "C")
            .current_dir(self.scratch)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for setting in &config {
            command.arg("-c").arg(setting);
        }
        command.args(args);
        let (read, mut write) = std::io::pipe().map_err(|e| {
            DeliveryError::Down(format!("cannot make the credential pipe for git: {e}"))
        })?;
        // Small enough for the pipe's buffer: written whole before git starts, then closed, so
        // every `get` after the first reads nothing.
        write
            .write_all(format!("username={}\npassword={}\n", self.username, self.token).as_bytes())
            .map_err(|e| DeliveryError::Down(format!("cannot hand git the token: {e}")))?;
        drop(write);
        cordon_sandbox::host::pass_fd(&mut command, read.into(), 3);
        cordon_sandbox::host::confine(&mut command, self.memory);
        let finished = crate::host_program::run_bounded(command, self.timeout)
            .map_err(|e| DeliveryError::Down(format!("git ({what}): {e}")))?;
        let (status, stdout, stderr, timed_out) = (
            finished.status,
            finished.stdout,
            finished.stderr,
            finished.timed_out,
        );
        if timed_out {
            return Err(DeliveryError::Down(format!(
                "git ({what}) to {} took more than {} s (`[delivery] git_timeout`) and was \
                 stopped with every helper it started",
                self.url,
                self.timeout.as_secs()
            )));
        }
        let stderr = String::from_utf8_lossy(&stderr).replace(self.token, "[token]");
        if status.success() {
            return Ok(String::from_utf8_lossy(&stdout).into_owned());
        }
        if out_of_memory(&stderr, status) {
            return Err(DeliveryError::Refused(format!(
                "git ({what}) to {} ran out of the {} MiB `[delivery] git_memory` allows it ({}): \
                 a remote sending without end, or a repository that needs more (raise \
                 `git_memory` in the operator policy), then resume",
                self.url,
                self.memory >> 20,
                last_lines(&stderr)
            )));
        }
        Err(classify(
            &stderr,
            &String::from_utf8_lossy(&stdout),
            what,
            self.url,
        ))
    }
}

/// Whether git (or a helper whose failure it reports) stopped at `[delivery] git_memory`: a
/// line of its own saying so (never what the remote said: `remote: …`, `… remote error: …`),
/// or the file-size signal.
fn out_of_memory(stderr: &str, status: std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt as _;
    let ours = |line: &&str| !line.starts_with("remote:") && !line.contains("remote error:");
    stderr.lines().filter(ours).any(|line| {
        ["Out of memory", "Cannot allocate memory"]
            .iter()
            .any(|m| line.contains(m))
    }) || status.signal() == Some(cordon_sandbox::host::FILE_SIZE_SIGNAL)
}

/// What a failed git command's output means.
fn classify(
    stderr: &str,
    stdout: &str,
    what: &str,
    url: &cordon_pipeline::HttpUrl,
) -> DeliveryError {
    let tail = last_lines(stderr);
    let auth = [
        "returned error: 401",
        "returned error: 403",
        "Authentication failed",
    ];
    if auth.iter().any(|a| stderr.contains(a)) {
        return DeliveryError::Auth {
            forge: "git".to_owned(),
            status: if stderr.contains("403") { 403 } else { 401 },
            what: format!("the {what} to {url}"),
            message: format!(" ({tail})"),
        };
    }
    if stderr.contains("'http-push' is not a git command") {
        return DeliveryError::Refused(format!(
            "the remote {url} does not speak git's smart HTTP protocol (a dumb or WebDAV \
             server), the only one cordon pushes over; give `remote:` a smart HTTP URL, then \
             resume"
        ));
    }
    let rejected = stdout.lines().any(|l| l.starts_with('!'))
        || [
            "[rejected]",
            "non-fast-forward",
            "fetch first",
            "[remote rejected]",
        ]
        .iter()
        .any(|r| stderr.contains(r));
    if rejected {
        return DeliveryError::Refused(format!(
            "the remote {url} rejected the push ({tail}); cordon never forces: choose another \
             `branch`, or remove the remote branch, then resume"
        ));
    }
    DeliveryError::Down(format!("git's {what} to {url} failed: {tail}"))
}

/// The last few lines of git's stderr, escaped, on one line.
fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(3);
    let joined = lines[start..].join(" / ");
    let mut line = cordon_protocol::text::escape_line(&joined).into_owned();
    if line.len() > 400 {
        let cut = line.floor_char_boundary(400);
        line.truncate(cut);
        line.push('…');
    }
    if line.is_empty() {
        "git said nothing".to_owned()
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_git_command_is_read_as_refused_token_rejected_push_or_an_unreachable_remote() {
        let url = cordon_pipeline::HttpUrl::parse("https://forge.test/o/r.git").expect("a URL");
        let cases: &[(&str, &str, &str)] = &[
            (
                "fatal: unable to access 'https://forge.test/o/r.git/': The requested URL returned error: 401",
                "",
                "token was refused",
            ),
            (
                "remote: Permission denied\nfatal: The requested URL returned error: 403",
                "",
                "answered 403",
            ),
            (
                "error: failed to push some refs",
                "!\tabc:refs/heads/b\t[rejected] (non-fast-forward)",
                "never forces",
            ),
            (
                "fatal: unable to access 'https://forge.test/': Failed to connect to forge.test port 443",
                "",
                "resume once it answers",
            ),
        ];
        for (stderr, stdout, want) in cases {
            let err = classify(stderr, stdout, "push", &url);
            assert!(err.to_string().contains(want), "{stderr}: {err}");
        }
        assert!(classify("x", "", "push", &url).to_string().contains("x"));
        use std::os::unix::process::ExitStatusExt as _;
        let failed = std::process::ExitStatus::from_raw(128 << 8);
        for (stderr, ours) in [
            ("fatal: Out of memory, realloc failed", true),
            ("error: unable to read: Cannot allocate memory", true),
            (
                "fatal: remote error: Out of memory: raise git_memory",
                false,
            ),
            (
                "remote: Out of memory\nerror: failed to push some refs",
                false,
            ),
            ("fatal: unable to access: 404", false),
        ] {
            assert_eq!(out_of_memory(stderr, failed), ours, "{stderr}");
        }
        let file_size = std::process::ExitStatus::from_raw(cordon_sandbox::host::FILE_SIZE_SIGNAL);
        assert!(out_of_memory("", file_size));
        assert_eq!(last_lines("a\n\nb\u{1b}[31m\n"), "a / b\\e[31m");
    }
}
