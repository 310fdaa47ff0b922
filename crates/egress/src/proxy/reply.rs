//! The proxy's own responses: `200 Connection established` and the refusals, each refusal with
//! its `X-Cordon-Reason` code (DESIGN Appendix A) and a one-line body that says what to do.

use crate::Reason;

/// The answer to an allowed and dialled `CONNECT`.
pub(super) const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

/// Whether the client connection stays open after a refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum After {
    KeepAlive,
    Close,
}

fn status_text(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

/// A refusal for `reason` with its Appendix A status.
pub(super) fn refusal(reason: Reason, detail: &str, after: After) -> Vec<u8> {
    response(reason.status(), Some(reason), detail, after)
}

/// A response with `status`, an optional reason header, and `detail` as a text body.
pub(super) fn response(status: u16, reason: Option<Reason>, detail: &str, after: After) -> Vec<u8> {
    // The detail may quote client input; keep the body one printable line.
    let body: String = format!("cordon egress: {detail}")
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .chain(std::iter::once('\n'))
        .collect();
    let mut out = format!("HTTP/1.1 {status} {}\r\n", status_text(status));
    if let Some(reason) = reason {
        out.push_str(&format!("X-Cordon-Reason: {reason}\r\n"));
    }
    out.push_str("Content-Type: text/plain; charset=utf-8\r\n");
    out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    if after == After::Close {
        out.push_str("Connection: close\r\n");
    }
    out.push_str("\r\n");
    out.push_str(&body);
    out.into_bytes()
}
