//! What the run's guard asks of the host's git: masked paths (root `.env*` secrets,
//! `isolation.hide`) never read, diffed or committed; with `allow_git_mutations`, refs and the
//! object store a step rewrote refused without being followed or quoted; forged trees, rule files
//! and commits of any size bounded. Each judged on the host, each refusal with a control.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use cordon_git::{GitError, Guard, Ignoring, PatchLimits, StatCache};
use cordon_workspace::WsPath;

use crate::attacks::{CANARY, bounded};
use crate::support::{Fixture, git, git_out, plant_delta_chain};

fn fifo(at: impl AsRef<Path>) -> rustix::io::Result<()> {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        at.as_ref(),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
}

/// The host file `victim` still holds the canary line it was made with.
fn assert_canary(victim: &Path) {
    assert_eq!(
        std::fs::read_to_string(victim).unwrap(),
        format!("{CANARY}\n"),
        "the host file {} was written",
        victim.display()
    );
}

fn hidden(paths: &[&str]) -> Guard {
    Guard {
        hidden: paths.iter().map(|p| WsPath::new(p).unwrap()).collect(),
        git_writable: false,
    }
}

fn writable() -> Guard {
    Guard {
        hidden: Vec::new(),
        git_writable: true,
    }
}

fn changed_paths(diff: &cordon_git::WorkDiff) -> Vec<String> {
    diff.changes
        .iter()
        .map(|(p, _)| String::from_utf8_lossy(p).into_owned())
        .collect()
}

#[test]
fn masked_secrets_are_never_diffed_or_committed_and_templates_are() {
    let fx = Fixture::new();
    fx.write(".env", "TOKEN=committed-placeholder\n");
    fx.write(".env.example", "TOKEN=\n");
    fx.write("src/main.rs", "fn main() {}\n");
    fx.commit_all("base");
    // The user's real secrets, in files the sandbox masks: a tracked `.env` changed, untracked
    // `.env.local` and `.env\xff`, and a hidden directory.
    fx.write(".env", &format!("TOKEN={CANARY}\n"));
    fx.write(".env.local", CANARY);
    std::fs::write(
        fx.path().join(std::ffi::OsStr::from_bytes(b".env\xff")),
        CANARY,
    )
    .unwrap();
    fx.write("secrets/deploy.key", CANARY);
    // Controls: a template and an ordinary file are work-tree changes like any other.
    fx.write(".env.example", "TOKEN=\nDEBUG=\n");
    fx.write("src/main.rs", "fn main() { println!(); }\n");
    let repo = fx.guarded(hidden(&["secrets"]));
    let diff = fx.diff_with(&repo).unwrap();
    assert_eq!(changed_paths(&diff), [".env.example", "src/main.rs"]);
    assert!(!String::from_utf8_lossy(&diff.patch).contains("canary"));
    let dirty = repo
        .dirty_paths(&fx.view(), &mut StatCache::default())
        .unwrap();
    assert_eq!(dirty, [".env.example", "src/main.rs"]);
    let committed = fx.commit_with(&repo).unwrap().unwrap();
    assert_eq!(committed.files, [".env.example", "src/main.rs"]);
    assert_eq!(
        git_out(fx.path(), &["show", "HEAD:.env"]),
        "TOKEN=committed-placeholder"
    );
    let tree = git_out(fx.path(), &["ls-tree", "-r", "--name-only", "HEAD"]);
    assert_eq!(tree, ".env\n.env.example\nsrc/main.rs");
    let objects = git_out(
        fx.path(),
        &["cat-file", "--batch-all-objects", "--batch", "--unordered"],
    );
    assert!(
        !objects.contains("canary"),
        "a secret reached the object store"
    );
    // Control: without the guard's `hide`, the hidden directory is an ordinary untracked one.
    let open = fx.repo();
    let diff = open
        .diff(
            &fx.view(),
            &mut StatCache::default(),
            PatchLimits::default(),
        )
        .unwrap();
    assert_eq!(changed_paths(&diff), ["secrets/deploy.key"]);
}

