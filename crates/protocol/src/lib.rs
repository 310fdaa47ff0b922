//! Identifiers and wire types shared by every other cordon crate. No IO.
#![forbid(unsafe_code)]
