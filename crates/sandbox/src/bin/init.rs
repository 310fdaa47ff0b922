//! A session's init for the sandbox crate's own tests: `cordon` serves as init in production
//! (started as `cordon-init`); this binary lets the library be tested without the cli.
#![forbid(unsafe_code)]

fn main() {
    cordon_sandbox::init::main()
}