#[test]
fn a_masked_path_is_not_read_even_when_it_would_block() {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    fx.commit_all("base");
    fifo(fx.path().join(".env.local")).unwrap();
    let work = fx.path().to_path_buf();
    let skipped = bounded(move || {
        let fx = Fixture::at(work);
        let diff = fx.diff_with(&fx.repo()).unwrap();
        (changed_paths(&diff), diff.skipped.len())
    });
    // Not even listed as a FIFO: the host does not look at masked paths at all.
    assert_eq!(skipped, (Vec::<String>::new(), 0));
}

/// Replaces the branch ref with what `plant` makes, then takes the diff with a writable git
/// directory: refused, quickly, with nothing of the planted file in the message.
fn refused_ref(plant: impl FnOnce(&Fixture, &Path)) -> String {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    fx.commit_all("base");
    let victim = fx.outside().join("id_ed25519");
    std::fs::write(&victim, format!("{CANARY}\n")).unwrap();
    plant(&fx, &victim);
    let work = fx.path().to_path_buf();
    let result = bounded(move || {
        let fx = Fixture::at(work);
        fx.diff_with(&fx.guarded(writable()))
            .map(|_| ())
            .map_err(|err| err.to_string())
    });
    let message = result.expect_err("the planted ref was used");
    assert!(!message.contains("canary"), "{message}");
    message
}

#[test]
fn refs_a_step_replaced_are_refused_never_followed_or_quoted() {
    let branch = |fx: &Fixture| fx.path().join(".git/refs/heads/main");
    let message = refused_ref(|fx, victim| {
        std::fs::remove_file(branch(fx)).unwrap();
        std::os::unix::fs::symlink(victim, branch(fx)).unwrap();
    });
    assert!(message.contains("refs/heads/main"), "{message}");
    refused_ref(|fx, _| {
        std::fs::remove_file(branch(fx)).unwrap();
        fifo(branch(fx)).unwrap();
    });
    refused_ref(|fx, _| {
        std::fs::remove_file(branch(fx)).unwrap();
        std::os::unix::fs::symlink("/dev/zero", branch(fx)).unwrap();
    });
    refused_ref(|fx, _| {
        let file = std::fs::File::create(branch(fx)).unwrap();
        file.set_len(8 << 30).unwrap();
    });
    // A ref that holds the first line of a secret: named, never quoted.
    refused_ref(|fx, _| std::fs::write(branch(fx), format!("{CANARY}\n")).unwrap());
    let message = refused_ref(|fx, victim| {
        std::fs::remove_file(branch(fx)).unwrap();
        std::os::unix::fs::symlink(victim, fx.path().join(".git/packed-refs")).unwrap();
    });
    assert!(message.contains("packed-refs"), "{message}");
    // A symbolic ref out of `refs/`.
    refused_ref(|fx, _| {
        std::fs::write(
            fx.path().join(".git/HEAD"),
            "ref: refs/../../../etc/passwd\n",
        )
        .unwrap()
    });
}

