//! The `cordon` binary: parses the command line and hands each command to its module in `commands/`.
#![forbid(unsafe_code)]

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
    /// Print a run's events (the most recent run by default).
    Logs(commands::logs::Args),
    /// List the stored runs and their status.
    Runs(commands::runs::Args),
    /// Check a pipeline and print every problem as file:line:col.
    Validate(commands::validate::Args),
    /// Run one command in a fresh sandbox.
    Exec(commands::exec::Args),
    /// Write a commented pipeline.yaml and an agent file to start from.
    Init(commands::init::Args),
    /// Report which sandbox layers this machine provides, and the remedy for each missing one.
    Doctor(commands::doctor::Args),
    /// Serve the run pages on loopback: every stored run, live ones included.
    Ui(commands::ui::Args),
    /// Serve the egress proxy on its own, with the same policy options as a session.
    Proxy(commands::proxy::Args),
    /// Print each step's effective egress: allow/deny, grants, the operator deny, OPEN steps.
    Policy(commands::policy::Args),
}

fn main() -> ExitCode {
    // Started by a sandbox session as its PID 1 (`argv[0]` = "cordon-init"): serve it, nothing else.
    if std::env::args_os()
        .next()
        .is_some_and(|arg0| arg0 == cordon_sandbox::init::ARGV0)
    {
        cordon_sandbox::init::main()
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    let result = match cli.command {
        Command::Run(args) => commands::run::run(args),
        Command::Logs(args) => commands::logs::run(args),
        Command::Runs(args) => commands::runs::run(args),
        Command::Validate(args) => commands::validate::run(args),
        Command::Exec(args) => commands::exec::run(args),
        Command::Init(args) => commands::init::run(args),
        Command::Doctor(args) => commands::doctor::run(args),
        Command::Proxy(args) => commands::proxy::run(args),
        Command::Ui(args) => commands::ui::run(args),
        Command::Policy(args) => commands::policy::run(args),
    };
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
    fn command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
