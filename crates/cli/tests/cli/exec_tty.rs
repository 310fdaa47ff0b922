//! `cordon exec -t` under a real terminal (tmux, DESIGN §11): the command gets a pseudo-terminal
//! of the session's own devpts as its controlling terminal, the window's size and its changes,
//! the keys typed (`^C` as a signal to its foreground group), and the user's terminal is back in
//! its own mode afterwards. Without `-t` there is no terminal (the control), and `-t` without a
//! terminal on stdin is refused before anything runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{cordon, cordon_bin};

/// A tmux server of its own (socket in a temp dir, no user config), killed on drop.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn start(dir: &Path, width: u16, height: u16, command: &str) -> Tmux {
        let tmux = Tmux {
            socket: dir.join("tmux.sock"),
        };
        let status = tmux
            .command()
            .args(["-f", "/dev/null", "new-session", "-d", "-s", "t"])
            .args(["-x", &width.to_string(), "-y", &height.to_string()])
            .arg(command)
            .status()
            .expect("tmux: install it (the distribution's `tmux`)");
        assert!(status.success(), "tmux new-session");
        tmux
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new("tmux");
        // tmux runs a pane's command with `$SHELL -c`, else the user's login shell: for uid
        // 65534 that is `nologin`, which ends the pane (and the server) at once.
        cmd.arg("-S")
            .arg(&self.socket)
            .env("SHELL", "/bin/sh")
            .stdin(Stdio::null());
        cmd
    }

    fn run(&self, args: &[&str]) {
        let status = self.command().args(args).status().expect("tmux");
        assert!(status.success(), "tmux {args:?}");
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").status();
    }
}

/// Polls `probe` (at most 20 s, every 50 ms) until it answers; fails naming `what` and the last
/// thing seen.
fn wait_for<T, S: std::fmt::Debug>(what: &str, mut probe: impl FnMut() -> Result<T, S>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match probe() {
            Ok(found) => return found,
            Err(seen) => assert!(Instant::now() < deadline, "{what}: {seen:?}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `file` holds at least `lines` lines; returns them.
fn lines(file: &Path, lines: usize) -> Vec<String> {
    wait_for(
        &format!("{} never had {lines} lines", file.display()),
        || {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            let found: Vec<String> = text.lines().map(str::to_owned).collect();
            if found.len() >= lines {
                Ok(found)
            } else {
                Err(text)
            }
        },
    )
}

/// A temporary directory and its workspace `ws` in it (canonical, made).
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical").join("ws");
    std::fs::create_dir(&ws).expect("mkdir");
    (dir, ws)
}

/// An interactive bash in tmux whose prompt is `READY>`, ready for keys.
fn prompt_shell(dir: &Path) -> Tmux {
    let tmux = Tmux::start(dir, 100, 30, "env PS1='READY> ' bash --norc --noprofile");
    wait_for_last_line(&tmux, "READY>");
    tmux
}

fn quote(path: &Path) -> String {
    format!("'{}'", path.display())
}

#[test]
fn exec_t_gives_the_command_a_terminal_that_follows_the_window_and_the_keys() {
    let (dir, ws) = workspace();
    let out = ws.join("out");
    // In the sandbox: what the terminal is, its size, a typed line, the size after a resize;
    // then a sleep for ^C to end. Outside: the exit status and the terminal's mode afterwards.
    let script = "tty > out; stty size >> out; read line; echo \"typed=$line\" >> out; \
                  stty size >> out; sleep 60";
    let command = format!(
        "{} exec -t -w {} -- sh -c '{}'; echo \"exit=$?\" > {}; stty -a > {}; sleep 60",
        quote(&cordon_bin()),
        quote(&ws),
        script.replace('\'', "'\\''"),
        quote(&dir.path().join("rc")),
        quote(&dir.path().join("after")),
    );
    let tmux = Tmux::start(dir.path(), 91, 27, &command);
    let first = lines(&out, 2);
    assert!(
        first[0].starts_with("/dev/pts/"),
        "the command's stdin is a terminal of the session's devpts: {first:?}"
    );
    let initial = first[1].clone();
    assert!(initial.ends_with(" 91"), "the window's width: {first:?}");
    tmux.run(&["resize-window", "-t", "t", "-x", "120", "-y", "40"]);
    // The size is followed every 100 ms; the command reads it after the line is typed.
    std::thread::sleep(Duration::from_millis(500));
    tmux.run(&["send-keys", "-t", "t", "hello", "Enter"]);
    let all = lines(&out, 4);
    assert_eq!(all[2], "typed=hello");
    assert!(
        all[3].ends_with(" 120"),
        "the size change reached the command: {all:?}"
    );
    assert_ne!(all[3], initial);
    tmux.run(&["send-keys", "-t", "t", "C-c"]);
    assert_eq!(
        lines(&dir.path().join("rc"), 1),
        ["exit=130"],
        "^C killed the command (SIGINT)"
    );
    // The user's terminal is in its own (cooked) mode again: echo and line editing on.
    let after = lines(&dir.path().join("after"), 1).join("\n");
    assert!(
        after.contains(" icanon") && after.contains(" echo"),
        "{after}"
    );
}

#[test]
fn without_t_the_command_has_no_terminal_and_t_needs_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The control: pipes, no terminal.
    let out = cordon()
        .args(["exec", "-w"])
        .arg(dir.path())
        .args(["--", "sh", "-c", "tty; test -t 0 || echo no-terminal"])
        .stdin(Stdio::null())
        .output()
        .expect("cordon exec");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "not a tty\nno-terminal\n"
    );
    let out = cordon()
        .args(["exec", "-t", "-w"])
        .arg(dir.path())
        .args(["--", "sh", "-c", "touch ran"])
        .stdin(Stdio::null())
        .output()
        .expect("cordon exec -t");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("`-t` needs a terminal on standard input"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.path().join("ran").exists(), "nothing ran");
}

