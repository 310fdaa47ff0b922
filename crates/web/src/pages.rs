//! The two HTML pages. Each is a small shell around a JSON snapshot embedded in the page, so
//! the page holds the current state the moment its script runs (no request waits), then the
//! script follows the run over the event stream.

use axum::extract::{Path, State};
use axum::response::Html;
use cordon_protocol::Record;
use cordon_store::EventFilter;

use crate::api::{RunSummary, records_json};
use crate::{AppState, WebError};

/// Events embedded in the run page's log; earlier ones are fetched on demand.
pub const LOG_EVENTS: usize = 1000;

pub(crate) async fn runs(State(state): State<AppState>) -> Result<Html<String>, WebError> {
    let views = state.summaries().await?;
    let list: Vec<RunSummary> = views.iter().rev().map(RunSummary::of).collect();
    let snapshot = serde_json::to_string(&list).unwrap_or_else(|_| "[]".to_owned());
    Ok(Html(shell("runs — cordon", "runs", "", &snapshot)))
}

pub(crate) async fn run(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Html<String>, WebError> {
    let row = state.resolve(id).await?;
    let run = row.id;
    let view = state.view(row).await?;
    let last = view.last_seq;
    // The log ends where the view ends: events appended between the two reads arrive over the
    // stream, which the script resumes from `last_seq`. Reading past it would show a log the
    // graph does not agree with.
    let first = last.saturating_sub(LOG_EVENTS as u64);
    let log: Vec<Record> = state
        .read(move |r| {
            let filter = EventFilter {
                after: first,
                limit: Some((last - first) as usize),
                ..EventFilter::default()
            };
            Ok(r.events(run, &filter)?)
        })
        .await?;
    let view_json = serde_json::to_string(&view).unwrap_or_else(|_| "{}".to_owned());
    let snapshot = format!("{{\"view\":{view_json},\"log\":{}}}", records_json(&log));
    let title = format!("{} · {} — cordon", view.pipeline, view.id);
    Ok(Html(shell(&title, "run", &view.id.to_string(), &snapshot)))
}

/// The page around a snapshot: the stylesheet, the data, the script for `kind`.
fn shell(title: &str, kind: &str, run: &str, snapshot: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title><link rel=\"icon\" href=\"data:,\"><link rel=\"stylesheet\" href=\"/assets/style.css\"></head>\
         <body data-page=\"{kind}\" data-run=\"{run}\"><div id=\"app\"></div>\
         <script type=\"application/json\" id=\"snapshot\">{data}</script>\
         <script src=\"/assets/{kind}.js\"></script></body></html>\n",
        title = escape(title),
        kind = escape(kind),
        run = escape(run),
        data = script_safe(snapshot),
    )
}

/// HTML text and attribute escaping.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

/// JSON that cannot end its `<script>` element early: `<`, `>` and `&` become `\u` escapes,
/// which mean the same inside JSON strings (the only place they can occur).
pub(crate) fn script_safe(json: &str) -> String {
    json.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_json_cannot_close_its_script_element() {
        let json = serde_json::json!({"text": "</script><script>alert(1)</script>&"}).to_string();
        let safe = script_safe(&json);
        assert!(!safe.contains("</script"), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).expect("still JSON");
        assert_eq!(back["text"], "</script><script>alert(1)</script>&");
        assert_eq!(
            escape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }
}
