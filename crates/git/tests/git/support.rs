//! A repository to work on, and the system's git (a fixed path, no user config) to make it and to
//! judge what cordon's git did.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use cordon_git::{Dirs, Guard, Identity, Repo};
use cordon_workspace::View;

/// The system's git, never one found on `PATH`.
pub fn system_git() -> &'static str {
    ["/usr/bin/git", "/usr/local/bin/git", "/bin/git"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .expect("the tests need git in /usr/bin or /usr/local/bin")
}

fn command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(system_git());
    cmd.args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Fixture")
        .env("GIT_AUTHOR_EMAIL", "fixture@example.test")
        .env("GIT_COMMITTER_NAME", "Fixture")
        .env("GIT_COMMITTER_EMAIL", "fixture@example.test");
    cmd
}

pub fn git(dir: &Path, args: &[&str]) {
    let out = command(dir, args).output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// git's stdout, trailing newlines trimmed.
pub fn git_out(dir: &Path, args: &[&str]) -> String {
    let out = command(dir, args).output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim_end_matches('\n')
        .to_owned()
}

/// git's raw stdout.
pub fn git_bytes(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = command(dir, args).output().unwrap();
    assert!(out.status.success(), "git {args:?}");
    out.stdout
}

pub struct Fixture {
    _dir: Option<tempfile::TempDir>,
    root: PathBuf,
    work: PathBuf,
    scratch: PathBuf,
}

impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        let scratch = dir.path().join("scratch");
        std::fs::create_dir(&work).unwrap();
        git(&work, &["init", "-q", "-b", "main"]);
        Fixture {
            root: dir.path().to_path_buf(),
            _dir: Some(dir),
            work,
            scratch,
        }
    }

    /// The fixture whose work tree is `work` (made by [`Fixture::new`], which keeps it).
    pub fn at(work: PathBuf) -> Fixture {
        let root = work.parent().unwrap().to_path_buf();
        Fixture {
            _dir: None,
            scratch: root.join("scratch"),
            root,
            work,
        }
    }

    pub fn path(&self) -> &Path {
        &self.work
    }

    /// A directory beside the work tree (standing for the rest of the host).
    pub fn outside(&self) -> PathBuf {
        let outside = self.root.as_path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        outside
    }

    pub fn view(&self) -> View {
        View::open(&self.work).unwrap()
    }

    pub fn repo(&self) -> Repo {
        self.guarded(Guard::default())
    }

    /// The repository opened with `guard` (hidden paths, a writable git directory).
    pub fn guarded(&self, guard: Guard) -> Repo {
        let dirs = Dirs {
            git_dir: self.work.join(".git"),
            common_dir: self.work.join(".git"),
        };
        Repo::open(
            &self.view(),
            dirs,
            Some(&self.scratch),
            Identity {
                name: "Test Author".to_owned(),
                email: "author@example.test".to_owned(),
            },
            guard,
        )
        .unwrap()
    }

    pub fn write(&self, rel: &str, text: &str) {
        self.write_bytes(rel, text.as_bytes());
    }

    pub fn write_bytes(&self, rel: &str, bytes: &[u8]) {
        let path = self.work.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    pub fn chmod(&self, rel: &str, mode: u32) {
        std::fs::set_permissions(self.work.join(rel), std::fs::Permissions::from_mode(mode))
            .unwrap();
    }

    pub fn remove(&self, rel: &str) {
        std::fs::remove_file(self.work.join(rel)).unwrap();
    }

    pub fn symlink(&self, target: impl AsRef<Path>, rel: &str) {
        let path = self.work.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, path).unwrap();
    }

    /// `repo`'s step diff of this work tree, with a fresh stat cache and the default limits.
    pub fn diff_with(&self, repo: &Repo) -> Result<cordon_git::WorkDiff, cordon_git::GitError> {
        repo.diff(
            &self.view(),
            &mut cordon_git::StatCache::default(),
            cordon_git::PatchLimits::default(),
        )
    }

    /// `repo`'s commit action on this work tree, message `c`, trailer `Cordon-Run: t`.
    pub fn commit_with(
        &self,
        repo: &Repo,
    ) -> Result<Option<cordon_git::Committed>, cordon_git::GitError> {
        repo.commit(
            &self.view(),
            "c",
            "Cordon-Run: t",
            &[],
            &mut cordon_git::StatCache::default(),
        )
    }

    pub fn commit_all(&self, message: &str) {
        git(&self.work, &["add", "-A"]);
        git(&self.work, &["commit", "-q", "-m", message]);
    }

    /// A copy of the work tree and its repository.
    pub fn copy(&self) -> PathBuf {
        let copy = self.root.as_path().join(format!("copy-{}", rand_suffix()));
        let out = Command::new("/bin/cp")
            .args(["-a", self.work.to_str().unwrap(), copy.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success());
        copy
    }

    /// A fresh clone of HEAD.
    pub fn clone_head(&self) -> PathBuf {
        let clone = self.root.as_path().join(format!("clone-{}", rand_suffix()));
        git(
            self.root.as_path(),
            &[
                "clone",
                "-q",
                self.work.to_str().unwrap(),
                clone.to_str().unwrap(),
            ],
        );
        clone
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
