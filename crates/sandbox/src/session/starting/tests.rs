//! The two halves of opening a session: what `Starting::open` refuses, and that a start never
//! opened leaves no init behind. `/bin/true` stands in for the init program: these tests never
//! let init past its maps, so it never runs.

use std::path::Path;

use super::*;
use crate::config::Workspace;

fn program() -> InitProgram {
    InitProgram::open(Path::new("/bin/true")).expect("/bin/true opens")
}

fn config(program: &InitProgram, init_start: InitStart) -> (tempfile::TempDir, SessionConfig) {
    let dir = tempfile::tempdir().expect("a temporary workspace");
    let workspace = Workspace::open(dir.path()).expect("the workspace opens");
    let mut config = SessionConfig::new(workspace, program.clone());
    config.init_start = init_start;
    (dir, config)
}

fn is_invalid_request(result: Result<Session, SandboxError>) -> bool {
    matches!(result, Err(SandboxError::InvalidRequest { .. }))
}

#[test]
fn open_refuses_a_configuration_naming_another_init_program_or_start() {
    let started = program();
    // Another opening of the same file is another program: what runs is what `start` opened.
    let other = program();
    let (_dir, wrong_program) = config(&other, InitStart::Exec);
    assert!(is_invalid_request(
        Session::start(&started, InitStart::Exec).open(wrong_program)
    ));
    let (_dir, wrong_start) = config(&started, InitStart::InProcessWhenSingleThreaded);
    assert!(is_invalid_request(
        Session::start(&started, InitStart::Exec).open(wrong_start)
    ));
    // The control: the matching configuration gets past the check (whatever happens after it,
    // with `/bin/true` as init).
    let (_dir, matching) = config(&started, InitStart::Exec);
    assert!(!is_invalid_request(
        Session::start(&started, InitStart::Exec).open(matching)
    ));
}

#[test]
fn a_start_never_opened_kills_its_init() {
    let starting = Session::start(&program(), InitStart::Exec);
    let pid = match &starting.cloned {
        Ok(cloned) => cloned.session.init.pid,
        // No user namespaces here: nothing was cloned, so nothing can be left behind.
        Err(SandboxError::Refused { .. }) => return,
        Err(err) => panic!("init was not cloned: {err}"),
    };
    let proc = format!("/proc/{pid}");
    // The control: init is alive, waiting for its maps.
    assert!(Path::new(&proc).exists(), "init {pid} is running");
    drop(starting);
    assert!(!Path::new(&proc).exists(), "init {pid} is gone");
}

/// The sandbox crate's own init program: `CORDON_SANDBOX_INIT` (set by `.ci/unprivileged`), else
/// the one `cargo test` built next to this test binary.
fn real_init() -> InitProgram {
    let path = std::env::var_os("CORDON_SANDBOX_INIT")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            Some(exe.parent()?.parent()?.join("cordon-sandbox-init"))
        })
        .expect("a path for the init program");
    InitProgram::open(&path).expect("the init program (built by `cargo test`) opens")
}

#[test]
fn a_session_opened_without_waiting_runs_its_first_command_in_the_built_root() {
    let program = real_init();
    let (_dir, config) = config(&program, InitStart::Exec);
    let mut session = Session::start(&program, InitStart::Exec)
        .open_without_waiting(config)
        .expect("the session opens");
    // The host name is set while init builds the root: the command ran after that. The control:
    // the host's own name is another.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("the host name");
    assert_ne!(host.trim_end(), crate::facts::HOSTNAME);
    let request =
        crate::exec::ExecRequest::new(vec!["/bin/cat".into(), "/proc/sys/kernel/hostname".into()]);
    let outcome = session
        .exec(&request, &mut |_, _| {})
        .expect("the command runs");
    assert_eq!(outcome.exit_code(), 0);
    assert_eq!(
        outcome.stdout.bytes,
        format!("{}\n", crate::facts::HOSTNAME).as_bytes()
    );
}

#[test]
fn a_session_opened_without_waiting_refuses_listeners_until_it_is_ready() {
    let program = real_init();
    let (_dir, config) = config(&program, InitStart::Exec);
    let mut session = Session::start(&program, InitStart::Exec)
        .open_without_waiting(config)
        .expect("the session opens");
    let addr = "127.0.0.1:0".parse().expect("an address");
    assert!(matches!(
        session.listen_tcp(addr),
        Err(SandboxError::InvalidRequest { .. })
    ));
    // The control: once ready, the same call gets its listener.
    session.wait_ready().expect("init builds the root");
    assert!(session.listen_tcp(addr).is_ok());
}
