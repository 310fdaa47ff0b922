//! Fuzz target: the pipeline YAML front end (placeholder).