#[test]
fn a_head_line_cordon_and_gitoxide_could_read_differently_is_refused() {
    // `ref: refs/heads/main\u{3000}`: trimmed as Unicode whitespace it named `main`, which
    // cordon checked, while gitoxide followed `main\u{3000}` and appended its reflog through a
    // link the step had planted.
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    fx.commit_all("base");
    let git_dir = fx.path().join(".git");
    let victim = fx.outside().join("canary.txt");
    std::fs::write(&victim, format!("{CANARY}\n")).unwrap();
    let head = git_out(fx.path(), &["rev-parse", "HEAD"]);
    let odd = "main\u{3000}";
    std::fs::write(git_dir.join("refs/heads").join(odd), format!("{head}\n")).unwrap();
    std::fs::create_dir_all(git_dir.join("logs/refs/heads")).unwrap();
    std::os::unix::fs::symlink(&victim, git_dir.join("logs/refs/heads").join(odd)).unwrap();
    std::fs::write(git_dir.join("HEAD"), format!("ref: refs/heads/{odd}\n")).unwrap();
    fx.write("a.txt", "b\n");
    let err = fx
        .commit_with(&fx.guarded(writable()))
        .expect_err("an odd HEAD line was followed");
    assert!(!err.to_string().contains("canary"), "{err}");
    assert_canary(&victim);
    // Control: HEAD as git writes it commits.
    std::fs::write(git_dir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    assert!(fx.commit_with(&fx.guarded(writable())).unwrap().is_some());
    assert_canary(&victim);
}

#[test]
fn a_tree_object_past_its_bound_is_refused_from_its_header() {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    fx.commit_all("base");
    // A loose tree of a few hundred kilobytes that inflates past 64 MiB, made HEAD's tree.
    let git_dir = fx.path().join(".git");
    let script = r#"
import hashlib, os, sys, zlib
git, parent = sys.argv[1], sys.argv[2]
def put(kind, body):
    raw = kind + b" " + str(len(body)).encode() + b"\0" + body
    oid = hashlib.sha1(raw).hexdigest()
    path = os.path.join(git, "objects", oid[:2], oid[2:])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(zlib.compress(raw, 9))
    return oid
tree = put(b"tree", b"\0" * ((64 << 20) + 1))
commit = put(b"commit", f"tree {tree}\nparent {parent}\nauthor a <a@example.test> 0 +0000\ncommitter a <a@example.test> 0 +0000\n\nbig\n".encode())
open(os.path.join(git, "refs/heads/main"), "w").write(commit + "\n")
"#;
    let head = git_out(fx.path(), &["rev-parse", "HEAD"]);
    let status = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&git_dir)
        .arg(&head)
        .status()
        .expect("python3");
    assert!(status.success());
    let err = fx
        .diff_with(&fx.guarded(writable()))
        .expect_err("a tree of 64 MiB was read");
    assert!(
        err.to_string().contains("a tree object of 67108865 bytes"),
        "{err}"
    );
    // Control: back on the ordinary commit, the diff is taken.
    std::fs::write(git_dir.join("refs/heads/main"), format!("{head}\n")).unwrap();
    assert!(fx.diff_with(&fx.guarded(writable())).is_ok());
}

#[test]
fn a_chain_of_symbolic_refs_cannot_make_the_commit_write_through_a_reflog_link() {
    // HEAD → main → other, with other's reflog (or the directory it would be created in) a link
    // out: gitoxide would follow the chain and append to the host file.
    for plant_dir in [false, true] {
        let fx = Fixture::new();
        fx.write("a.txt", "a\n");
        fx.commit_all("base");
        let git_dir = fx.path().join(".git");
        let outside = fx.outside();
        let victim = outside.join("authorized_keys");
        std::fs::write(&victim, format!("{CANARY}\n")).unwrap();
        git(fx.path(), &["update-ref", "refs/heads/other", "HEAD"]);
        std::fs::write(git_dir.join("refs/heads/main"), "ref: refs/heads/other\n").unwrap();
        let logs = git_dir.join("logs/refs/heads");
        std::fs::create_dir_all(&logs).unwrap();
        if plant_dir {
            std::fs::remove_dir_all(&logs).unwrap();
            std::os::unix::fs::symlink(&outside, &logs).unwrap();
        } else {
            let _ = std::fs::remove_file(logs.join("other"));
            std::os::unix::fs::symlink(&victim, logs.join("other")).unwrap();
        }
        fx.write("a.txt", "b\n");
        let err = fx
            .commit_with(&fx.guarded(writable()))
            .expect_err("the chain was followed");
        assert!(!err.to_string().contains("canary"), "{err}");
        assert_canary(&victim);
        let mut names: Vec<_> = std::fs::read_dir(&outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["authorized_keys"], "a file was created outside");
        // Control: HEAD naming the branch directly commits, and its reflog is written in place.
        std::fs::write(git_dir.join("HEAD"), "ref: refs/heads/other\n").unwrap();
        if plant_dir {
            std::fs::remove_file(&logs).unwrap();
        } else {
            std::fs::remove_file(logs.join("other")).unwrap();
        }
        let committed = fx.commit_with(&fx.guarded(writable())).unwrap().unwrap();
        assert_eq!(git_out(fx.path(), &["rev-parse", "other"]), committed.sha);
        assert_canary(&victim);
    }
}

