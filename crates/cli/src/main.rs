//! The `cordon` binary: parses the command line and hands each command to its module in `commands/`.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod commands;
mod operator;
mod pipeline_file;
mod progress;
mod state_dir;

/// A gated, kernel-sandboxed, egress-controlled, resumable development loop for coding agents.
#[derive(Debug, Parser)]
#[command(
    name = "cordon",
    version,
    propagate_version = true,
    max_term_width = 100
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a pipeline, resume a stopped run, or print the plan with --dry-run.
    Run(commands::run::Args),
    /// Carry an outcome through a task graph: decompose, then plan, execute, scrutinize, verify
    /// and validate each task (resume with `run --resume`).
    Do(commands::run::DoArgs),
    /// Run a pipeline once per task of a tasks file, each on a fresh clone of its repository
    /// (`batch status`, `batch resume`).
    Batch(commands::batch::Args),
    /// Print a run's events (the most recent run by default).
    Logs(commands::logs::Args),
    /// Print the changes a run, or one step attempt, made to the workspace.
    Diff(commands::diff::Args),
    /// List the stored runs and their status.
    Runs(commands::runs::Args),
    /// Check a pipeline and print every problem as file:line:col.
    Validate(commands::validate::Args),
    /// Run one command in a fresh sandbox.
    Exec(commands::exec::Args),
    /// Write a commented pipeline.yaml and an agent file to start from (with --outcome, an
    /// outcome.yaml and its five agent files).
    Init(commands::init::Args),
    /// Report which sandbox layers this machine provides, and the remedy for each missing one.
    Doctor(commands::doctor::Args),
    /// Serve the run pages on loopback: every stored run, live ones included.
    Ui(commands::ui::Args),
    /// Serve the egress proxy on its own, with the same policy options as a session.
    Proxy(commands::proxy::Args),
    /// Print each step's effective egress: allow/deny, grants, the operator deny, OPEN steps.
    Policy(commands::policy::Args),
    /// Suggest the network: block a step needs, from a run or an audit file (`egress suggest`).
    Egress(commands::egress::Args),
    /// List or clear the persistent download caches (`isolation.caches`, `exec --cache`).
    Cache(commands::cache::Args),
    /// Import, list or remove the environment images steps run on (`image:`, `exec --image`).
    Image(commands::image::Args),
}

/// `cordon exec` parsed on its own: the same `exec` definition (and the same program name,
/// version and help layout), without the other commands. Clap builds every subcommand's arguments
/// before it parses, which cost `cordon exec` ~0.05–0.1 ms of every start (the start-up benchmark
/// in `docs/benchmarks.md`); a unit test keeps the two parsers' `exec` identical.
#[derive(Debug, Parser)]
#[command(
    name = "cordon",
    version,
    propagate_version = true,
    max_term_width = 100
)]
struct ExecOnly {
    #[command(subcommand)]
    command: ExecCommand,
}

#[derive(Debug, Subcommand)]
enum ExecCommand {
    /// Run one command in a fresh sandbox.
    Exec(commands::exec::Args),
}

fn main() -> ExitCode {
    // Started by a sandbox session as its PID 1 (`argv[0]` = "cordon-init"): serve it, nothing else.
    if std::env::args_os()
        .next()
        .is_some_and(|arg0| arg0 == cordon_sandbox::init::ARGV0)
    {
        cordon_sandbox::init::main()
    }
    quiet_closed_stdout();
    if std::env::args_os().nth(1).is_some_and(|arg| arg == "exec") {
        let argv: Vec<OsString> = std::env::args_os().skip(2).collect();
        let early = commands::exec::start_early(&argv);
        return match ExecOnly::try_parse() {
            Ok(ExecOnly {
                command: ExecCommand::Exec(args),
            }) => finish(commands::exec::run(args, early)),
            Err(err) => usage_error(&err),
        };
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    finish(match cli.command {
        Command::Run(args) => commands::run::run(args),
        Command::Do(args) => commands::run::run_outcome(args),
        Command::Batch(args) => commands::batch::run(args),
        Command::Logs(args) => commands::logs::run(args),
        Command::Diff(args) => commands::diff::run(args),
        Command::Runs(args) => commands::runs::run(args),
        Command::Validate(args) => commands::validate::run(args),
        Command::Exec(args) => commands::exec::run(args, None),
        Command::Init(args) => commands::init::run(args),
        Command::Doctor(args) => commands::doctor::run(args),
        Command::Proxy(args) => commands::proxy::run(args),
        Command::Ui(args) => commands::ui::run(args),
        Command::Policy(args) => commands::policy::run(args),
        Command::Egress(args) => commands::egress::run(args),
        Command::Cache(args) => commands::cache::run(args),
        Command::Image(args) => commands::image::run(args),
    })
}

/// A closed stdout (`cordon runs | head -1`) ends the command quietly with status 0 (DESIGN
/// §18): what was asked for has been read. Rust ignores `SIGPIPE`, so a write to the closed pipe
/// fails with `EPIPE` and `println!` panics with "failed printing to stdout"; that one panic
/// becomes the exit, every other keeps the default report. (`cordon exec` drops its command's
/// output instead, so the command is not stopped.)
fn quiet_closed_stdout() {
    /// `EPIPE` on Linux (the only system cordon runs on), as `std` reports it.
    const EPIPE: i32 = 32;
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout")
            && message.contains(&std::io::Error::from_raw_os_error(EPIPE).to_string())
        {
            std::process::exit(0);
        }
        report(info);
    }));
}

