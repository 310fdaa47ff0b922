//! The gate in front of every route: the Host header must name this server (a page on another
//! origin cannot reach it through DNS rebinding), and the request must carry the token, either
//! as `?token=` (which sets the cookie) or in the cookie itself.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::{AppState, WebError, query};

pub(crate) async fn gate(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match check(&state, &request) {
        Ok(Access::Cookie) => with_headers(next.run(request).await),
        Ok(Access::Query) => {
            let cookie = format!(
                "{}={}; HttpOnly; SameSite=Strict; Path=/",
                state.cookie_name(),
                state.token.as_str()
            );
            let path = request.uri().path().to_owned();
            // A page opened with `?token=` is redirected to its address without the token, so
            // the secret leaves the address bar and the history; the cookie carries it on.
            let mut response = if request.method() == Method::GET && is_page(&path) {
                let rest: Vec<&str> = request
                    .uri()
                    .query()
                    .unwrap_or("")
                    .split('&')
                    .filter(|part| !part.is_empty() && part.split('=').next() != Some("token"))
                    .collect();
                let path = same_origin(&path);
                let location = if rest.is_empty() {
                    path
                } else {
                    format!("{path}?{}", rest.join("&"))
                };
                let mut response = StatusCode::SEE_OTHER.into_response();
                if let Ok(value) = HeaderValue::from_str(&location) {
                    response.headers_mut().insert(header::LOCATION, value);
                }
                response
            } else {
                next.run(request).await
            };
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().append(header::SET_COOKIE, value);
            }
            with_headers(response)
        }
        Err(err) => with_headers(err.into_response()),
    }
}

/// `path` as a redirect target that stays on this server. Browsers read `\\` as `/`, so
/// `/\\evil.example` would leave for another site just as `//evil.example` would: backslashes
/// become slashes, and anything that is then not a plain absolute path (`//…`, no leading `/`,
/// a control character) becomes `/`.
fn same_origin(path: &str) -> String {
    let path = path.replace('\\', "/");
    if !path.starts_with('/') || path.starts_with("//") || path.chars().any(char::is_control) {
        "/".to_owned()
    } else {
        path
    }
}

enum Access {
    Query,
    Cookie,
}

fn check(state: &AppState, request: &Request) -> Result<Access, WebError> {
    let host = request
        .headers()
        .get(header::HOST)
        .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
        .unwrap_or_default();
    if !state
        .hosts
        .iter()
        .any(|allowed| allowed.eq_ignore_ascii_case(&host))
    {
        return Err(WebError::ForeignHost(host));
    }
    if query::pairs(request.uri().query())
        .iter()
        .any(|(k, v)| k == "token" && state.token.matches(v))
    {
        return Ok(Access::Query);
    }
    let name = state.cookie_name();
    let cookie_ok = request
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .any(|(k, v)| k == name && state.token.matches(v));
    if cookie_ok {
        Ok(Access::Cookie)
    } else {
        Err(WebError::Unauthorized)
    }
}

fn is_page(path: &str) -> bool {
    !path.starts_with("/api/") && !path.starts_with("/assets/")
}

/// Headers every response carries: nothing cached, nothing framed, scripts and styles only
/// from this server, no referrer (the page's address may hold a run id).
fn with_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    let fixed = [
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        ),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::same_origin;

    #[test]
    fn redirects_stay_on_this_server() {
        for (path, expected) in [
            ("/runs/01abc", "/runs/01abc"),
            ("/", "/"),
            ("//evil.example/x", "/"),
            ("/\\evil.example", "/"),
            ("\\\\evil.example", "/"),
            ("/\\/evil.example", "/"),
            ("/ok\\path", "/ok/path"),
            ("relative", "/"),
            ("/line\nbreak", "/"),
        ] {
            assert_eq!(same_origin(path), expected, "{path:?}");
        }
    }
}
