//! End-to-end tests of the `cordon` binary: one test binary, one module per command.

mod agent;
mod agent_run;
pub mod batch;
mod budget;
mod caches;
mod deliver;
mod diff;
mod doctor;
mod documents;
mod escape;
mod exec;
mod exec_egress;
mod exec_tty;
mod git_mutations;
mod help;
mod host_boundary;
mod image;
mod init;
#[cfg(feature = "scale-out")]
mod kubernetes;
mod lane;
mod logs;
mod mcp;
mod outcome;
mod policy;
mod proxy;
mod run;
mod run_dry_run;
mod run_egress;
mod run_limits;
mod run_ui;
mod runs;
#[cfg(feature = "scale-out")]
mod slurm;
#[cfg(feature = "scale-out")]
mod store;
mod support;
mod toolchains;
mod ui;
mod validate;
