//! A session's init for the sandbox crate's own tests: `cordon` serves as init in production
//! (started as `cordon-init`); this binary lets the library be tested without the cli.
//!
//! Started as `cordon-sandbox-one-shot WORKSPACE CMD [ARG]...` instead, it is a single-threaded
//! one-shot runner like `cordon exec` (a session with `InitStart::InProcessWhenSingleThreaded`,
//! one command, its stdout and stderr passed through, its exit code returned), so the tests can
//! reach the in-process init, which a multi-threaded test binary never takes.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use cordon_sandbox::{
    ExecRequest, InitProgram, InitStart, Session, SessionConfig, Stream, Workspace,
};

/// `argv[0]` that selects the one-shot runner.
const ONE_SHOT: &str = "cordon-sandbox-one-shot";

fn main() -> ExitCode {
    let mut args = std::env::args();
    if args.next().as_deref() != Some(ONE_SHOT) {
        cordon_sandbox::init::main()
    }
    let Some(workspace) = args.next() else {
        eprintln!("usage: {ONE_SHOT} WORKSPACE CMD [ARG]...");
        return ExitCode::from(125);
    };
    match one_shot(Path::new(&workspace), args.collect()) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX)),
        Err(err) => {
            eprintln!("{ONE_SHOT}: {err}");
            ExitCode::from(125)
        }
    }
}

fn one_shot(workspace: &Path, argv: Vec<String>) -> Result<i32, cordon_sandbox::SandboxError> {
    let mut config = SessionConfig::new(Workspace::open(workspace)?, InitProgram::current_exe()?);
    config.init_start = InitStart::InProcessWhenSingleThreaded;
    let mut session = Session::open(config)?;
    let outcome = session.exec(&ExecRequest::new(argv), &mut |stream, bytes| {
        let _ = match stream {
            Stream::Stdout => std::io::stdout().write_all(bytes),
            Stream::Stderr => std::io::stderr().write_all(bytes),
        };
    })?;
    session.close();
    Ok(outcome.exit_code())
}
