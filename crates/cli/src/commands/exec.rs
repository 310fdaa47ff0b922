//! `cordon exec` (being written by the sandbox work; replace this placeholder).

use std::process::ExitCode;

/// Exit status for usage errors and refusals: nothing ran.
pub const USAGE_EXIT: u8 = 125;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("cordon exec is not available yet")
}
