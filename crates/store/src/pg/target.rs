//! Where the PostgreSQL store is and how to reach it: the URL parsed by rust-postgres, the
//! password from a file or the environment (never the URL, which any local user can read in the
//! process list), and timeouts that bound every wait on the network.

use std::io::Read as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr as _;
use std::time::Duration;

use tokio_postgres::Config;

use super::session::{Failure, Session};

use crate::StoreError;

/// How long the TCP handshake, and unacknowledged data on an open connection, may wait.
const NETWORK_TIMEOUT: Duration = Duration::from_secs(4);
/// How long one call — connecting and authenticating, or one statement and its answer — may
/// wait for the store before it fails, naming the store.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(15);
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
        crate::url::check(url)?;
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

    /// A new session whose calls each wait at most [`CALL_TIMEOUT`]. No TLS: the store is
    /// reached on loopback or a private network (`docs/scale-out.md`); a URL asking for
    /// `sslmode=require` fails here with the server named.
    pub(crate) fn connect(&self) -> Result<Session, StoreError> {
        self.connect_within(CALL_TIMEOUT)
            .map_err(|err| self.error(&err))
    }

    /// A new session whose calls each wait at most `limit`.
    pub(crate) fn connect_within(&self, limit: Duration) -> Result<Session, Failure> {
        Session::connect(&self.config, limit)
    }

    /// The socket addresses the store is reached at, each on its port: its TCP hosts resolved
    /// now; and when the server is on this machine (a unix socket, a loopback address or one of
    /// the machine's own), loopback and every address of the machine on that port too — a local
    /// server usually listens on several. The egress proxy refuses them all to every sandbox,
    /// whatever `allow_private` says.
    pub(crate) fn addresses(&self) -> Vec<SocketAddr> {
        use std::net::ToSocketAddrs as _;
        let ports = self.config.get_ports();
        let port = |i: usize| {
            ports
                .get(i)
                .or_else(|| ports.first())
                .copied()
                .unwrap_or(5432)
        };
        let own = own_addresses();
        let mut out = Vec::new();
        let mut local_ports = Vec::new();
        for (i, host) in self.config.get_hosts().iter().enumerate() {
            let found: Vec<SocketAddr> = match host {
                tokio_postgres::config::Host::Tcp(name) => (name.as_str(), port(i))
                    .to_socket_addrs()
                    .map(|found| found.take(16).collect())
                    .unwrap_or_default(),
                tokio_postgres::config::Host::Unix(_) => {
                    local_ports.push(port(i));
                    Vec::new()
                }
            };
            out.extend(found);
        }
        for (i, ip) in self.config.get_hostaddrs().iter().enumerate() {
            out.push(SocketAddr::new(*ip, port(i)));
        }
        for addr in &out {
            if addr.ip().is_loopback() || own.contains(&addr.ip()) {
                local_ports.push(addr.port());
            }
        }
        local_ports.sort_unstable();
        local_ports.dedup();
        for port in local_ports {
            out.push(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
            out.push(SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port));
            out.extend(own.iter().map(|ip| SocketAddr::new(*ip, port)));
        }
        out
    }

    /// A failed call as a `StoreError` naming the store; the server's own message when it sent
    /// one (a refused password, a missing database), escaped for the terminal.
    pub(crate) fn error(&self, err: &Failure) -> StoreError {
        StoreError::Postgres {
            store: self.shown.clone(),
            detail: crate::rows::printable(&err.to_string()),
        }
    }
}

/// The password: the file `$CORDON_STORE_PASSWORD_FILE` names (its first line), else
/// `$PGPASSWORD`, else none (the server may trust the connection).
fn password() -> Result<Option<Vec<u8>>, StoreError> {
    password_from(
        std::env::var_os("CORDON_STORE_PASSWORD_FILE"),
        std::env::var_os("PGPASSWORD"),
    )
}

/// [`password`] from the two variables' values (empty counts as unset).
fn password_from(
    file: Option<std::ffi::OsString>,
    variable: Option<std::ffi::OsString>,
) -> Result<Option<Vec<u8>>, StoreError> {
    let Some(path) = file.filter(|p| !p.is_empty()).map(PathBuf::from) else {
        return Ok(variable
            .filter(|p| !p.is_empty())
            .map(std::ffi::OsString::into_encoded_bytes));
    };
    let bad = |detail: String| StoreError::PasswordFile {
        path: path.clone(),
        detail,
    };
    // A regular file only: a FIFO there would block the open, a directory has no first line.
    match std::fs::metadata(&path) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return Err(bad("it is not a regular file".to_owned())),
        Err(err) => return Err(bad(err.to_string())),
    }
    let file = std::fs::File::open(&path).map_err(|err| bad(err.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_PASSWORD + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| bad(err.to_string()))?;
    if bytes.len() as u64 > MAX_PASSWORD {
        return Err(bad(format!(
            "it is longer than {MAX_PASSWORD} bytes, and it must hold only the password"
        )));
    }
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        return Err(bad("its first line is empty".to_owned()));
    }
    Ok(Some(line.to_vec()))
}

/// Longest kernel table read for this machine's addresses.
const MAX_TABLE: u64 = 1 << 20;

