//! Egress policy: canonical target parsing, pattern matching, address classification, decisions.
//!
//! Everything here is pure except [`SystemResolver`] and the [`proxy`] module (cargo feature
//! `proxy`), which is the IO shell around the rest. The proxy parses a request
//! with [`Target::parse`] or [`Target::parse_absolute`], asks [`decide`], resolves through a
//! [`Resolver`] and checks the answer with [`Policy::admit`] — or does all three with
//! [`Policy::evaluate`] — so the same typed value drives the decision, the resolution, the dial
//! and the audit record.
#![forbid(unsafe_code)]

mod cidr;
mod classify;
mod decision;
mod error;
mod grants;
#[cfg(feature = "lane")]
pub mod lane;
mod name;
mod pattern;
mod policy;
mod port;
#[cfg(feature = "proxy")]
pub mod proxy;
mod reason;
mod resolve;
#[cfg(feature = "roots")]
pub mod roots;
mod rules;
mod target;

pub use cidr::{Cidr, canonical_ip};
pub use classify::{AddressClass, classify};
pub use decision::{Decision, Evaluation};
pub use error::{PatternError, TargetError};
pub use grants::{GrantBounds, GrantRefusal, covers, overlaps};
pub use name::HostName;
pub use pattern::{Pattern, PatternList, Scope};
pub use policy::{Mode, Policy, PolicySpec, decide};
pub use port::{Port, Ports};
pub use reason::Reason;
pub use resolve::{
    ResolveError, Resolver, StaticResolver, SystemResolver, WithFallback, parse_resolve_flag,
};
pub use target::{AbsoluteForm, Host, Target};
