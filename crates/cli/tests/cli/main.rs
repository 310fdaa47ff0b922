//! End-to-end tests of the `cordon` binary: one test binary, one module per command.

mod agent;
mod doctor;
mod escape;
mod exec;
mod help;
mod init;
mod logs;
mod proxy;
mod run;
mod run_dry_run;
mod runs;
mod support;
mod ui;
mod validate;
