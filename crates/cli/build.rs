//! Links the GCC unwinder into `cordon` statically instead of loading `libgcc_s.so.1` at start.
//!
//! Why: `cordon exec` is a sandboxed command's whole start-up, and on the benchmark VM loading
//! `libgcc_s` — mapping it, relocating it, and running its constructor, which queries the CPU's
//! features with `cpuid` (a VM exit each) — cost ~0.1 ms before `main` (docs/benchmarks.md).
//! `libgcc_eh.a` is the same unwinder as an archive, what `gcc -static-libgcc` links. It is linked
//! whole so its symbols are defined before the linker reaches rustc's own `-lgcc_s`, which
//! `--as-needed` then drops. Panics unwind as before (a unit test in `main.rs` checks).
#![forbid(unsafe_code)]

fn main() {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let static_crt = var("CARGO_CFG_TARGET_FEATURE")
        .split(',')
        .any(|f| f == "crt-static");
    // A `+crt-static` build links `libgcc_eh` itself; other targets have no `libgcc_s`.
    if var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu" && !static_crt
    {
        println!("cargo:rustc-link-lib=static:+whole-archive,-bundle=gcc_eh");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
