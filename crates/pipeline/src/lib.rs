//! `pipeline.yaml`, `*.agent.md` and the operator policy file: raw serde mirror → validated model.
#![forbid(unsafe_code)]
