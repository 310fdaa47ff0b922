//! Fuzz target: the egress target parser (placeholder).
