//! The pipeline's one HTTP URL grammar: MCP servers, forges, delivery remotes.

use std::fmt;

use crate::decode;

/// An HTTP server's URL, with its host and port for the network check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpUrl {
    pub text: String,
    pub host: String,
    pub port: u16,
}

impl HttpUrl {
    /// `http://HOST[:PORT][/PATH]` or `https://…`, as the pipeline accepts them; the reason
    /// when not.
    pub fn parse(text: &str) -> Result<HttpUrl, String> {
        parse(text)
    }

    /// Whether the URL is `https://` (else `http://`).
    pub fn is_https(&self) -> bool {
        self.text.starts_with("https://")
    }
}

impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `http://HOST[:PORT][/PATH]` or `https://…`; userinfo, fragments and control characters
/// refused.
pub(crate) fn parse(text: &str) -> Result<HttpUrl, String> {
    if text.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err("it holds spaces or control characters".to_owned());
    }
    let (rest, default_port) = if let Some(rest) = text.strip_prefix("https://") {
        (rest, 443)
    } else if let Some(rest) = text.strip_prefix("http://") {
        (rest, 80)
    } else {
        return Err("it must start with `https://` or `http://`".to_owned());
    };
    if text.contains('#') {
        return Err("it has a fragment (`#…`)".to_owned());
    }
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err("it carries credentials; give them through a secret instead".to_owned());
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| "its IPv6 address has no closing `]`".to_owned())?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("it names no host".to_owned());
    }
    let port = match port {
        None => default_port,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("its port {} is not 1-65535", decode::quoted(p)))?,
    };
    Ok(HttpUrl {
        text: text.to_owned(),
        host: host.to_ascii_lowercase(),
        port,
    })
}
