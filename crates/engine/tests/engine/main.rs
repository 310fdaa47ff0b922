//! The engine against a scripted fake executor and a real store in a temporary directory:
//! routing, attempts, hygiene, feedback, produces, setup stamps, secrets, crash-and-resume, and
//! the commit action against a real git repository.

mod agent;
mod commit;
mod crash;
mod fake;
mod harness;
mod outcome;
mod reference;
mod resources;
mod routing;
mod setup;
mod steps;