/// The pane's lines, trailing blanks dropped.
fn pane(tmux: &Tmux) -> Vec<String> {
    let out = tmux
        .command()
        .args(["capture-pane", "-p", "-t", "t"])
        .output()
        .expect("tmux capture-pane");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines: Vec<String> = text.lines().map(|l| l.trim_end().to_owned()).collect();
    while lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    lines
}

/// Waits until the pane's last line is `line`.
fn wait_for_last_line(tmux: &Tmux, line: &str) -> Vec<String> {
    wait_for(&format!("the pane never ended in {line:?}"), || {
        let lines = pane(tmux);
        if lines.last().is_some_and(|l| l == line) {
            Ok(lines)
        } else {
            Err(lines)
        }
    })
}

/// A script that floods the terminal (so it answers late), sets a colour, then asks for it, for
/// the device attributes and the cursor position, and turns mouse reporting on: everything that
/// would make the terminal type into the shell after the command.
const QUESTIONS: &str = "head -c 200000 /dev/zero | tr '\\0' ' '; \
    printf '\\033[H\\033[2J\\033]11;rgb:de/ad/be\\007\\033]11;?\\007\\033[c\\033[6n\\033[?1003h'";

#[test]
fn no_answer_to_a_question_the_command_asked_reaches_the_shell_after_it() {
    let (dir, ws) = workspace();
    std::fs::write(ws.join("questions.sh"), QUESTIONS).expect("write");
    let tmux = prompt_shell(dir.path());
    // The control: the script run bare leaves the terminal's answers typed at the prompt.
    tmux.run(&[
        "send-keys",
        "-t",
        "t",
        &format!("cd {} && sh questions.sh", quote(&ws)),
        "Enter",
    ]);
    std::thread::sleep(Duration::from_secs(2));
    let bare = pane(&tmux);
    assert!(
        bare.last().is_some_and(|l| l
            .rsplit_once("READY>")
            .is_some_and(|(_, typed)| !typed.trim().is_empty())),
        "the control typed nothing, so this test could not fail: {bare:?}"
    );
    tmux.run(&[
        "send-keys",
        "-t",
        "t",
        "C-u",
        "printf '\\033[?1003l'; clear",
        "Enter",
    ]);
    wait_for_last_line(&tmux, "READY>");
    for tty in [true, false] {
        let flag = if tty { "-t " } else { "" };
        tmux.run(&[
            "send-keys",
            "-t",
            "t",
            &format!(
                "{} exec {flag}-w . -- sh questions.sh; clear",
                quote(&cordon_bin())
            ),
            "Enter",
        ]);
        // Nothing typed after the prompt, now or a moment later.
        wait_for_last_line(&tmux, "READY>");
        std::thread::sleep(Duration::from_secs(1));
        assert_eq!(
            pane(&tmux).last().map(String::as_str),
            Some("READY>"),
            "with{} -t",
            if tty { "" } else { "out" }
        );
        let flags = tmux
            .command()
            .args(["display", "-p", "-t", "t", "#{mouse_any_flag}"])
            .output()
            .expect("tmux display");
        assert_eq!(
            String::from_utf8_lossy(&flags.stdout).trim(),
            "0",
            "mouse reporting is off again"
        );
    }
}

