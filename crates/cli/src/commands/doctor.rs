//! `cordon doctor` (being written by the caps/doctor work; replace this placeholder).

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("cordon doctor is not available yet")
}
