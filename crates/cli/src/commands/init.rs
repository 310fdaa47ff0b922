//! `cordon init` (being written by the pipeline work; replace this placeholder).

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("cordon init is not available yet")
}
