//! Raw system calls behind narrow safe functions. The only module allowed `unsafe`; every block says
//! why it is sound.
#![allow(unsafe_code)]

mod filter;
mod probe;
