//! `SSL_CERT_FILE` adds a trusted CA: a provider reaches an HTTPS server whose certificate a test
//! CA signed only when the variable names that CA, and refuses it otherwise.
//!
//! The files in `tls/` are test fixtures made with openssl (P-256, valid for 100 years): `ca.pem`
//! (the test CA, its key discarded), `server.pem` + `server.key` (for `localhost` and 127.0.0.1).

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;

use cordon_agent::provider::{self, HttpOptions, Inputs, RetryPolicy};
use cordon_agent::{Message, Provider, ProviderError, Request};
use cordon_pipeline::Llm;
use cordon_protocol::{Attempt, StepName};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/agent/tls")
        .join(name)
}

/// An HTTPS server on 127.0.0.1 that answers every request with one chat completion.
fn https_server() -> String {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(fixture("server.pem"))
        .expect("server.pem")
        .collect::<Result<_, _>>()
        .expect("certificates");
    let key = PrivateKeyDer::from_pem_file(fixture("server.key")).expect("server.key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("server config");
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!(
        "https://localhost:{}/v1",
        listener.local_addr().expect("addr").port()
    );
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let Ok(connection) = rustls::ServerConnection::new(Arc::clone(&config)) else {
                continue;
            };
            let mut tls = rustls::StreamOwned::new(connection, stream);
            let _ = answer(&mut tls);
        }
    });
    url
}

fn answer(tls: &mut impl ReadWrite) -> std::io::Result<()> {
    let mut reader = BufReader::new(&mut *tls);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let reply = serde_json::json!({
        "choices": [{"message": {"role": "assistant", "content": "over tls"}}]
    })
    .to_string();
    write!(
        tls,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
        reply.len()
    )?;
    tls.flush()
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

fn ask(url: &str, ssl_cert_file: Option<PathBuf>) -> Result<String, ProviderError> {
    let llm = Llm::OpenAi {
        model: "m".to_owned(),
        base_url: Some(url.to_owned()),
        api_key_env: None,
    };
    let env = move |name: &str| match name {
        "SSL_CERT_FILE" => ssl_cert_file.clone().map(OsString::from),
        _ => None,
    };
    let http = HttpOptions {
        // A certificate error must fail at once, retries or not.
        retry: RetryPolicy {
            retries: 3,
            ..RetryPolicy::default()
        },
        ..HttpOptions::default()
    };
    let mut provider = provider::from_llm(
        &llm,
        Inputs {
            transcript: None,
            env: &env,
            http,
        },
    )
    .expect("a provider");
    let request = Request {
        step: StepName::parse("dev").expect("step"),
        attempt: Attempt::FIRST,
        model: "m".to_owned(),
        system: String::new(),
        messages: vec![Message::User {
            text: "hi".to_owned(),
        }],
        tools: Vec::new(),
        temperature: None,
    };
    provider
        .complete(&request)
        .map(|r| r.text.unwrap_or_default())
}

#[test]
fn ssl_cert_file_makes_a_test_ca_trusted_and_nothing_else_does() {
    let url = https_server();
    assert_eq!(
        ask(&url, Some(fixture("ca.pem"))).expect("trusted through SSL_CERT_FILE"),
        "over tls"
    );
    // The control: without the variable the same server is refused.
    let err = ask(&url, None).expect_err("an unknown CA is refused");
    assert!(matches!(err, ProviderError::Tls { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("presented a certificate cordon does not trust"),
        "{err}"
    );
    assert!(
        err.to_string()
            .ends_with("point `SSL_CERT_FILE` at its PEM file"),
        "{err}"
    );
}
