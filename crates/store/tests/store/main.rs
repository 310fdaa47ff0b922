//! The store against real SQLite files in temporary state directories.

mod damage;
mod events;
mod locks;

use cordon_protocol::RunId;
use cordon_protocol::event::Timestamp;
use cordon_store::{RunRow, StateDir, Store};

/// A fresh state directory and its open store.
pub fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StateDir::new(dir.path().join("state"))).expect("open");
    (dir, store)
}

/// A run row for `id`.
pub fn run(store: &Store, id: u128) -> RunId {
    let id = RunId::from_u128(id);
    store
        .create_run(&RunRow {
            id,
            pipeline: "p".to_owned(),
            pipeline_file: "/w/pipeline.yaml".into(),
            workspace: "/w".into(),
            started: Timestamp(u64::try_from(id.to_u128() % 1000).unwrap_or(0)),
            snapshot: None,
        })
        .expect("create run");
    id
}
