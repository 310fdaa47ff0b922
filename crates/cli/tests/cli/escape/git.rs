//! Git escapes: the git directory is read-only and a mount point, so a hostile step can neither
//! rename it nor plant hooks, config, `commondir` or `config.worktree`; the host's commit path then
//! runs no command the sandbox planted.

use std::path::Path;
use std::process::Command;

use super::{Outcome, on_host, outside, sandboxed, workspace};

/// Runs git on the host with the pinned environment of DESIGN §3's commit path.
fn pinned_git(repo: &Path, global_config: &Path, args: &[&str]) -> Outcome {
    let output = Command::new("git")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
        ])
        .args(["-c", "core.attributesFile=/dev/null"])
        .args(args)
        .current_dir(repo)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("GIT_DIR", repo.join(".git"))
        .env("GIT_COMMON_DIR", repo.join(".git"))
        .env("GIT_WORK_TREE", repo)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", global_config)
        .output()
        .expect("run git");
    Outcome::from_output(output)
}

/// Runs plain git, as a user would in a shell, with only an identity configured.
fn plain_git(repo: &Path, global_config: &Path, args: &[&str]) -> Outcome {
    let output = Command::new("git")
        .args(args)
        .current_dir(repo)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", global_config)
        .output()
        .expect("run git");
    Outcome::from_output(output)
}

/// A repository with one commit, and the identity-only global config the commit path writes.
fn repository(config_dir: &Path) -> (tempfile::TempDir, std::path::PathBuf) {
    let global = config_dir.join("gitconfig");
    std::fs::write(
        &global,
        "[user]\n\tname = Cordon Test\n\temail = test@example.test\n",
    )
    .expect("gitconfig");
    let ws = workspace();
    for args in [
        &["init", "-q"][..],
        &["commit", "-q", "--allow-empty", "-m", "start"][..],
    ] {
        let out = plain_git(ws.path(), &global, args);
        assert_eq!(out.code, Some(0), "git {args:?}:\n{out}");
    }
    (ws, global)
}

/// The hostile step: every way to make the host run a command later, each reported.
fn plant_script(marker: &Path) -> String {
    // Temporary directory names need no quoting, which keeps the nested printf formats readable.
    let marker = marker.display();
    let hook = format!("#!/bin/sh\\ntouch {marker}\\n");
    format!(
        "printf '{hook}' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && echo planted hook; \
         printf '[core]\\n\\tfsmonitor = touch {marker}; false\\n\\thooksPath = .git/hooks\\n[filter \"evil\"]\\n\\tclean = touch {marker}; cat\\n' >> .git/config && echo planted config; \
         echo /tmp > .git/commondir && echo planted commondir; \
         printf '[core]\\n\\tfsmonitor = touch {marker}\\n' > .git/config.worktree && echo planted config.worktree; \
         echo '* filter=evil' > .gitattributes; echo change > file.txt; echo probe-done"
    )
}

