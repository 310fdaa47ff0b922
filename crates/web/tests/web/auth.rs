//! The gate: the token (query once, then cookie) and the Host header, on every route.

use axum::body::Body;
use axum::http::{Request, StatusCode};

use crate::{Fixture, HOST, TOKEN, request, send};

fn routes(run: &str) -> Vec<String> {
    [
        "/".to_owned(),
        format!("/runs/{run}"),
        "/assets/run.js".to_owned(),
        "/assets/style.css".to_owned(),
        "/api/runs".to_owned(),
        format!("/api/runs/{run}"),
        format!("/api/runs/{run}/events"),
        format!("/api/runs/{run}/egress"),
        format!("/api/runs/{run}/stream"),
        "/no/such/page".to_owned(),
    ]
    .to_vec()
}

#[tokio::test]
async fn every_route_answers_401_without_the_token() {
    let fx = Fixture::new();
    let run = fx.finished_run(1).to_string();
    for route in routes(&run) {
        let reply = send(fx.app(), request(&route, false)).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{route}");
        assert!(
            reply.body.contains("missing or wrong token"),
            "{route}: {}",
            reply.body
        );
        // Control: the same request with the cookie passes the gate.
        let reply = send(fx.app(), request(&route, true)).await;
        assert_ne!(reply.status, StatusCode::UNAUTHORIZED, "{route}");
    }
}

#[tokio::test]
async fn a_wrong_token_or_another_ports_cookie_is_refused() {
    let fx = Fixture::new();
    for (uri, cookie) in [
        ("/api/runs?token=0123456789abcdee", None),
        ("/api/runs?token=", None),
        ("/api/runs", Some(format!("cordon_token_8321={TOKEN}x"))),
        ("/api/runs", Some(format!("cordon_token_8322={TOKEN}"))),
    ] {
        let mut builder = Request::get(uri).header("host", HOST);
        if let Some(cookie) = &cookie {
            builder = builder.header("cookie", cookie);
        }
        let reply = send(fx.app(), builder.body(Body::empty()).expect("request")).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{uri} {cookie:?}");
    }
}

#[tokio::test]
async fn a_foreign_host_header_is_refused_even_with_the_token() {
    let fx = Fixture::new();
    for host in [
        "evil.example.test:8321",
        "127.0.0.1:8322",
        "127.0.0.1",
        "localhost.example.test:8321",
        "",
    ] {
        let request = Request::get(format!("/api/runs?token={TOKEN}"))
            .header("host", host)
            .body(Body::empty())
            .expect("request");
        let reply = send(fx.app(), request).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{host}");
        assert!(
            reply.body.contains("is not this server's address"),
            "{}",
            reply.body
        );
    }
    for host in [HOST, "localhost:8321", "LOCALHOST:8321"] {
        let request = Request::get(format!("/api/runs?token={TOKEN}"))
            .header("host", host)
            .body(Body::empty())
            .expect("request");
        assert_eq!(
            send(fx.app(), request).await.status,
            StatusCode::OK,
            "{host}"
        );
    }
}

#[tokio::test]
async fn the_query_token_sets_a_strict_http_only_cookie() {
    let fx = Fixture::new();
    let request = Request::get(format!("/api/runs?token={TOKEN}"))
        .header("host", HOST)
        .body(Body::empty())
        .expect("request");
    let reply = send(fx.app(), request).await;
    assert_eq!(reply.status, StatusCode::OK);
    let cookie = reply
        .headers
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert_eq!(
        cookie,
        format!("cordon_token_8321={TOKEN}; HttpOnly; SameSite=Strict; Path=/")
    );
}

#[tokio::test]
async fn a_page_opened_with_the_token_redirects_to_its_address_without_it() {
    let fx = Fixture::new();
    let run = fx.finished_run(1);
    let request = Request::get(format!("/runs/{run}?token={TOKEN}&x=1"))
        .header("host", HOST)
        .body(Body::empty())
        .expect("request");
    let reply = send(fx.app(), request).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert_eq!(
        reply.headers.get("location").and_then(|v| v.to_str().ok()),
        Some(format!("/runs/{run}?x=1").as_str())
    );
    assert!(reply.headers.get("set-cookie").is_some());
}

#[tokio::test]
async fn responses_forbid_caching_framing_and_foreign_scripts() {
    let fx = Fixture::new();
    for reply in [
        send(fx.app(), request("/", true)).await,
        send(fx.app(), request("/api/runs", false)).await,
    ] {
        let header = |name: &str| {
            reply
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(header("cache-control"), "no-store");
        assert_eq!(header("x-frame-options"), "DENY");
        assert!(header("content-security-policy").contains("script-src 'self'"));
    }
}

#[tokio::test]
async fn the_token_redirect_never_leaves_the_server() {
    let fx = Fixture::new();
    let request = Request::get(format!("//evil.example.test/x?token={TOKEN}"))
        .header("host", HOST)
        .body(Body::empty())
        .expect("request");
    let reply = send(fx.app(), request).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert_eq!(
        reply.headers.get("location").and_then(|v| v.to_str().ok()),
        Some("/")
    );
}

#[tokio::test]
async fn a_backslash_cannot_turn_the_token_redirect_into_another_site() {
    let fx = Fixture::new();
    let request = Request::get(format!("/\\evil.example.test/x?token={TOKEN}"))
        .header("host", HOST)
        .body(Body::empty())
        .expect("request");
    let reply = send(fx.app(), request).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert_eq!(
        reply.headers.get("location").and_then(|v| v.to_str().ok()),
        Some("/")
    );
}
