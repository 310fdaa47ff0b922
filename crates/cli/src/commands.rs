//! One module per `cordon` subcommand; each exposes `Args` and `run(Args) -> anyhow::Result<ExitCode>`.

pub mod doctor;
pub mod exec;
pub mod init;
pub mod run;
pub mod validate;
