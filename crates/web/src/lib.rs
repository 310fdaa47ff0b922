//! The run page: a read-only web UI over the state directory — the runs list, each run's graph,
//! consoles, event log and egress table, a JSON API and a live event stream (DESIGN §8,
//! Appendix A). [`app`] builds the whole router, so tests drive it without a server.
//!
//! Invariants: it never appends an event (its store connection is read-only); every route,
//! pages and assets included, checks the Host header and the per-process token first
//! ([`guard`]); assets are compiled in; it serves only on loopback ([`serve::listen`]).
#![forbid(unsafe_code)]

mod api;
mod assets;
mod console;
mod error;
mod graph;
mod guard;
mod pages;
mod query;
pub mod serve;
mod state;
mod stream;
mod token;
pub mod view;

use axum::Router;
use axum::routing::get;

pub use api::{MAX_EVENTS, RunSummary};
pub use console::Console;
pub use error::WebError;
pub use graph::{Edge, Graph, GraphStep, Pricing};
pub use state::{AppState, DerivedGraphs, GraphSource};
pub use stream::MAX_STREAMS;
pub use token::Token;
pub use view::{ResourceSample, RunStatus, RunView, StepStatus, StepView};

/// The whole UI: pages, assets, the JSON API and the event stream, behind the Host and token
/// gate.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/", get(pages::runs))
        .route("/runs/{id}", get(pages::run))
        .route("/assets/{name}", get(assets::asset))
        .route("/api/runs", get(api::runs))
        .route("/api/runs/{id}", get(api::run))
        .route("/api/runs/{id}/events", get(api::events))
        .route("/api/runs/{id}/egress", get(api::egress))
        .route("/api/runs/{id}/diffs/{blob}", get(api::diff))
        .route("/api/runs/{id}/stream", get(stream::stream))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::gate,
        ))
        .with_state(state)
}

async fn not_found(uri: axum::http::Uri) -> WebError {
    WebError::NotFound(uri.path().to_owned())
}
