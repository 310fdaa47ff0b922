//! The page assets, compiled into the binary: hand-written HTML/CSS/JS, no framework, no CDN,
//! so the UI works offline and cannot load anything from elsewhere.

use axum::extract::Path;
use axum::http::header;
use axum::response::IntoResponse;

use crate::WebError;

const ASSETS: &[(&str, &str, &str)] = &[
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("assets/style.css"),
    ),
    (
        "run.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/run.js"),
    ),
    (
        "runs.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/runs.js"),
    ),
];

pub(crate) async fn asset(Path(name): Path<String>) -> Result<impl IntoResponse, WebError> {
    let (_, kind, body) = ASSETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .ok_or_else(|| WebError::NotFound(format!("/assets/{name}")))?;
    Ok(([(header::CONTENT_TYPE, *kind)], *body))
}
