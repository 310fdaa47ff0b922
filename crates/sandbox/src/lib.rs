//! The sandbox: sessions built from Linux namespaces, Landlock and seccomp. The only crate with `unsafe`,
//! and all of it lives in [`sys`].

pub mod cgroup;
pub mod environment;
pub mod landlock;
pub mod probe;
pub mod seccomp;
mod sys;