#[test]
fn three_escapes_stop_a_command_that_ignores_every_key() {
    let (dir, ws) = workspace();
    let command = format!(
        "{} exec -t -w {} -- sh -c 'trap \"\" INT QUIT TSTP; stty -isig; echo ignoring > started; \
         sleep 60'; echo \"exit=$?\" > {}; sleep 60",
        quote(&cordon_bin()),
        quote(&ws),
        quote(&dir.path().join("rc")),
    );
    let tmux = Tmux::start(dir.path(), 100, 30, &command);
    lines(&ws.join("started"), 1);
    tmux.run(&["send-keys", "-t", "t", "C-c", "C-\\", "C-z"]);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !dir.path().join("rc").exists(),
        "the command ignores ^C, ^\\ and ^Z (the control)"
    );
    tmux.run(&["send-keys", "-t", "t", "C-]", "C-]", "C-]"]);
    assert_eq!(lines(&dir.path().join("rc"), 1), ["exit=137"]);
    assert!(
        pane(&tmux)
            .iter()
            .any(|l| l.contains("cordon: stopped from the terminal (^] three times)")),
        "{:?}",
        pane(&tmux)
    );
}

#[test]
fn without_t_a_terminal_on_stdin_reaches_the_command_as_a_pipe() {
    let (dir, ws) = workspace();
    let command = format!(
        "{} exec -w {} -- sh -c 'test -t 0 || echo stdin-is-a-pipe > out; read line; \
         echo \"typed=$line\" >> out'; sleep 60",
        quote(&cordon_bin()),
        quote(&ws),
    );
    let tmux = Tmux::start(dir.path(), 100, 30, &command);
    assert_eq!(lines(&ws.join("out"), 1), ["stdin-is-a-pipe"]);
    tmux.run(&["send-keys", "-t", "t", "hello", "Enter"]);
    assert_eq!(
        lines(&ws.join("out"), 2),
        ["stdin-is-a-pipe", "typed=hello"]
    );
}

#[test]
fn a_signal_to_cordon_stops_the_command_and_exits_128_plus_its_number() {
    let dir = tempfile::tempdir().expect("tempdir");
    let child = cordon()
        .args(["exec", "-w"])
        .arg(dir.path())
        .args(["--", "sh", "-c", "touch started; sleep 60; touch finished"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let started = dir.path().join("started");
    wait_for("the command never started", || {
        started.exists().then_some(()).ok_or(())
    });
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(143));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cordon: interrupted (signal 15)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The command was stopped, not left running.
    std::thread::sleep(Duration::from_millis(300));
    assert!(!dir.path().join("finished").exists());
}

#[test]
fn a_background_exec_runs_to_its_end_without_touching_the_terminal() {
    let (dir, ws) = workspace();
    let tmux = prompt_shell(dir.path());
    tmux.run(&[
        "send-keys",
        "-t",
        "t",
        &format!(
            "{} exec -w {} -- sh -c 'sleep 1; echo done > out' & wait $!; echo \"rc=$?\" > {}",
            quote(&cordon_bin()),
            quote(&ws),
            quote(&dir.path().join("rc"))
        ),
        "Enter",
    ]);
    // A job stopped by SIGTTOU/SIGTTIN would never end, and `wait` with it.
    assert_eq!(lines(&dir.path().join("rc"), 1), ["rc=0"]);
    assert_eq!(lines(&ws.join("out"), 1), ["done"]);
}

#[test]
fn cordon_run_on_a_terminal_redraws_its_steps_in_place_and_ends_with_the_tail_and_summary() {
    let f = crate::run::Fixture::new(
        "name: live\nsteps:\n  - name: build\n    command: sleep 1; echo built\n  - name: check\n    command: echo first-of-the-tail; echo boom-at-the-end; exit 3\n",
    );
    let command = format!(
        "{} run --no-ui --state-dir {}; echo \"exit=$?\"; sleep 60",
        quote(&cordon_bin()),
        quote(&f.state),
    );
    let tmux = Tmux::start(&f.ws, 120, 40, &format!("cd {} && {command}", quote(&f.ws)));
    let screen = wait_for("the run never printed its exit status", || {
        let lines = pane(&tmux);
        if lines.iter().any(|l| l.starts_with("exit=")) {
            Ok(lines)
        } else {
            Err(lines)
        }
    });
    let text = screen.join("\n");
    assert!(text.contains("exit=1"), "{text}");
    // The live block was redrawn in place: each step has one line on the final screen, not one
    // per redraw, and the failed step's output tail sits under it.
    assert_eq!(
        screen.iter().filter(|l| l.starts_with("build ")).count(),
        1,
        "the live line gave way to the summary row: {text}"
    );
    // The failed step's line stays, its output's tail under it.
    let failed = screen
        .iter()
        .position(|l| l.starts_with("check  failed   attempt 1"))
        .unwrap_or_else(|| panic!("no line for the failed step: {text}"));
    assert_eq!(screen[failed + 1], "    first-of-the-tail", "{text}");
    assert_eq!(screen[failed + 2], "    boom-at-the-end", "{text}");
    assert!(text.contains("step   status"), "{text}");
    assert!(
        text.contains("run ") && text.contains(" failure: "),
        "{text}"
    );
}
