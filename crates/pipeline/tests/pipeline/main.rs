//! Integration tests of the pipeline crate: one binary, one module per concern.

mod fixture;
mod policy;
mod roundtrip;
mod rules;
mod schema;
mod valid;
