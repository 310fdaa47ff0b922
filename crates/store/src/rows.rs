//! Reading the `runs` and `events` tables into `RunRow`s and `Record`s, shared by the writer
//! (`Store`) and the read-only `Reader` so both decode a row the same way.

use std::path::{Path, PathBuf};

use cordon_protocol::event::{BlobId, Timestamp};
use cordon_protocol::{Event, Record, RunId, StepName};
use rusqlite::{Connection, OptionalExtension, Params};

use crate::StoreError;
use crate::store::RunRow;

/// How each handle turns a SQLite error into a `StoreError` (the writer also spots corruption).
pub(crate) type Fail<'a> = &'a dyn Fn(rusqlite::Error) -> StoreError;

const SELECT_RUNS: &str =
    "SELECT id, pipeline, pipeline_file, workspace, started, snapshot FROM runs";

/// One run by id.
pub(crate) fn run(
    conn: &Connection,
    db: &Path,
    fail: Fail<'_>,
    id: RunId,
) -> Result<Option<RunRow>, StoreError> {
    conn.prepare_cached(&format!("{SELECT_RUNS} WHERE id = ?1"))
        .and_then(|mut stmt| stmt.query_row([id.to_string()], row_to_run).optional())
        .map_err(fail)?
        .transpose()
        .map_err(|detail| corrupt(db, detail))
}

/// Every run, oldest first.
pub(crate) fn runs(
    conn: &Connection,
    db: &Path,
    fail: Fail<'_>,
) -> Result<Vec<RunRow>, StoreError> {
    let mut stmt = conn
        .prepare_cached(&format!("{SELECT_RUNS} ORDER BY started, id"))
        .map_err(fail)?;
    let rows = stmt.query_map([], row_to_run).map_err(fail)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row.map_err(fail)?.map_err(|detail| corrupt(db, detail))?);
    }
    Ok(out)
}

/// The run among `runs` whose id is `text` or starts with it (case-insensitive); exactly one
/// must match.
pub(crate) fn find_run(runs: Vec<RunRow>, text: &str) -> Result<RunId, StoreError> {
    let prefix = text.to_ascii_lowercase();
    let matches: Vec<RunId> = runs
        .into_iter()
        .map(|r| r.id)
        .filter(|id| id.to_string().starts_with(&prefix))
        .collect();
    match matches.as_slice() {
        [one] if !prefix.is_empty() => Ok(*one),
        [] | [_] => Err(StoreError::UnknownRun(text.to_owned())),
        many => Err(StoreError::AmbiguousRun {
            prefix: text.to_owned(),
            count: many.len(),
        }),
    }
}

/// The events `sql` selects (columns `seq, ts, type, step, data`, in that order) for `run`.
pub(crate) fn events(
    conn: &Connection,
    fail: Fail<'_>,
    run: RunId,
    sql: &str,
    params: impl Params,
) -> Result<Vec<Record>, StoreError> {
    let mut stmt = conn.prepare_cached(sql).map_err(fail)?;
    let rows = stmt
        .query_map(params, |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, String>(4)?,
            ))
        })
        .map_err(fail)?;
    let mut out = Vec::new();
    for row in rows {
        let (seq, ts, kind, step, data) = row.map_err(fail)?;
        let seq = u64::try_from(seq).unwrap_or(0);
        out.push(record(run, seq, ts, &kind, step, data.as_bytes())?);
    }
    Ok(out)
}

/// One stored event as a `Record`, decoded the same way whichever backend stored it.
pub(crate) fn record(
    run: RunId,
    seq: u64,
    ts: i64,
    kind: &str,
    step: Option<String>,
    data: &[u8],
) -> Result<Record, StoreError> {
    let bad = |detail: String| StoreError::BadEvent {
        run: run.to_string(),
        seq,
        detail,
    };
    let data = std::str::from_utf8(data).map_err(|e| bad(format!("`{kind}`: {e}")))?;
    let event = Event::from_parts(kind, data).map_err(|e| bad(format!("`{kind}`: {e}")))?;
    let step = step
        .map(|s| StepName::parse(&s))
        .transpose()
        .map_err(|e| bad(e.to_string()))?;
    Ok(Record {
        run,
        seq,
        ts: Timestamp(u64::try_from(ts).unwrap_or(0)),
        step,
        event,
    })
}

#[cfg(feature = "scale-out")]
/// Text from the store for a message: control characters escaped, at most 200 characters.
pub(crate) fn printable(text: &str) -> String {
    let head: String = text.chars().take(200).collect();
    let mut out = cordon_protocol::text::escape_line(&head).into_owned();
    if text.chars().nth(200).is_some() {
        out.push('…');
    }
    out
}

fn corrupt(db: &Path, detail: String) -> StoreError {
    StoreError::Corrupt {
        path: db.to_path_buf(),
        detail,
    }
}

fn row_to_run(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<RunRow, String>> {
    let id: String = r.get(0)?;
    let snapshot: Option<i64> = r.get(5)?;
    let started: i64 = r.get(4)?;
    let (pipeline, file, workspace): (String, String, String) = (r.get(1)?, r.get(2)?, r.get(3)?);
    Ok(RunId::parse(&id)
        .map_err(|e| e.to_string())
        .map(|id| RunRow {
            id,
            pipeline,
            pipeline_file: PathBuf::from(file),
            workspace: PathBuf::from(workspace),
            started: Timestamp(u64::try_from(started).unwrap_or(0)),
            snapshot: snapshot.and_then(|b| u64::try_from(b).ok()).map(BlobId),
        }))
}