#[test]
fn sandbox_cannot_plant_git_hooks_config_or_commondir() {
    let config = outside();
    let host = outside();
    let marker = host.path().join("planted-command-ran");
    let (ws, global) = repository(config.path());
    let config_before = std::fs::read(ws.path().join(".git/config")).expect("read config");

    let run = sandboxed(ws.path(), &[], &plant_script(&marker));
    run.assert_line("probe-done");
    for what in ["hook", "config", "commondir", "config.worktree"] {
        assert!(
            !run.mentions(&format!("planted {what}")),
            "the sandbox planted {what}:\n{run}"
        );
    }
    assert!(
        !run.mentions("renamed .git"),
        "the sandbox renamed .git:\n{run}"
    );
    let git = ws.path().join(".git");
    assert!(git.join("HEAD").exists(), ".git is gone:\n{run}");
    assert!(
        !git.join("hooks/pre-commit").exists(),
        "a hook reached the host:\n{run}"
    );
    assert!(
        !git.join("commondir").exists() && !git.join("config.worktree").exists(),
        "{run}"
    );
    assert_eq!(
        std::fs::read(git.join("config")).expect("read config"),
        config_before,
        ".git/config changed"
    );

    // The host's commit path over whatever the step left in the work tree.
    for args in [
        &["status", "--short"][..],
        &["add", "-A"][..],
        &["commit", "-q", "-m", "step"][..],
    ] {
        let out = pinned_git(ws.path(), &global, args);
        assert_eq!(out.code, Some(0), "git {args:?}:\n{out}");
    }
    assert!(
        !marker.exists(),
        "a command planted by the sandbox ran on the host"
    );

    // Control: without the sandbox the same probe plants everything, and plain git runs it.
    let (control_ws, control_global) = repository(config.path());
    let control = on_host(control_ws.path(), &plant_script(&marker));
    for what in ["hook", "config", "commondir", "config.worktree"] {
        assert!(
            control.mentions(&format!("planted {what}")),
            "control: {what} is plantable:\n{control}"
        );
    }
    let _ = std::fs::remove_file(control_ws.path().join(".git/commondir"));
    let commit = plain_git(
        control_ws.path(),
        &control_global,
        &["commit", "-q", "-am", "x"],
    );
    assert!(
        marker.exists(),
        "control: the planted commands run under plain git:\n{commit}\n{control}"
    );
}

#[test]
fn sandbox_cannot_rename_or_replace_the_git_directory() {
    let config = outside();
    let (ws, _) = repository(config.path());
    let head_before = std::fs::read(ws.path().join(".git/HEAD")).expect("read HEAD");
    let script = "mv .git moved && echo renamed; rm -rf .git && echo removed; \
                  mkdir -p fake && mv fake .git && echo replaced; echo ref: refs/heads/evil > .git/HEAD && echo head";
    let run = sandboxed(ws.path(), &[], script);
    for what in ["renamed", "removed", "replaced", "head"] {
        assert!(
            !run.stdout.lines().any(|line| line == what),
            "the sandbox {what} the git directory:\n{run}"
        );
    }
    assert_eq!(
        std::fs::read(ws.path().join(".git/HEAD")).expect("read HEAD"),
        head_before
    );

    let (control_ws, _) = repository(config.path());
    let control = on_host(control_ws.path(), "mv .git moved && echo renamed");
    control.assert_line("renamed");
}

#[test]
fn linked_worktree_cannot_write_its_main_repository() {
    let config = outside();
    let (main, global) = repository(config.path());
    let host = outside();
    let linked = host.path().join("linked");
    let add = plain_git(
        main.path(),
        &global,
        &["worktree", "add", "-q", &linked.display().to_string()],
    );
    assert_eq!(add.code, Some(0), "git worktree add:\n{add}");
    let common = main.path().join(".git");
    let admin = common.join("worktrees/linked");
    let config_before = std::fs::read(common.join("config")).expect("read config");
    // The `.git` file names the admin directory, whose `commondir` leads to the main repository.
    let script = format!(
        "cat .git; echo '[core]' >> {common}/config && echo wrote-config; \
         echo x > {common}/hooks/post-checkout && echo wrote-hook; \
         echo /tmp > {admin}/commondir && echo wrote-commondir; echo probe-done",
        common = common.display(),
        admin = admin.display()
    );
    let run = sandboxed(&linked, &[], &script);
    run.assert_line("probe-done");
    for what in ["wrote-config", "wrote-hook", "wrote-commondir"] {
        assert!(
            !run.stdout.lines().any(|line| line == what),
            "the sandbox {what}:\n{run}"
        );
    }
    assert_eq!(
        std::fs::read(common.join("config")).expect("read config"),
        config_before
    );
    assert!(
        !common.join("hooks/post-checkout").exists(),
        "a hook reached the main repository"
    );

    let control = on_host(&linked, &script);
    for what in ["wrote-config", "wrote-hook", "wrote-commondir"] {
        control.assert_line(what);
    }
}
