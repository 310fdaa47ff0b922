//! Egress policy: canonical target parsing, pattern matching, address classification, decisions.
#![forbid(unsafe_code)]
