//! `docs/pipeline.schema.json` is generated from the key tables; this keeps the file in sync.
//! Run with `CORDON_UPDATE_SCHEMA=1` to rewrite it.

use std::path::PathBuf;

#[test]
fn schema_file_matches_the_generated_schema() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/pipeline.schema.json");
    let generated = cordon_pipeline::schema::pipeline_schema_json();
    if std::env::var_os("CORDON_UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &generated).expect("write docs/pipeline.schema.json");
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/pipeline.schema.json is out of date; run `CORDON_UPDATE_SCHEMA=1 cargo test -p cordon-pipeline --test pipeline schema` and commit it"
    );
}

#[test]
fn schema_lists_every_step_key() {
    let schema = cordon_pipeline::schema::pipeline_schema();
    let step = &schema["$defs"]["Step"]["properties"];
    for key in [
        "name",
        "agent",
        "command",
        "action",
        "params",
        "prompt",
        "produces",
        "artifact",
        "verdicts",
        "max_iterations",
        "timeout",
        "env",
        "secrets",
        "setup",
        "setup_network",
        "network",
        "model_lane",
        "on_pass",
        "on_fail",
    ] {
        assert!(
            step.get(key).is_some(),
            "step key {key} missing from the schema"
        );
    }
}

#[test]
fn schema_enums_match_the_model() {
    let schema = cordon_pipeline::schema::pipeline_schema();
    let names = |value: &serde_json::Value| -> Vec<String> {
        value
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let defs = &schema["$defs"];
    let tools: Vec<&str> = cordon_pipeline::Tool::ALL
        .iter()
        .map(|t| t.as_str())
        .collect();
    assert_eq!(
        names(&defs["AgentFrontMatter"]["properties"]["tools"]["items"]["anyOf"][0]["enum"]),
        tools
    );
    assert_eq!(
        names(&defs["Llm"]["properties"]["provider"]["enum"]),
        cordon_pipeline::Llm::PROVIDERS
    );
    assert_eq!(
        names(&defs["Step"]["properties"]["action"]["enum"]),
        cordon_pipeline::Action::NAMES
    );
    assert_eq!(
        names(&defs["Secret"]["properties"]["from"]["enum"]),
        cordon_pipeline::Secret::SOURCES
    );
}

#[test]
fn reference_documents_every_key() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/pipeline-reference.md");
    let reference = std::fs::read_to_string(&path).expect("docs/pipeline-reference.md");
    let schema = cordon_pipeline::schema::pipeline_schema();
    let mut tables = vec![&schema["properties"]];
    if let Some(defs) = schema["$defs"].as_object() {
        tables.extend(defs.values().map(|d| &d["properties"]));
    }
    for table in tables {
        for key in table.as_object().into_iter().flat_map(|t| t.keys()) {
            assert!(
                reference.contains(&format!("`{key}`")),
                "docs/pipeline-reference.md does not mention `{key}`"
            );
        }
    }
}
