//! Serving [`crate::app`] on a loopback socket: choosing the port, the runtime, the address
//! people open. Used by `cordon ui` (in the foreground) and `cordon run` (in a background
//! thread that dies with the run's process).

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use crate::{AppState, Token, WebError};

/// The default address (Appendix A).
pub const DEFAULT_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8321);

/// How many ports after a busy default are tried.
const NEXT_FREE_TRIES: u16 = 20;

/// Whether a busy port is an error or a reason to try the next ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IfBusy {
    Fail,
    TryNext,
}

/// Binds `addr`, which must be a loopback address: the UI has a token, but a network-facing
/// port would still expose it to every host that can reach this machine.
pub fn listen(addr: SocketAddr, if_busy: IfBusy) -> Result<TcpListener, WebError> {
    if !addr.ip().is_loopback() {
        return Err(WebError::NotLoopback(addr.to_string()));
    }
    let tries = match if_busy {
        IfBusy::Fail => 1,
        IfBusy::TryNext => NEXT_FREE_TRIES,
    };
    let mut last = None;
    for offset in 0..tries {
        let Some(port) = addr.port().checked_add(offset) else {
            break;
        };
        let candidate = SocketAddr::new(addr.ip(), port);
        match TcpListener::bind(candidate) {
            Ok(listener) => return Ok(listener),
            Err(err) if err.kind() == std::io::ErrorKind::AddrInUse && addr.port() != 0 => {
                last = Some(err)
            }
            Err(source) => {
                return Err(WebError::Bind {
                    addr: candidate.to_string(),
                    source,
                });
            }
        }
    }
    let source = last.unwrap_or_else(|| std::io::Error::from(std::io::ErrorKind::AddrInUse));
    Err(WebError::Bind {
        addr: addr.to_string(),
        source,
    })
}

/// The address to open for `path` on the server bound at `addr`, token included.
pub fn url(addr: SocketAddr, path: &str, token: &Token) -> String {
    let host = match addr {
        SocketAddr::V4(v4) => format!("{}:{}", v4.ip(), v4.port()),
        SocketAddr::V6(v6) => format!("[{}]:{}", v6.ip(), v6.port()),
    };
    format!("http://{host}{path}?token={}", token.as_str())
}

fn runtime() -> Result<tokio::runtime::Runtime, WebError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("cordon-ui")
        .enable_io()
        .enable_time()
        .build()
        .map_err(|source| WebError::Runtime { source })
}

async fn serve(listener: TcpListener, state: AppState) -> Result<(), WebError> {
    let addr = listener.local_addr().map_err(|source| WebError::Bind {
        addr: "?".to_owned(),
        source,
    })?;
    let bind = |source| WebError::Bind {
        addr: addr.to_string(),
        source,
    };
    listener.set_nonblocking(true).map_err(bind)?;
    let listener = tokio::net::TcpListener::from_std(listener).map_err(bind)?;
    axum::serve(listener, crate::app(state)).await.map_err(bind)
}

/// Serves until the process ends.
pub fn serve_forever(listener: TcpListener, state: AppState) -> Result<(), WebError> {
    runtime()?.block_on(serve(listener, state))
}

/// A server running in a background thread of this process.
pub struct Background {
    state: AppState,
}

impl Background {
    /// Before the process exits: tells every open page that the server is going away, and
    /// waits (at most `within`) until each has been sent the run's last events and `end`, so
    /// the pages show the final state and say to browse the run with `cordon ui`.
    pub fn finish(self, within: Duration) {
        self.state.close();
        let deadline = Instant::now() + within;
        while self.state.open_streams() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Serves from a background thread for as long as the process lives (`cordon run`).
pub fn serve_in_background(listener: TcpListener, state: AppState) -> Result<Background, WebError> {
    let runtime = runtime()?;
    let handle = Background {
        state: state.clone(),
    };
    std::thread::Builder::new()
        .name("cordon-ui".to_owned())
        .spawn(move || {
            // A failure after the address was printed can only be reported as a line; the
            // run itself goes on.
            if let Err(err) = runtime.block_on(serve(listener, state)) {
                eprintln!("cordon: the run's UI stopped: {err}");
            }
        })
        .map_err(|source| WebError::Runtime { source })?;
    Ok(handle)
}
