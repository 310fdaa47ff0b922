//! The request-head path as one pure function for the fuzz target (`fuzz/fuzz_targets/proxy_head.rs`):
//! the parser, the framing rules and the upstream head rewrite the proxy runs on every request,
//! with the properties that keep a request from meaning one thing to the proxy and another to the
//! upstream checked by assertions.

use super::head::{self, Framing, Parsed, client_keeps_alive, connection_tokens, request_framing};
use super::http::{host_field, upstream_head};
use crate::Target;

/// Parses `bytes` as the proxy parses a request head and, when it would forward the request,
/// rewrites the head for the upstream and checks that rewrite. Panics on a broken property:
/// * the parsed length lies within the input;
/// * the rewritten head parses back completely, as one head with nothing after it;
/// * with the same method, the origin-form path, exactly one `Host` (the checked authority);
/// * no hop-by-hop or `Proxy-*` field survives, and `Connection` is exactly `close`;
/// * the upstream reads the body with the same framing as the proxy did.
#[doc(hidden)]
pub fn request_head(bytes: &[u8]) {
    let Ok(Parsed::Complete(head, len)) = head::parse_request(bytes) else {
        return;
    };
    assert!(len <= bytes.len());
    let framing = request_framing(&head);
    let _ = client_keeps_alive(&head);
    if head.method == "CONNECT" {
        let _ = Target::parse(&head.target);
        return;
    }
    let (Ok(framing), Ok(form)) = (framing, Target::parse_absolute(&head.target)) else {
        return;
    };
    let rewritten = upstream_head(&head, &form, framing);
    let parsed = match head::parse_request(&rewritten) {
        Ok(Parsed::Complete(parsed, used)) if used == rewritten.len() => parsed,
        other => panic!(
            "the upstream head does not parse back as one head ({}): {:?}",
            match other {
                Ok(Parsed::Complete(..)) => "bytes after it".to_owned(),
                Ok(Parsed::Partial) => "incomplete".to_owned(),
                Err(e) => e.to_string(),
            },
            String::from_utf8_lossy(&rewritten)
        ),
    };
    assert_eq!(parsed.method, head.method);
    assert_eq!(parsed.target, form.path());
    let hosts: Vec<_> = parsed
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"))
        .collect();
    assert_eq!(hosts.len(), 1);
    assert_eq!(hosts[0].value, host_field(form.target()).as_bytes());
    for header in &parsed.headers {
        let name = header.name.to_ascii_lowercase();
        assert!(!name.starts_with("proxy-"), "{name} forwarded");
        assert!(
            !["keep-alive", "te", "trailer", "upgrade"].contains(&name.as_str()),
            "{name} forwarded"
        );
    }
    assert_eq!(connection_tokens(&parsed.headers), ["close"]);
    let expected = match framing {
        Framing::Length(0) => Framing::Empty,
        other => other,
    };
    assert_eq!(request_framing(&parsed), Ok(expected));
}