/// This machine's own addresses: the kernel's local IPv4 routes and its IPv6 interface
/// addresses (host files, read with a bound; an unreadable one gives none).
fn own_addresses() -> Vec<IpAddr> {
    let read = |path: &str| {
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_TABLE).read_to_string(&mut text))
            .map(|_| text)
            .unwrap_or_default()
    };
    let mut own = local_ipv4(&read("/proc/net/fib_trie"));
    own.extend(local_ipv6(&read("/proc/net/if_inet6")));
    own.sort_unstable();
    own.dedup();
    own
}

/// The addresses `/proc/net/fib_trie` marks `/32 host LOCAL` (each follows its `|-- ADDRESS`).
fn local_ipv4(trie: &str) -> Vec<IpAddr> {
    let mut last = None;
    let mut out = Vec::new();
    for line in trie.lines() {
        let line = line.trim();
        if let Some(addr) = line.strip_prefix("|-- ") {
            last = addr.parse::<Ipv4Addr>().ok();
        } else if line.starts_with("/32 host LOCAL")
            && let Some(addr) = last.take()
        {
            out.push(IpAddr::V4(addr));
        }
    }
    out
}

/// The addresses of `/proc/net/if_inet6` (32 hex digits first on each line).
fn local_ipv6(table: &str) -> Vec<IpAddr> {
    table
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter_map(|hex| {
            u128::from_str_radix(hex, 16)
                .ok()
                .filter(|_| hex.len() == 32)
        })
        .map(|bits| IpAddr::V6(Ipv6Addr::from(bits)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_on_this_machine_is_refused_on_loopback_and_its_own_addresses_too() {
        let has = |url: &str, addr: &str| {
            let target = Target::parse(url).expect("parse");
            target
                .addresses()
                .contains(&addr.parse::<SocketAddr>().expect("addr"))
        };
        // A unix socket: the same server's TCP port on loopback.
        let unix = "postgres://cordon@%2Ftmp%2Fpg:55432/db";
        assert!(has(unix, "127.0.0.1:55432") && has(unix, "[::1]:55432"));
        // A loopback address: the other family too, and every address of this machine.
        let tcp = "postgres://cordon@127.0.0.1:55432/db";
        assert!(has(tcp, "[::1]:55432"));
        for own in own_addresses() {
            assert!(has(tcp, &SocketAddr::new(own, 55432).to_string()), "{own}");
        }
        // A remote one: only its own addresses (control).
        let remote = "postgres://cordon@192.0.2.77:5432/db";
        assert!(has(remote, "192.0.2.77:5432") && !has(remote, "127.0.0.1:5432"));
    }

    #[test]
    fn the_password_is_the_first_line_of_its_file_else_pgpassword() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).expect("write");
            Some(path.into_os_string())
        };
        let env = |text: &str| Some(std::ffi::OsString::from(text));
        let got = |file, variable| {
            password_from(file, variable)
                .map(|p| p.map(|p| String::from_utf8_lossy(&p).into_owned()))
                .map_err(|e| e.to_string())
        };
        let some = |text: &str| Ok(Some(text.to_owned()));
        assert_eq!(
            got(file("a", b"s3cret\r\nignored\n"), env("other")),
            some("s3cret")
        );
        assert_eq!(got(None, env("from-env")), some("from-env"));
        assert_eq!(got(env(""), env("from-env")), some("from-env"));
        assert_eq!(got(None, env("")), Ok(None));
        let refused = [
            (file("b", b"\nsecond\n"), "its first line is empty"),
            (file("c", &vec![b'x'; 5000]), "it is longer than 4096 bytes"),
            (
                Some(dir.path().as_os_str().to_owned()),
                "it is not a regular file",
            ),
            (
                Some(dir.path().join("missing").into_os_string()),
                "No such file",
            ),
        ];
        for (path, want) in refused {
            let err = got(path, env("unused")).expect_err("refused");
            assert!(
                err.starts_with("cannot use the store's password file `")
                    && err.contains(want)
                    && err.ends_with(
                        "; write the password on its first line, in a regular file this user can \
                         read, or unset $CORDON_STORE_PASSWORD_FILE"
                    ),
                "{err}"
            );
        }
    }

    #[test]
    fn this_machines_addresses_are_read_from_the_kernels_tables() {
        let trie = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n           |-- 127.0.0.1\n              /32 host LOCAL\n           |-- 192.0.2.255\n              /32 link BROADCAST\n           |-- 192.0.2.2\n              /32 host LOCAL\nLocal:\n           |-- 192.0.2.2\n              /32 host LOCAL\n";
        assert_eq!(
            local_ipv4(trie),
            ["127.0.0.1", "192.0.2.2", "192.0.2.2"]
                .map(|a| a.parse::<IpAddr>().expect("ip"))
                .to_vec()
        );
        let inet6 = "00000000000000000000000000000001 01 80 10 80       lo\nfe800000000000000000000000000002 02 40 20 80     eth0\nnot-hex 01\n";
        assert_eq!(
            local_ipv6(inet6),
            ["::1", "fe80::2"]
                .map(|a| a.parse::<IpAddr>().expect("ip"))
                .to_vec()
        );
    }
}
