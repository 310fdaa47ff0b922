//! Fuzz target: the commit action's staging of path names (`cordon-git`). The input is split on
//! `0xff` into names a work tree could hold — newlines, tabs, escape sequences, `..`-like and
//! `.git`-like components, very long names. Properties checked on every input: no panic; every
//! name the workspace view accepts goes into the tree and comes back out byte for byte, and
//! nothing else does (no name injects another entry); the quoted form a patch or status line
//! shows holds no control character.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let names: Vec<&[u8]> = data.split(|&b| b == 0xff).take(256).collect();
    assert!(cordon_git::fuzz_stage(&names));
});
