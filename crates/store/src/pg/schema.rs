//! The PostgreSQL schema and its migrations, numbered in `cordon_schema`.
//!
//! As with SQLite, a migration only ever adds, and runs in one transaction with its version bump
//! (PostgreSQL's DDL is transactional), so a crash mid-migration leaves the previous version. The
//! transaction first takes an advisory lock, so two machines opening a fresh store at once take
//! turns; a store with a higher version than this build knows is refused, never downgraded.

use super::session::{Failure, Session};
use super::target::Target;
use crate::StoreError;

/// The advisory lock key migrations hold ("cordon" in ASCII).
const MIGRATION_LOCK: i64 = 0x636f_7264_6f6e;

/// Each entry moves the schema from version `index` to `index + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: runs, append-only events with contiguous per-run sequences, blobs, setup stamps, leases,
    //    and the append function that fences stale lease holders.
    r#"
    CREATE TABLE runs (
        id text PRIMARY KEY,
        pipeline text NOT NULL,
        pipeline_file text NOT NULL,
        workspace text NOT NULL,
        started bigint NOT NULL,
        snapshot bigint,
        event_schema integer NOT NULL
    );
    CREATE TABLE events (
        run text NOT NULL REFERENCES runs(id),
        seq bigint NOT NULL,
        ts bigint NOT NULL,
        type text NOT NULL,
        step text,
        data bytea NOT NULL,
        PRIMARY KEY (run, seq)
    );
    CREATE FUNCTION cordon_events_contiguous() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.seq IS DISTINCT FROM
            (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE run = NEW.run) THEN
            RAISE EXCEPTION 'event sequence must be contiguous';
        END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER events_contiguous BEFORE INSERT ON events
        FOR EACH ROW EXECUTE FUNCTION cordon_events_contiguous();
    CREATE FUNCTION cordon_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'events are append-only';
    END $$;
    CREATE TRIGGER events_no_change BEFORE UPDATE OR DELETE ON events
        FOR EACH ROW EXECUTE FUNCTION cordon_append_only();
    CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
        FOR EACH STATEMENT EXECUTE FUNCTION cordon_append_only();
    CREATE TABLE blobs (
        id bigserial PRIMARY KEY,
        run text NOT NULL,
        bytes bytea NOT NULL
    );
    CREATE TABLE setup_stamps (
        stamp text PRIMARY KEY,
        created bigint NOT NULL
    );
    -- A run's lease: who holds it, until when (the database's clock), and its generation, which
    -- only ever grows (a released lease keeps its row, expired), so a stale holder's number
    -- never comes back.
    CREATE TABLE leases (
        run text PRIMARY KEY,
        holder text NOT NULL,
        generation bigint NOT NULL,
        expires timestamptz NOT NULL
    );
    -- The one way cordon appends. `generation` is the caller's lease on the run, NULL when it
    -- holds none (then a live lease of another refuses it: CD001); a generation that is no longer
    -- the run's is refused with the current one as the message (CD002). `durable` false commits
    -- without waiting for the WAL flush (SQLite's `NORMAL`): the WAL is flushed in order, so the
    -- next durable append makes every earlier one durable too.
    CREATE FUNCTION cordon_append(p_run text, p_generation bigint, p_type text, p_step text,
                                  p_data bytea, p_durable boolean, OUT seq bigint, OUT ts bigint)
    LANGUAGE plpgsql AS $$
    DECLARE
        lease leases%ROWTYPE;
    BEGIN
        IF NOT p_durable THEN
            PERFORM set_config('synchronous_commit', 'off', true);
        END IF;
        PERFORM pg_advisory_xact_lock(hashtextextended(p_run, 0));
        SELECT * INTO lease FROM leases WHERE run = p_run;
        IF p_generation IS NULL THEN
            IF FOUND AND lease.expires > now() THEN
                RAISE EXCEPTION USING ERRCODE = 'CD001', MESSAGE = lease.holder;
            END IF;
        ELSIF NOT FOUND OR lease.generation <> p_generation THEN
            RAISE EXCEPTION USING ERRCODE = 'CD002',
                MESSAGE = COALESCE(lease.generation, 0)::text;
        END IF;
        SELECT COALESCE(MAX(e.seq), 0) + 1 INTO seq FROM events e WHERE e.run = p_run;
        ts := (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint;
        INSERT INTO events (run, seq, ts, type, step, data)
            VALUES (p_run, seq, ts, p_type, p_step, p_data);
    END $$;
    "#,
    // 2: batches (`cordon batch`), as in the SQLite store.
    r"
    CREATE TABLE batches (
        id text PRIMARY KEY,
        created bigint NOT NULL,
        pipeline text NOT NULL,
        pipeline_file text NOT NULL,
        tooling bytea NOT NULL,
        backend text NOT NULL
    );
    CREATE TABLE batch_tasks (
        batch text NOT NULL REFERENCES batches(id),
        idx integer NOT NULL,
        id text NOT NULL,
        repo text NOT NULL,
        ref text,
        prompt text,
        vars text NOT NULL,
        run text UNIQUE,
        PRIMARY KEY (batch, idx),
        UNIQUE (batch, id)
    );
    ",
    // 3: workspace records, as in the SQLite store.
    r"
    CREATE TABLE workspace_trees (
        run text NOT NULL REFERENCES runs(id),
        seq bigint NOT NULL,
        blob bigint NOT NULL REFERENCES blobs(id),
        PRIMARY KEY (run, seq)
    );
    ",
];

/// The version this build writes.
pub(crate) fn latest() -> i64 {
    i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX)
}

/// Brings the store to [`latest`], refusing a newer one.
pub(crate) fn migrate(session: &mut Session, target: &Target) -> Result<(), StoreError> {
    let fail = |err: Failure| target.error(&err);
    // One transaction on this session; an error or a missed deadline ends the session (it is
    // dropped), and with it the transaction, so nothing half-migrated is committed.
    let tx = session;
    tx.batch_execute(&format!(
        "BEGIN; SELECT pg_advisory_xact_lock({MIGRATION_LOCK}); \
         CREATE TABLE IF NOT EXISTS cordon_schema (version bigint NOT NULL)"
    ))
    .map_err(fail)?;
    let found: Option<i64> = tx
        .query_opt("SELECT version FROM cordon_schema", &[])
        .map_err(fail)?
        .map(|row| row.get(0));
    let current = match found {
        Some(version) => version,
        None => {
            tx.execute("INSERT INTO cordon_schema (version) VALUES (0)", &[])
                .map_err(fail)?;
            0
        }
    };
    if current > latest() {
        tx.batch_execute("ROLLBACK").map_err(fail)?;
        return Err(StoreError::StoreTooNew {
            store: target.shown.clone(),
            found: current,
            known: latest(),
        });
    }
    for sql in MIGRATIONS
        .iter()
        .skip(usize::try_from(current).unwrap_or(0))
    {
        tx.batch_execute(sql).map_err(fail)?;
    }
    tx.execute("UPDATE cordon_schema SET version = $1", &[&latest()])
        .map_err(fail)?;
    tx.batch_execute("COMMIT").map_err(fail)
}
