//! Fuzz target: arbitrary bytes through the pipeline YAML front end and validation (and the agent
//! file front matter, with the same bytes as `agents/dev.agent.md`). Any input may be rejected;
//! none may panic.
#![no_main]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut files = BTreeMap::new();
    files.insert(PathBuf::from("agents/dev.agent.md"), text.to_owned());
    let result = cordon_pipeline::load_str("pipeline.yaml", text, Path::new(""), &files);
    if let Err(diagnostics) = result {
        // Rendering must not panic either.
        let _ = diagnostics.to_string();
    }
    let _ = cordon_pipeline::policy::parse("policy.toml", text);
});
