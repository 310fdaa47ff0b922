//! End-to-end tests of the `cordon` binary: one test binary, one module per command.

mod support;
