//! Tests of the sandbox through its library API, judged by their effect on the host.
