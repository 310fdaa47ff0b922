//! In-memory pipelines: a pipeline text plus agent files, checked through `load`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cordon_pipeline::{Diagnostics, Loaded};

/// An agent file for `name` whose front matter is valid.
pub fn agent(name: &str) -> (String, String) {
    (
        format!("agents/{name}.agent.md"),
        format!("---\nname: {name}\n---\nYou are {name}.\n"),
    )
}

/// Checks `yaml` as `pipeline.yaml` with the given extra files (paths relative to it).
pub fn load(yaml: &str, files: &[(String, String)]) -> Result<Loaded, Diagnostics> {
    let mut map: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|(path, text)| (PathBuf::from(path), text.clone()))
        .collect();
    map.insert(PathBuf::from("pipeline.yaml"), yaml.to_owned());
    cordon_pipeline::load(Path::new("pipeline.yaml"), &map)
}

/// Every diagnostic as `file:line:col: message` lines, or `valid` plus the warnings.
pub fn report(yaml: &str, files: &[(String, String)]) -> String {
    match load(yaml, files) {
        Ok(loaded) if loaded.warnings.is_empty() => "valid".to_owned(),
        Ok(loaded) => format!("valid\n{}", loaded.warnings),
        Err(diagnostics) => diagnostics.to_string(),
    }
}
