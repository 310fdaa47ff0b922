//! The store against real SQLite files in temporary state directories and, built with
//! `scale-out`, against a real PostgreSQL server (`$CORDON_TEST_POSTGRES`, each test in a fresh
//! schema): the same tests for both backends.

mod batches;
mod damage;
mod events;
mod locks;
#[cfg(feature = "scale-out")]
mod postgres;

use cordon_protocol::RunId;
use cordon_protocol::event::Timestamp;
use cordon_store::{RunRow, StateDir, Store};

/// A fresh state directory and its open SQLite store.
pub fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StateDir::new(dir.path().join("state"))).expect("open");
    (dir, store)
}

/// One backend's fresh store for a test.
pub struct Fixture {
    pub backend: &'static str,
    pub dir: tempfile::TempDir,
    /// The state directory, naming the shared store when there is one.
    pub state: StateDir,
    pub store: Store,
    #[cfg(feature = "scale-out")]
    pub schema: Option<postgres::Schema>,
}

impl Fixture {
    /// Runs `sql` on the backend's database directly, as someone bypassing cordon would.
    pub fn sql(&self, sql: &str) -> Result<u64, String> {
        #[cfg(feature = "scale-out")]
        if let Some(schema) = &self.schema {
            return schema.sql(sql);
        }
        let conn = rusqlite::Connection::open(self.state.path().join("cordon.db"))
            .map_err(|e| e.to_string())?;
        conn.execute(sql, [])
            .map(|n| n as u64)
            .map_err(|e| e.to_string())
    }
}

/// Runs `test` once per backend this build has: SQLite, then PostgreSQL with `scale-out`.
pub fn each_store(test: impl Fn(&Fixture)) {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = StateDir::new(dir.path().join("state"));
    let store = Store::open(&state).expect("open sqlite");
    let fixture = Fixture {
        backend: "sqlite",
        dir,
        state,
        store,
        #[cfg(feature = "scale-out")]
        schema: None,
    };
    test(&fixture);
    drop(fixture);
    #[cfg(feature = "scale-out")]
    if let Some(fixture) = postgres::fixture() {
        test(&fixture);
    }
}

/// The sequence numbers of `run`'s stored events, in order.
pub fn seqs(store: &Store, run: RunId) -> Vec<u64> {
    store
        .events(run)
        .expect("events")
        .iter()
        .map(|r| r.seq)
        .collect()
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
