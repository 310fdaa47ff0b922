//! Integration tests of cordon-egress: data tables through one `check` helper per module, and
//! property tests.

mod cidr;
mod classify;
mod decide;
mod grants;
mod lane;
mod pattern;
mod properties;
mod proxy;
mod resolve;
mod target;
