//! Tests of the sandbox through its library API, judged by their effect on the host. Each "refused"
//! probe has a control that shows the probe works where nothing stops it.

mod cgroup;
mod git;
mod git_escape;
mod identity;
mod image;
mod inheritance;
mod layout;
mod lifecycle;
mod limits;
mod network;
mod probe;
mod process;
mod protect;
mod smoke;
mod submodule;
mod support;
mod watch;