/// The exit code of a finished command; a runtime failure is printed and exits 1.
fn finish(result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("cordon: {err:#}");
            ExitCode::from(1)
        }
    }
}

/// Prints a clap error and picks the exit code the contract gives usage errors:
/// 125 for `cordon exec` (whose other codes belong to the command it runs), 2 elsewhere.
fn usage_error(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    // `--help` and `--version` are not errors.
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        let _ = err.print();
        return ExitCode::SUCCESS;
    }
    let _ = err.print();
    let is_exec = std::env::args_os().nth(1).is_some_and(|a| a == "exec");
    ExitCode::from(if is_exec {
        commands::exec::USAGE_EXIT
    } else {
        2
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn panics_unwind_through_the_statically_linked_unwinder() {
        // `build.rs` links `libgcc_eh` in place of `libgcc_s`; catching a panic needs it to work.
        let caught = std::panic::catch_unwind(|| {
            let frames: Vec<u32> = Vec::new();
            frames[0]
        });
        assert!(caught.is_err());
    }

    #[test]
    fn command_line_definition_is_consistent() {
        Cli::command().debug_assert();
        ExecOnly::command().debug_assert();
    }

    /// What a parser makes of `argv`: the parsed `exec` arguments, or the rendered error.
    fn parse<P: Parser>(argv: &[&str], exec: impl Fn(P) -> Option<commands::exec::Args>) -> String {
        match P::try_parse_from(argv) {
            Ok(parsed) => format!("{:?}", exec(parsed)),
            Err(err) => format!("{:?}: {}", err.kind(), err.render()),
        }
    }

    #[test]
    fn exec_alone_parses_exactly_like_the_full_command_line() {
        let exec = |cmd: &mut clap::Command| {
            let sub = cmd.find_subcommand_mut("exec").expect("exec subcommand");
            (
                sub.render_long_help().to_string(),
                sub.render_help().to_string(),
                sub.render_usage().to_string(),
                sub.render_version(),
            )
        };
        assert_eq!(exec(&mut Cli::command()), exec(&mut ExecOnly::command()));
        let rows: [&[&str]; 9] = [
            &["cordon", "exec", "--", "/bin/true"],
            &[
                "cordon", "exec", "-w", "/tmp", "--net", "open", "-e", "A=1", "--", "ls", "-l",
            ],
            &[
                "cordon",
                "exec",
                "--allow",
                "example.com",
                "--memory",
                "2G",
                "--",
                "sh",
            ],
            &["cordon", "exec"],
            &["cordon", "exec", "--bogus", "--", "true"],
            &["cordon", "exec", "--timeout", "soon", "--", "true"],
            &["cordon", "exec", "--help"],
            &["cordon", "exec", "--version"],
            &["cordon", "exec", "true"],
        ];
        for argv in rows {
            let full = parse::<Cli>(argv, |cli| match cli.command {
                Command::Exec(args) => Some(args),
                _ => None,
            });
            let alone = parse::<ExecOnly>(argv, |only| match only.command {
                ExecCommand::Exec(args) => Some(args),
            });
            assert_eq!(full, alone, "{argv:?}");
        }
    }
}
