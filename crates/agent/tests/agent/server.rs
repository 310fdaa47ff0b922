//! A scripted HTTP/1.1 server on 127.0.0.1 for provider tests: it answers requests with the
//! scripted replies in order (one request per connection) and records every request.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// One scripted answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A status, extra headers and a JSON body.
    Json(u16, Vec<(&'static str, String)>, serde_json::Value),
    /// `200` with `text/event-stream` and these events, each `(event name, data)`.
    Sse(Vec<(&'static str, String)>),
    /// Reads the request and closes the connection without answering.
    Close,
}

impl Reply {
    pub fn ok(body: serde_json::Value) -> Reply {
        Reply::Json(200, Vec::new(), body)
    }
}

/// One request as received.
#[derive(Clone, Debug)]
pub struct Received {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: serde_json::Value,
    /// The whole request as text (head and body), for "never sent" checks.
    pub raw: String,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub struct Server {
    pub url: String,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Server {
    /// Starts a server that answers with `script`, then with `599 unscripted` to anything more.
    pub fn start(script: Vec<Reply>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&received);
        std::thread::spawn(move || {
            let mut script = script.into_iter();
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let reply = script.next();
                if serve(stream, reply, &log).is_err() {
                    continue;
                }
            }
        });
        Server { url, received }
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().expect("lock").clone()
    }
}

fn serve(
    stream: TcpStream,
    reply: Option<Reply>,
    log: &Mutex<Vec<Received>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let mut lines = head.lines();
    let path = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("")
        .to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let length = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let raw = format!("{head}{}", String::from_utf8_lossy(&body));
    log.lock().expect("lock").push(Received {
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
        raw,
    });
    let mut stream = stream;
    let (status, content_type, extra, text) = match reply {
        None => (599, "text/plain", Vec::new(), "unscripted".to_owned()),
        Some(Reply::Close) => return Ok(()),
        Some(Reply::Json(status, extra, body)) => {
            (status, "application/json", extra, body.to_string())
        }
        Some(Reply::Sse(events)) => {
            let mut text = String::new();
            for (event, data) in events {
                if !event.is_empty() {
                    text.push_str(&format!("event: {event}\n"));
                }
                text.push_str(&format!("data: {data}\n\n"));
            }
            (200, "text/event-stream", Vec::new(), text)
        }
    };
    let mut response = format!(
        "HTTP/1.1 {status} Scripted\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        text.len()
    );
    for (name, value) in extra {
        response.push_str(&format!("{name}: {value}\r\n"));
    }
    response.push_str("\r\n");
    response.push_str(&text);
    stream.write_all(response.as_bytes())?;
    stream.flush()
}
