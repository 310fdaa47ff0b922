//! `GET /api/runs/<id>/stream`: the run's events as server-sent events, `id:` = sequence
//! number, so a browser that reconnects sends `Last-Event-ID` and gets exactly what it missed.
//!
//! Each stream polls the store (the run may be written by another process), in batches, and
//! ends itself once the run has finished and nobody holds it. Besides the events (default SSE
//! type, data = the `--json` line) it sends `status` (whether the run is held, and its status)
//! whenever that changes, and `end` before closing.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as Sse, KeepAlive};
use cordon_protocol::{Event, Record, RunId};
use cordon_store::EventFilter;
use futures_util::Stream;

use crate::{AppState, WebError, query};

/// Events read from the store per poll.
const BATCH: usize = 500;

/// Streams served at once; each polls the store, so their number is bounded.
pub const MAX_STREAMS: usize = 64;

struct Cursor {
    _open: crate::state::StreamGuard,
    state: AppState,
    run: RunId,
    after: u64,
    pending: VecDeque<Record>,
    held: Option<bool>,
    finished: bool,
    done: bool,
}

pub(crate) async fn stream(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<axum::response::Sse<impl Stream<Item = Result<Sse, Infallible>>>, WebError> {
    if state.open_streams() >= MAX_STREAMS {
        return Err(WebError::TooManyStreams(MAX_STREAMS));
    }
    let row = state.resolve(id).await?;
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let from_query = query::pairs(raw.as_deref())
        .into_iter()
        .find(|(k, _)| k == "after")
        .map(|(_, v)| v);
    let after = match resume.or(from_query) {
        Some(text) if !text.trim().is_empty() => {
            text.trim().parse().map_err(|_| WebError::BadQuery {
                name: "Last-Event-ID".to_owned(),
                detail: format!("`{text}` is not a sequence number"),
            })?
        }
        _ => 0,
    };
    let run = row.id;
    // Whether the run had finished before `after`: otherwise a client resuming past the last
    // event of a finished run would wait for nothing.
    let finished_before = state
        .read(move |r| {
            let filter = EventFilter {
                types: vec!["run".to_owned()],
                ..EventFilter::default()
            };
            let last = r
                .events(run, &filter)?
                .into_iter()
                .rev()
                .find(|e| e.seq <= after);
            Ok(last.is_some_and(|e| matches!(e.event, Event::RunFinished { .. })))
        })
        .await?;
    let cursor = Cursor {
        _open: state.stream_guard(),
        state,
        run,
        after,
        pending: VecDeque::new(),
        held: None,
        finished: finished_before,
        done: false,
    };
    let events = futures_util::stream::unfold(cursor, next);
    Ok(axum::response::Sse::new(events).keep_alive(KeepAlive::default()))
}

async fn next(mut cursor: Cursor) -> Option<(Result<Sse, Infallible>, Cursor)> {
    loop {
        if cursor.done {
            return None;
        }
        if let Some(record) = cursor.pending.pop_front() {
            match &record.event {
                Event::RunFinished { .. } => cursor.finished = true,
                Event::RunResumed { .. } => cursor.finished = false,
                _ => {}
            }
            let event = Sse::default()
                .id(record.seq.to_string())
                .data(record.to_json_line());
            return Some((Ok(event), cursor));
        }
        let (run, after) = (cursor.run, cursor.after);
        let shared = cursor.state.clone();
        let read = cursor
            .state
            .read(move |r| {
                let filter = EventFilter {
                    after,
                    limit: Some(BATCH),
                    ..EventFilter::default()
                };
                Ok((r.events(run, &filter)?, shared.held_recently(r, run)))
            })
            .await;
        let Ok((records, held)) = read else {
            // The store went away (moved, damaged): end the stream; the page says so.
            cursor.done = true;
            return Some((
                Ok(Sse::default().event("end").data("{\"reason\":\"store\"}")),
                cursor,
            ));
        };
        // A closing server (its process exits next) no longer counts as holding the run.
        let closing = cursor.state.is_closing();
        let held = held && !closing;
        let got_new = !records.is_empty();
        if let Some(last) = records.last() {
            cursor.after = last.seq;
        }
        cursor.pending.extend(records);
        if got_new {
            continue;
        }
        if cursor.held != Some(held) {
            cursor.held = Some(held);
            let status = match (cursor.finished, held) {
                (_, true) => "running",
                (true, false) => "finished",
                (false, false) => "interrupted",
            };
            let data = format!(
                "{{\"held\":{held},\"status\":\"{status}\",\"last_seq\":{}}}",
                cursor.after
            );
            return Some((Ok(Sse::default().event("status").data(data)), cursor));
        }
        if closing {
            cursor.done = true;
            return Some((
                Ok(Sse::default().event("end").data("{\"reason\":\"closing\"}")),
                cursor,
            ));
        }
        if cursor.finished && !held {
            cursor.done = true;
            return Some((
                Ok(Sse::default()
                    .event("end")
                    .data("{\"reason\":\"finished\"}")),
                cursor,
            ));
        }
        tokio::time::sleep(cursor.state.poll).await;
    }
}