#[test]
fn packed_refs_are_read_by_cordon_and_resolve_like_gits() {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    fx.commit_all("base");
    let head = git_out(fx.path(), &["rev-parse", "HEAD"]);
    git(fx.path(), &["pack-refs", "--all"]);
    assert!(!fx.path().join(".git/refs/heads/main").exists());
    assert_eq!(fx.guarded(writable()).head().unwrap().to_string(), head);
    // And the commit action moves the branch from there.
    fx.write("a.txt", "b\n");
    let committed = fx.commit_with(&fx.guarded(writable())).unwrap().unwrap();
    assert_eq!(git_out(fx.path(), &["rev-parse", "main"]), committed.sha);
}

#[test]
fn a_planted_object_store_entry_is_refused_when_steps_can_write_git() {
    type Plant = fn(&Path, &Path);
    let plants: [(&str, Plant); 4] = [
        ("objects/ab/cdef", |at, victim| {
            std::os::unix::fs::symlink(victim, at).unwrap()
        }),
        ("objects/pack/pack-x.pack", |at, _| fifo(at).unwrap()),
        ("objects/ab", |at, victim| {
            std::os::unix::fs::symlink(victim.parent().unwrap(), at).unwrap()
        }),
        ("objects/info/alternates", |at, victim| {
            std::fs::write(at, victim.parent().unwrap().as_os_str().as_bytes()).unwrap()
        }),
    ];
    for (planted, plant) in plants {
        let fx = Fixture::new();
        fx.write("a.txt", "a\n");
        fx.commit_all("base");
        let victim = fx.outside().join("victim");
        std::fs::write(&victim, CANARY).unwrap();
        // The run opens the repository (and records its baseline) before the step runs.
        let repo = fx.guarded(writable());
        let at = fx.path().join(".git").join(planted);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        plant(&at, &victim);
        match repo.head() {
            Err(GitError::LinkedGitDir(path) | GitError::Tampered(path)) => {
                assert!(path.ends_with(planted), "{planted}: {path:?}")
            }
            other => panic!("{planted}: {other:?}"),
        }
        // Control: a sandbox that cannot write the git directory planted nothing, and
        // nothing is checked.
        assert!(fx.repo().head().is_ok(), "{planted}");
    }
}

/// Writes a tree object of `entries` (mode, name, id) with git, as a step with a writable git
/// directory could, and returns its id.
fn raw_tree(dir: &Path, entries: &[(&str, &[u8], &str)]) -> String {
    let mut bytes = Vec::new();
    for (mode, name, id) in entries {
        bytes.extend_from_slice(mode.as_bytes());
        bytes.push(b' ');
        bytes.extend_from_slice(name);
        bytes.push(0);
        bytes.extend((0..20).map(|i| u8::from_str_radix(&id[2 * i..2 * i + 2], 16).unwrap()));
    }
    let file = dir.join("tree.bin");
    std::fs::write(&file, bytes).unwrap();
    git_out(
        dir,
        &[
            "hash-object",
            "-w",
            "-t",
            "tree",
            "--literally",
            file.to_str().unwrap(),
        ],
    )
}

fn point_head_at_tree(fx: &Fixture, tree: &str) {
    let commit = git_out(fx.path(), &["commit-tree", tree, "-m", "forged"]);
    git(fx.path(), &["update-ref", "refs/heads/main", &commit]);
}

