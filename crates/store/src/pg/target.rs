//! Where the PostgreSQL store is and how to reach it: the URL parsed by rust-postgres, the
//! password from a file or the environment (never the URL, which any local user can read in the
//! process list), and timeouts that bound every wait on the network.

use std::io::Read as _;
use std::path::PathBuf;
use std::str::FromStr as _;
use std::time::Duration;

use postgres::{Client, Config, NoTls};

use crate::StoreError;

/// How long a connection attempt, and unacknowledged data on an open connection, may wait: a
/// partitioned worker finds out within this, so its lease renewal can give up in time.
const NETWORK_TIMEOUT: Duration = Duration::from_secs(4);
/// Longest password file read (a password, not a document).
const MAX_PASSWORD: u64 = 4096;

/// A parsed store URL with its password filled in.
#[derive(Clone)]
pub(crate) struct Target {
    config: Config,
    /// The URL as it may be printed.
    pub(crate) shown: String,
    /// The URL as given: which store a lease of this process is held in.
    pub(crate) key: String,
}

impl Target {
    /// Parses `url`, refusing one that carries a password; takes the password from the file
    /// `$CORDON_STORE_PASSWORD_FILE` names, else `$PGPASSWORD`.
    pub(crate) fn parse(url: &str) -> Result<Target, StoreError> {
        let shown = crate::url::shown(url);
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(StoreError::StoreUrl {
                url: shown,
                detail: "only postgres:// URLs name a shared store".to_owned(),
            });
        }
        let mut config = Config::from_str(url).map_err(|err| StoreError::StoreUrl {
            url: shown.clone(),
            detail: err.to_string(),
        })?;
        if config.get_password().is_some() {
            return Err(StoreError::PasswordInUrl(shown));
        }
        if let Some(password) = password()? {
            config.password(password);
        }
        config
            .application_name("cordon")
            .connect_timeout(NETWORK_TIMEOUT)
            .tcp_user_timeout(NETWORK_TIMEOUT)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(5));
        Ok(Target {
            config,
            shown,
            key: url.to_owned(),
        })
    }

    /// The same target for sessions the server keeps read-only.
    pub(crate) fn read_only(mut self) -> Target {
        let options = match self.config.get_options() {
            Some(given) => format!("{given} -c default_transaction_read_only=on"),
            None => "-c default_transaction_read_only=on".to_owned(),
        };
        self.config.options(&options);
        self
    }

    /// A new session. No TLS: the store is reached on loopback or a private network (say so in
    /// `docs/scale-out.md`); a URL asking for `sslmode=require` fails here with the server named.
    pub(crate) fn connect(&self) -> Result<Client, StoreError> {
        self.config.connect(NoTls).map_err(|err| self.error(&err))
    }

    /// The socket addresses the store is reached at (its TCP hosts resolved now, each on its
    /// port): the egress proxy refuses them to every sandbox, whatever `allow_private` says.
    pub(crate) fn addresses(&self) -> Vec<std::net::SocketAddr> {
        use std::net::ToSocketAddrs as _;
        let ports = self.config.get_ports();
        let port = |i: usize| {
            ports
                .get(i)
                .or_else(|| ports.first())
                .copied()
                .unwrap_or(5432)
        };
        let mut out = Vec::new();
        for (i, host) in self.config.get_hosts().iter().enumerate() {
            if let postgres::config::Host::Tcp(name) = host
                && let Ok(found) = (name.as_str(), port(i)).to_socket_addrs()
            {
                out.extend(found.take(16));
            }
        }
        for (i, ip) in self.config.get_hostaddrs().iter().enumerate() {
            out.push(std::net::SocketAddr::new(*ip, port(i)));
        }
        out
    }

    /// A client error as a `StoreError` naming the store; the server's own message when it sent
    /// one (a refused password, a missing database), escaped for the terminal.
    pub(crate) fn error(&self, err: &postgres::Error) -> StoreError {
        let detail = match err.as_db_error() {
            Some(db) => format!("{} ({})", db.message(), db.code().code()),
            None => err.to_string(),
        };
        StoreError::Postgres {
            store: self.shown.clone(),
            detail: crate::rows::printable(&detail),
        }
    }
}

/// The password: the file `$CORDON_STORE_PASSWORD_FILE` names (its first line), else
/// `$PGPASSWORD`, else none (the server may trust the connection).
fn password() -> Result<Option<Vec<u8>>, StoreError> {
    if let Some(path) = std::env::var_os("CORDON_STORE_PASSWORD_FILE").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        let bad = |detail: String| StoreError::PasswordFile {
            path: path.clone(),
            detail,
        };
        let file = std::fs::File::open(&path).map_err(|err| bad(err.to_string()))?;
        let mut bytes = Vec::new();
        file.take(MAX_PASSWORD + 1)
            .read_to_end(&mut bytes)
            .map_err(|err| bad(err.to_string()))?;
        if bytes.len() as u64 > MAX_PASSWORD {
            return Err(bad(format!(
                "it is longer than {MAX_PASSWORD} bytes; it must hold only the password"
            )));
        }
        let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return Err(bad(
                "its first line is empty; write the password on it".to_owned()
            ));
        }
        return Ok(Some(line.to_vec()));
    }
    Ok(std::env::var_os("PGPASSWORD")
        .filter(|p| !p.is_empty())
        .map(|p| p.into_encoded_bytes()))
}
