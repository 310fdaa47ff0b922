//! One module per `cordon` subcommand; each exposes `Args` and `run(Args) -> anyhow::Result<ExitCode>`.

pub mod batch;
pub mod cache;
pub mod diff;
pub mod doctor;
pub mod egress;
pub mod exec;
pub mod image;
pub mod init;
pub mod logs;
pub mod policy;
pub mod proxy;
pub mod run;
pub mod runs;
pub mod ui;
pub mod validate;