#[test]
fn a_forged_tree_cannot_make_the_host_build_paths_without_end() {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    fx.commit_all("base");
    let blob = git_out(fx.path(), &["rev-parse", "HEAD:a.txt"]);
    // Control: a tree git wrote itself.
    assert_eq!(fx.repo().head_flat().unwrap().len(), 1);
    // Names git never writes.
    for name in [&b".."[..], b".", b"", b"a/b"] {
        let tree = raw_tree(fx.path(), &[("100644", name, &blob)]);
        point_head_at_tree(&fx, &tree);
        match fx.repo().head_flat() {
            Err(GitError::ForgedTree(what)) => assert!(what.contains("named"), "{what}"),
            other => panic!("{:?}: {other:?}", name.escape_ascii().to_string()),
        }
    }
    // One path longer than the kernel's: a chain of long names.
    let long = vec![b'n'; 255];
    let mut tree = raw_tree(fx.path(), &[("100644", &long, &blob)]);
    for _ in 0..16 {
        tree = raw_tree(fx.path(), &[("40000", &long, &tree)]);
    }
    point_head_at_tree(&fx, &tree);
    match fx.repo().head_flat() {
        Err(GitError::ForgedTree(what)) => assert!(what.contains("longer"), "{what}"),
        other => panic!("{other:?}"),
    }
    // Shared subtrees: 4^9 paths of 2,300 bytes from a few kilobytes of objects.
    let names: Vec<Vec<u8>> = (b'a'..=b'd')
        .map(|c| {
            let mut name = vec![c];
            name.extend(std::iter::repeat_n(b'x', 254));
            name
        })
        .collect();
    let mut tree = raw_tree(
        fx.path(),
        &names
            .iter()
            .map(|n| ("100644", n.as_slice(), blob.as_str()))
            .collect::<Vec<_>>(),
    );
    for _ in 0..8 {
        let entries: Vec<(&str, &[u8], &str)> = names
            .iter()
            .map(|n| ("40000", n.as_slice(), tree.as_str()))
            .collect();
        tree = raw_tree(fx.path(), &entries);
    }
    point_head_at_tree(&fx, &tree);
    match fx.repo().head_flat() {
        Err(GitError::ForgedTree(what)) => assert!(what.contains("bytes of paths"), "{what}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn ignore_rules_past_the_budget_refuse_the_commit_and_widen_the_diff() {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    fx.commit_all("base");
    // Eleven rule files of 951 rules each: past the 10,000 rules cordon reads.
    for dir in 0..11 {
        let rules: String = (0..950).map(|i| format!("rule-{i}\n")).collect();
        fx.write(
            &format!("d{dir}/.gitignore"),
            &format!("{rules}ignored.txt\n"),
        );
        fx.write(&format!("d{dir}/ignored.txt"), "x\n");
    }
    let repo = fx.repo();
    match fx.commit_with(&repo) {
        Err(err @ GitError::IgnoreTooLarge { .. }) => {
            assert!(err.to_string().contains("10000 rules"), "{err}")
        }
        other => panic!("{other:?}"),
    }
    // The diff shows more, never less: it is still taken, the files shown.
    let diff = fx.diff_with(&repo).unwrap();
    assert!(changed_paths(&diff).contains(&"d10/ignored.txt".to_owned()));
    // Control: within the budget the commit honours every file's rules.
    std::fs::remove_dir_all(fx.path().join("d10")).unwrap();
    let committed = fx.commit_with(&repo).unwrap().unwrap();
    assert!(committed.files.iter().all(|f| !f.ends_with("ignored.txt")));
}

#[test]
fn ignore_matching_past_its_budget_refuses_the_commit_and_widens_the_diff() {
    let fx = Fixture::new();
    // 10,000 wildcard rules (within the rule budgets) and 500 new files of 250-byte names:
    // matching them all would pass the work cordon's git spends on ignore rules.
    let mut rules: String = (0..9_999).map(|i| format!("q{i}*\n")).collect();
    rules.push_str("zz-*.log\n");
    fx.write(".gitignore", &rules);
    fx.commit_all("base");
    for i in 0..500 {
        fx.write(&format!("a{i:03}{}", "n".repeat(246)), "x\n");
    }
    fx.write("zz-ignored.log", "x\n");
    let repo = fx.repo();
    match fx.commit_with(&repo) {
        Err(err @ GitError::IgnoreTooSlow) => {
            assert!(err.to_string().contains("wildcards"), "{err}")
        }
        other => panic!("{other:?}"),
    }
    // The diff shows more, never less: past the budget nothing more is ignored.
    let diff = fx.diff_with(&repo).unwrap();
    assert!(changed_paths(&diff).contains(&"zz-ignored.log".to_owned()));
    // Control: the same tree under ordinary rules commits, honouring them.
    fx.write(".gitignore", "zz-*.log\n");
    let committed = fx.commit_with(&repo).unwrap().unwrap();
    assert_eq!(
        committed.files.len(),
        501,
        "the rule file and the new files"
    );
    assert!(!committed.files.iter().any(|f| f == "zz-ignored.log"));
}

#[test]
fn rule_blobs_in_head_are_read_only_within_the_budget() {
    let snapshot_of = |fx: &Fixture| {
        let repo = fx.repo();
        let head = repo.head_flat().unwrap();
        repo.snapshot(
            &fx.view(),
            &head,
            Ignoring::WorkTreeAndHead,
            &mut StatCache::default(),
        )
        .unwrap()
    };
    // One `.gitignore` blob past the per-file budget, committed in twenty directories: never
    // inflated.
    let fx = Fixture::new();
    let big = "#".repeat(cordon_git::MAX_RULES + 1);
    for dir in 0..20 {
        fx.write(&format!("d{dir}/.gitignore"), &big);
    }
    fx.commit_all("base");
    assert_eq!(snapshot_of(&fx).head_rules_read, 0);
    // Twenty distinct files within the per-file budget: read until the total budget is spent.
    let fx = Fixture::new();
    for dir in 0..20 {
        fx.write(
            &format!("d{dir:02}/.gitignore"),
            &format!("{dir}{}", "#".repeat(200 << 10)),
        );
    }
    fx.commit_all("base");
    let read = snapshot_of(&fx).head_rules_read;
    assert!(read > cordon_git::MAX_RULE_BYTES as u64 / 2, "{read}");
    assert!(
        read <= (cordon_git::MAX_RULE_BYTES + cordon_git::MAX_RULES) as u64,
        "{read}"
    );
    // Control: an ordinary rule file is read whole.
    let fx = Fixture::new();
    fx.write("src/.gitignore", "*.tmp\n");
    fx.commit_all("base");
    assert_eq!(snapshot_of(&fx).head_rules_read, 6);
}

#[test]
fn a_head_commit_past_a_megabyte_is_refused_before_it_is_read() {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    let message = fx.outside().join("message");
    std::fs::write(&message, "m".repeat(2 << 20)).unwrap();
    git(fx.path(), &["add", "-A"]);
    git(
        fx.path(),
        &["commit", "-q", "-F", message.to_str().unwrap()],
    );
    fx.write("a.txt", "b\n");
    let repo = fx.repo();
    let err = fx
        .commit_with(&repo)
        .expect_err("a commit of 2 MiB was read");
    assert!(err.to_string().contains("more than the 1048576"), "{err}");
    let err = fx.diff_with(&repo).expect_err("a commit of 2 MiB was read");
    assert!(err.to_string().contains("amend it"), "{err}");
    // Control: after an ordinary commit on top, both work.
    git(fx.path(), &["commit", "-qam", "ordinary"]);
    fx.write("a.txt", "c\n");
    assert!(fx.commit_with(&repo).unwrap().is_some());
}

#[test]
fn a_work_tree_of_deep_names_past_the_path_budget_is_refused() {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    fx.commit_all("base");
    // Twenty 200-byte directory names, then empty files: each path ~4 KiB, so 70,000 of them
    // name more than 256 MiB of paths.
    let mut deep = fx.path().to_path_buf();
    for level in 0..20 {
        deep.push(format!("{level:02}{}", "d".repeat(198)));
    }
    std::fs::create_dir_all(&deep).unwrap();
    let first = deep.join("f00000");
    std::fs::write(&first, "x\n").unwrap();
    let link = |count: usize| {
        for i in 1..count {
            std::fs::File::create(deep.join(format!("f{i:05}"))).unwrap();
        }
    };
    // Control: a thousand of them are taken.
    link(1_000);
    let repo = fx.repo();
    let diff = fx.diff_with(&repo).unwrap();
    assert_eq!(diff.changes.len(), 1_000);
    link(70_000);
    match fx.diff_with(&repo) {
        Err(err @ GitError::WorkTreeTooLarge { .. }) => {
            assert!(
                err.to_string().contains("268435456 bytes of paths"),
                "{err}"
            )
        }
        other => panic!("{:?}", other.map(|d| d.changes.len())),
    }
}

#[test]
fn a_planted_pack_with_a_delta_chain_deeper_than_git_writes_is_refused() {
    for (links, refused) in [(10, false), (5_000, true)] {
        let fx = Fixture::new();
        fx.write("a.txt", "a\n");
        fx.commit_all("base");
        let repo = fx.guarded(writable());
        let tip = plant_delta_chain(&fx.path().join(".git"), links, 100);
        // Control: git itself reads the tip through the chain.
        assert_eq!(git_out(fx.path(), &["cat-file", "-s", &tip]), "101");
        let diff = fx.diff_with(&repo);
        match (diff, refused) {
            (Err(err), true) => {
                assert!(
                    err.to_string().contains("delta chain deeper than 4095"),
                    "{err}"
                )
            }
            (Ok(_), false) => {}
            (other, _) => panic!("{links} links: {:?}", other.map(|d| d.changes.len())),
        }
    }
}

#[test]
fn a_commit_of_many_files_lists_the_first_thousand_and_counts_the_rest() {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    fx.commit_all("base");
    for i in 0..1005 {
        fx.write(&format!("many/f{i:04}"), "x\n");
    }
    let committed = fx.commit_with(&fx.repo()).unwrap().unwrap();
    assert_eq!(committed.files.len(), cordon_git::MAX_FILES);
    assert_eq!(committed.files_omitted, 5);
    assert_eq!(committed.files[0], "many/f0000");
    let tree = git_out(fx.path(), &["ls-tree", "-r", "--name-only", "HEAD"]);
    assert_eq!(tree.lines().count(), 1006, "every file is committed");
}

#[test]
fn sparse_files_are_skipped_from_a_megabyte_and_hard_links_share_one_blob() {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    fx.commit_all("base");
    let sparse = std::fs::File::create(fx.path().join("sparse.bin")).unwrap();
    sparse.set_len(2 << 20).unwrap();
    // Control: a dense file of the same size is recorded.
    fx.write("dense.bin", &"d".repeat(2 << 20));
    fx.write("linked/original", "the same inode\n");
    for i in 0..100 {
        std::fs::hard_link(
            fx.path().join("linked/original"),
            fx.path().join(format!("linked/l{i}")),
        )
        .unwrap();
    }
    let repo = fx.repo();
    let head = repo.head_flat().unwrap();
    let snapshot = repo
        .snapshot(
            &fx.view(),
            &head,
            Ignoring::WorkTree,
            &mut StatCache::default(),
        )
        .unwrap();
    let skipped: Vec<&str> = snapshot.skipped.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(skipped, ["sparse.bin"]);
    assert!(snapshot.entries.contains_key(&b"dense.bin"[..]));
    let original = snapshot.entries[&b"linked/original"[..]].entry;
    for i in 0..100 {
        assert_eq!(
            snapshot.entries[format!("linked/l{i}").as_bytes()].entry,
            original
        );
    }
    assert_eq!(
        original.id.to_string(),
        git_out(fx.path(), &["hash-object", "linked/original"])
    );
}
