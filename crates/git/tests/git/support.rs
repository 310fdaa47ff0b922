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
        // A fixture given to another user (the ownership tests, as root) is still the tests'.
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "safe.directory")
        .env("GIT_CONFIG_VALUE_0", "*")
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

/// Writes into `git_dir` a pack holding a blob of `base` bytes and a chain of `links` deltas on
/// it, each copying it whole, the last adding a byte: only the blob and the tip are in its
/// index. Returns the tip's id.
pub fn plant_delta_chain(git_dir: &Path, links: usize, base: usize) -> String {
    plant_delta_chain_to(git_dir, links, base, false)
}

/// As [`plant_delta_chain`]; with `tiny_tip` the last delta makes a 2-byte object (one copied
/// byte and `y`), so the chain's cost is all in its intermediate results.
pub fn plant_delta_chain_to(git_dir: &Path, links: usize, base: usize, tiny_tip: bool) -> String {
    let script = r#"
import hashlib, os, struct, sys, zlib
git, links, size0, tiny = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7f; n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n: return bytes(out)
def head(kind, size):
    first = (kind << 4) | (size & 0x0f); size >>= 4
    out = bytearray()
    while size:
        out.append(first | 0x80); first = size & 0x7f; size >>= 7
    out.append(first); return bytes(out)
def distance(d):
    out = bytearray([d & 0x7f]); d >>= 7
    while d:
        d -= 1; out.insert(0, 0x80 | (d & 0x7f)); d >>= 7
    return bytes(out)
base = b"x" * size0
# The header counts what the index lists (git checks that); the links sit between unlisted.
body = bytearray(b"PACK" + struct.pack(">II", 2, 2))
entries = []
offset = len(body); entries.append((b"blob", base, offset))
body += head(3, len(base)) + zlib.compress(base)
prev, size = offset, len(base)
for i in range(links):
    tip = i == links - 1
    copied = 1 if (tip and tiny) else size
    target = copied + 1 if tip else size
    copy = bytes([0x80 | 0x01 | 0x02 | 0x04 | 0x10 | 0x20 | 0x40]) + b"\0\0\0" + copied.to_bytes(3, "little")
    delta = varint(size) + varint(target) + copy + (b"\x01y" if tip else b"")
    offset = len(body)
    body += head(6, len(delta)) + distance(offset - prev) + zlib.compress(delta)
    prev = offset
    if tip: entries.append((b"blob", (base[:1] if tiny else base) + b"y", offset))
body += hashlib.sha1(body).digest()
ids = []
for kind, content, off in entries:
    oid = hashlib.sha1(kind + b" " + str(len(content)).encode() + b"\0" + content).digest()
    ids.append((oid, off))
ids.sort()
idx = bytearray(b"\xfftOc" + struct.pack(">I", 2))
for byte in range(256):
    idx += struct.pack(">I", sum(1 for oid, _ in ids if oid[0] <= byte))
for oid, _ in ids: idx += oid
for _ in ids: idx += struct.pack(">I", 0)
for _, off in ids: idx += struct.pack(">I", off)
idx += body[-20:]
idx += hashlib.sha1(idx).digest()
name = os.path.join(git, "objects", "pack", "pack-" + body[-20:].hex())
os.makedirs(os.path.dirname(name), exist_ok=True)
open(name + ".pack", "wb").write(body)
open(name + ".idx", "wb").write(idx)
last = (base[:1] if tiny else base) + b"y"
print(hashlib.sha1(b"blob " + str(len(last)).encode() + b"\0" + last).hexdigest())
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(git_dir)
        .arg(links.to_string())
        .arg(base.to_string())
        .arg(if tiny_tip { "1" } else { "0" })
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
