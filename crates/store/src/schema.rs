//! The database schema and its migrations, numbered by SQLite's `user_version`.
//!
//! A migration only ever adds (tables, columns, triggers); it runs in one transaction with the
//! version bump, so a crash mid-migration leaves the previous version intact. A database with a
//! higher version than this build knows is refused, never downgraded.

use rusqlite::Connection;

/// Each entry moves the schema from version `index` to `index + 1`.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: runs, append-only events with contiguous per-run sequences, blobs, setup stamps.
    r"
    CREATE TABLE runs (
        id TEXT PRIMARY KEY NOT NULL,
        pipeline TEXT NOT NULL,
        pipeline_file TEXT NOT NULL,
        workspace TEXT NOT NULL,
        started INTEGER NOT NULL,
        snapshot INTEGER,
        event_schema INTEGER NOT NULL
    ) STRICT;
    CREATE TABLE events (
        run TEXT NOT NULL REFERENCES runs(id),
        seq INTEGER NOT NULL,
        ts INTEGER NOT NULL,
        type TEXT NOT NULL,
        step TEXT,
        data TEXT NOT NULL,
        PRIMARY KEY (run, seq)
    ) STRICT, WITHOUT ROWID;
    CREATE TRIGGER events_contiguous BEFORE INSERT ON events
    WHEN NEW.seq IS NOT (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE run = NEW.run)
    BEGIN SELECT RAISE(ABORT, 'event sequence must be contiguous'); END;
    CREATE TRIGGER events_no_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
    CREATE TRIGGER events_no_delete BEFORE DELETE ON events
    BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
    CREATE TABLE blobs (
        id INTEGER PRIMARY KEY,
        run TEXT NOT NULL,
        bytes BLOB NOT NULL
    ) STRICT;
    CREATE TABLE setup_stamps (
        stamp TEXT PRIMARY KEY NOT NULL,
        created INTEGER NOT NULL
    ) STRICT;
    ",
    // 2: batches (`cordon batch`): the pipeline's tooling taken once, and each task with the run
    //    it became (set once a worker begins it; a run belongs to at most one task).
    r"
    CREATE TABLE batches (
        id TEXT PRIMARY KEY NOT NULL,
        created INTEGER NOT NULL,
        pipeline TEXT NOT NULL,
        pipeline_file TEXT NOT NULL,
        tooling BLOB NOT NULL,
        backend TEXT NOT NULL
    ) STRICT;
    CREATE TABLE batch_tasks (
        batch TEXT NOT NULL REFERENCES batches(id),
        idx INTEGER NOT NULL,
        id TEXT NOT NULL,
        repo TEXT NOT NULL,
        ref TEXT,
        prompt TEXT,
        vars TEXT NOT NULL,
        run TEXT UNIQUE,
        PRIMARY KEY (batch, idx),
        UNIQUE (batch, id)
    ) STRICT;
    ",
    // 3: a run's workspace as recorded at a step's end (the blob holding it), keyed by the seq
    //    of that `step.finished`, so a resume on another machine can rebuild it (DESIGN §16).
    r"
    CREATE TABLE workspace_trees (
        run TEXT NOT NULL REFERENCES runs(id),
        seq INTEGER NOT NULL,
        blob INTEGER NOT NULL REFERENCES blobs(id),
        PRIMARY KEY (run, seq)
    ) STRICT, WITHOUT ROWID;
    ",
];

/// The version this build writes.
pub(crate) fn latest() -> i64 {
    i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX)
}

/// Applies every migration after `current`, each with its version bump in one transaction.
pub(crate) fn migrate(conn: &mut Connection, current: i64) -> rusqlite::Result<()> {
    for (index, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(current).unwrap_or(0))
    {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", index + 1)?;
        tx.commit()?;
    }
    Ok(())
}
