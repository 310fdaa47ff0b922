//! The JSON Schema of `pipeline.yaml` (and of agent front matter), generated from the same key
//! tables that decide which keys are accepted, so the two cannot drift apart.

use serde_json::{Map, Value, json};

use crate::keys::{self, Shape, Table};

/// The schema as pretty JSON with a trailing newline: the content of `docs/pipeline.schema.json`.
pub fn pipeline_schema_json() -> String {
    let mut text = serde_json::to_string_pretty(&pipeline_schema()).unwrap_or_default();
    text.push('\n');
    text
}

pub fn pipeline_schema() -> Value {
    let mut defs = Map::new();
    for table in [
        &keys::LLM,
        &keys::ISOLATION,
        &keys::SECRET,
        &keys::STEP,
        &keys::NETWORK,
        &keys::GOTO,
        &keys::VERDICTS,
        &keys::ACTION_PARAMS,
        &keys::PULL_REQUEST,
        &keys::REPORT,
        &keys::AGENT,
        &keys::MCP,
        &keys::MCP_SECRET,
        &keys::OUTCOME,
        &keys::PHASE,
        &keys::VERIFY,
    ] {
        defs.insert(table.name.to_owned(), object(table));
    }
    defs.insert(
        "Network".to_owned(),
        json!({
            "description": "`none` (loopback only), `open` (every public name and port; validate warns) or an allowlist.",
            "oneOf": [
                {"enum": ["none", "open"]},
                {"$ref": "#/$defs/Allowlist"}
            ]
        }),
    );
    defs.insert(
        "Route".to_owned(),
        json!({
            "description": "A step name, `success`, `failure` or `{goto: NAME, retry: BOOL}`.",
            "oneOf": [
                {"type": "string"},
                {"$ref": "#/$defs/Goto"}
            ]
        }),
    );
    defs.insert(
        "Command".to_owned(),
        json!({
            "description": "A string runs under `/bin/sh -c`; a list runs without a shell.",
            "oneOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string"}, "minItems": 1}
            ]
        }),
    );
    let mut root = object(&keys::PIPELINE);
    if let Value::Object(map) = &mut root {
        let mut head = Map::new();
        head.insert(
            "$schema".to_owned(),
            json!("https://json-schema.org/draft/2020-12/schema"),
        );
        head.insert(
            "$id".to_owned(),
            json!("https://example.com/cordon/pipeline.schema.json"),
        );
        head.insert("title".to_owned(), json!("cordon pipeline.yaml"));
        head.extend(std::mem::take(map));
        head.insert("$defs".to_owned(), Value::Object(defs));
        *map = head;
    }
    root
}

fn object(table: &Table) -> Value {
    let mut properties = Map::new();
    for key in table.keys {
        let mut schema = shape(&key.shape);
        if let Value::Object(map) = &mut schema {
            map.insert("description".to_owned(), json!(key.doc));
        }
        properties.insert(key.name.to_owned(), schema);
    }
    json!({
        "description": table.doc,
        "type": "object",
        "properties": properties,
        "required": table.required,
        "additionalProperties": false
    })
}

/// Step, agent and secret names.
const NAME_PATTERN: &str = "^[a-z0-9][a-z0-9_-]{0,62}$";

fn shape(shape: &Shape) -> Value {
    match shape {
        Shape::String => json!({"type": "string", "minLength": 1}),
        Shape::Name => json!({"type": "string", "pattern": NAME_PATTERN}),
        Shape::EnvName => json!({"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}),
        Shape::EnumList(values) => {
            json!({"type": "array", "uniqueItems": true, "items": {"enum": values}})
        }
        Shape::ToolList(values) => json!({
            "type": "array",
            "uniqueItems": true,
            "items": {"anyOf": [
                {"enum": values},
                {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,32}__(\\*|[A-Za-z0-9_-]+)$"}
            ]}
        }),
        Shape::Positive => json!({"type": "integer", "minimum": 1}),
        Shape::Count => json!({"type": "integer", "minimum": 0}),
        Shape::Phase(table) => json!({
            "oneOf": [
                {"type": "string", "pattern": NAME_PATTERN},
                {"$ref": format!("#/$defs/{}", table.name)}
            ]
        }),
        Shape::Commands(table) => json!({
            "type": "array",
            "items": {"oneOf": [
                {"$ref": "#/$defs/Command"},
                {"$ref": format!("#/$defs/{}", table.name)}
            ]}
        }),
        Shape::Bool => json!({"type": "boolean"}),
        Shape::Number {
            minimum,
            maximum: None,
        } => json!({"type": "number", "minimum": minimum}),
        Shape::Number {
            minimum,
            maximum: Some(maximum),
        } => {
            json!({"type": "number", "minimum": minimum, "maximum": maximum})
        }
        Shape::Size => json!({
            "oneOf": [
                {"type": "string", "pattern": "^[0-9]+ ?([KMGTPkmgtp]i?[Bb]?)?$"},
                {"type": "integer", "minimum": 1}
            ]
        }),
        Shape::Duration => json!({
            "oneOf": [
                {"type": "string", "pattern": "^[0-9]+[smh]?$"},
                {"type": "integer", "minimum": 1}
            ]
        }),
        Shape::Enum(values) => json!({"enum": values}),
        Shape::StringList => json!({"type": "array", "items": {"type": "string", "minLength": 1}}),
        Shape::StringMap => {
            json!({"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}})
        }
        Shape::SecretMap => json!({
            "type": "object",
            "additionalProperties": {"oneOf": [
                {"type": ["string", "number", "boolean"]},
                {"$ref": "#/$defs/McpSecret"}
            ]}
        }),
        Shape::Object(table) => json!({"$ref": format!("#/$defs/{}", table.name)}),
        Shape::MapOf(table) => {
            json!({"type": "object", "additionalProperties": {"$ref": format!("#/$defs/{}", table.name)}})
        }
        Shape::List(table) => {
            json!({"type": "array", "minItems": 1, "items": {"$ref": format!("#/$defs/{}", table.name)}})
        }
        Shape::Network => json!({"$ref": "#/$defs/Network"}),
        Shape::Route => json!({"$ref": "#/$defs/Route"}),
        Shape::Command => json!({"$ref": "#/$defs/Command"}),
    }
}
