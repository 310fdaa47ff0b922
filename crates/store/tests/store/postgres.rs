//! What only the PostgreSQL store has: leases (taken, renewed, lost, fenced), migrations shared
//! between machines, and the URL and password rules. Against `$CORDON_TEST_POSTGRES`.

use std::io::{Read as _, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_protocol::{Event, RunId};
use cordon_store::{LeaseTimes, StateDir, Store, StoreError};

use crate::{Fixture, run};

/// A schema of its own on the test server, dropped with it.
pub struct Schema {
    name: String,
    url: String,
    client: Mutex<postgres::Client>,
}

impl Schema {
    pub fn sql(&self, sql: &str) -> Result<u64, String> {
        let mut client = self.client.lock().expect("client");
        client.execute(sql, &[]).map_err(|e| {
            e.as_db_error()
                .map_or_else(|| e.to_string(), |db| db.message().to_owned())
        })
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if let Ok(mut client) = self.client.lock() {
            let _ = client.batch_execute(&format!("DROP SCHEMA {} CASCADE", self.name));
        }
    }
}

/// The server's URL, or `None` when CI declares PostgreSQL missing; otherwise its absence fails.
fn server() -> Option<String> {
    match std::env::var("CORDON_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CORDON_TEST_MISSING").is_ok_and(|m| m.contains("postgres")) => None,
        _ => panic!(
            "built with scale-out but $CORDON_TEST_POSTGRES is unset: start a server with \
             `.ci/postgres` and export what it prints, or list `postgres` in CORDON_TEST_MISSING"
        ),
    }
}

fn password() -> String {
    let path = std::env::var("CORDON_STORE_PASSWORD_FILE").expect("CORDON_STORE_PASSWORD_FILE");
    std::fs::read_to_string(path)
        .expect("password")
        .trim()
        .to_owned()
}

/// A fresh schema and a URL whose sessions use it.
pub fn schema() -> Option<Schema> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = server()?;
    let name = format!(
        "t_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let mut config: postgres::Config = base.parse().expect("server URL");
    config.password(password());
    let mut client = config
        .connect(postgres::NoTls)
        .expect("connect to the test server");
    client
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}; SET search_path TO {name}"
        ))
        .expect("schema");
    let join = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{join}options=-csearch_path%3D{name}");
    Some(Schema {
        name,
        url,
        client: Mutex::new(client),
    })
}

/// The PostgreSQL fixture for [`crate::each_store`].
pub fn fixture() -> Option<Fixture> {
    let schema = schema()?;
    let dir = tempfile::tempdir().expect("tempdir");
    let state = StateDir::new(dir.path().join("state")).with_store(Some(schema.url.clone()));
    let store = Store::open(&state).expect("open postgres");
    Some(Fixture {
        backend: "postgres",
        dir,
        state,
        store,
        schema: Some(schema),
    })
}

fn error() -> Event {
    Event::Error {
        message: "x".into(),
    }
}

#[test]
fn a_stale_holder_is_fenced_once_another_took_the_run() {
    let Some(fx) = fixture() else { return };
    let store = &fx.store;
    let a = run(store, 1);
    let lease = store.lock_run(a).expect("lease");
    store
        .append(a, None, &error())
        .expect("the holder appends (control)");
    store.check_held(a).expect("the holder may act (control)");
    // Another machine takes the run after this holder's lease expired: the row's generation moves.
    let moved = fx
        .sql(&format!(
            "UPDATE leases SET generation = generation + 1, holder = 'elsewhere' WHERE run = '{a}'"
        ))
        .expect("take over");
    assert_eq!(moved, 1);
    let err = store.append(a, None, &error()).expect_err("fenced");
    assert!(
        matches!(
            err,
            StoreError::Fenced {
                held: 1,
                current: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(matches!(
        store.check_held(a),
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(
        store.events(a).expect("events").len(),
        1,
        "nothing was appended"
    );
    drop(lease);
    // The stale holder's release leaves the new holder's lease alone.
    assert!(store.is_held(a), "the new holder's lease is untouched");
}

#[test]
fn a_released_lease_is_taken_again_with_a_higher_generation() {
    let Some(fx) = fixture() else { return };
    let store = &fx.store;
    let a = run(store, 1);
    drop(store.lock_run(a).expect("first"));
    let generation = |fx: &Fixture| {
        fx.sql(&format!(
            "UPDATE leases SET holder = holder WHERE run = '{a}' AND generation = 2"
        ))
    };
    assert_eq!(
        generation(&fx),
        Ok(0),
        "generation 1 before the second take"
    );
    let second = store.lock_run(a).expect("second");
    assert_eq!(generation(&fx), Ok(1), "the second holder has generation 2");
    store
        .append(a, None, &error())
        .expect("the second holder appends");
    drop(second);
}

#[test]
fn an_expired_lease_can_be_taken_and_a_live_one_cannot() {
    let Some(fx) = fixture() else { return };
    let store = &fx.store;
    let a = run(store, 1);
    let other = run(store, 2);
    // A lease another machine holds (a row this process did not take).
    fx.sql(&format!(
        "INSERT INTO leases VALUES ('{a}', 'cordon pid 1 on far\u{1b}[2J', 7, now() + interval '30 seconds')"
    ))
    .expect("foreign lease");
    let err = store.lock_run(a).expect_err("live").to_string();
    assert!(
        err.contains("is held by cordon pid 1 on far\\e[2J, whose lease runs 30 s more"),
        "{err}"
    );
    let err = store
        .append(a, None, &error())
        .expect_err("not ours")
        .to_string();
    assert!(err.contains("is held by cordon pid 1 on far"), "{err}");
    store
        .append(other, None, &error())
        .expect("another run appends (control)");
    fx.sql(&format!(
        "UPDATE leases SET expires = now() - interval '1 second' WHERE run = '{a}'"
    ))
    .expect("expire");
    let lease = store.lock_run(a).expect("expired: taken");
    assert!(
        lease.describe().contains("generation 8"),
        "{}",
        lease.describe()
    );
    store
        .append(a, None, &error())
        .expect("the new holder appends");
}

/// A loopback relay to the test server that can be cut, as a network partition would.
struct Relay {
    port: u16,
    cut: Arc<AtomicBool>,
    /// Reads on, forwards nothing: a server that stalls (its kernel still acknowledges).
    frozen: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    fn start(server: &str) -> Relay {
        let config: postgres::Config = server.parse().expect("url");
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let local = listener.local_addr().expect("addr").port();
        let cut = Arc::new(AtomicBool::new(false));
        let frozen = Arc::new(AtomicBool::new(false));
        let streams: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (cut2, frozen2, streams2) =
            (Arc::clone(&cut), Arc::clone(&frozen), Arc::clone(&streams));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                if cut2.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let Ok(upstream) = TcpStream::connect(("127.0.0.1", port)) else {
                    return;
                };
                for (mut from, mut to) in [
                    (
                        client.try_clone().expect("clone"),
                        upstream.try_clone().expect("clone"),
                    ),
                    (
                        upstream.try_clone().expect("clone"),
                        client.try_clone().expect("clone"),
                    ),
                ] {
                    let frozen = Arc::clone(&frozen2);
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            if frozen.load(Ordering::SeqCst) {
                                continue;
                            }
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
                streams2.lock().expect("streams").extend([client, upstream]);
            }
        });
        Relay {
            port: local,
            cut,
            frozen,
            streams,
        }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for stream in self.streams.lock().expect("streams").drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// The store is back: new connections go through again.
    fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    /// A URL of `schema` that reaches the server through this relay.
    fn url(&self, schema: &Schema, server: &str) -> String {
        schema.url.replacen(
            &format!(":{}", relay_port_of(server)),
            &format!(":{}", self.port),
            1,
        )
    }
}

static LOST: Mutex<Vec<RunId>> = Mutex::new(Vec::new());

fn record_loss(run: RunId) {
    LOST.lock().expect("lost").push(run);
}

/// Takes a lease through a relay, lets renewals carry it past its (shortened) expiry, then breaks
/// the relay with `fail`: the holder must give up before the lease expires in the store.
fn holder_stops_before_expiry(id: u128, fail: impl Fn(&Relay)) {
    let Some(schema) = schema() else { return };
    let server = std::env::var("CORDON_TEST_POSTGRES").expect("server");
    let relay = Relay::start(&server);
    cordon_store::set_lease_times(LeaseTimes {
        expiry: Duration::from_secs(3),
        renew_every: Duration::from_millis(200),
        give_up: Duration::from_millis(1500),
    });
    cordon_store::on_lease_lost(record_loss);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(
        &StateDir::new(dir.path().join("state")).with_store(Some(relay.url(&schema, &server))),
    )
    .expect("open");
    // (Each caller its own run: the record of losses is the process's.)
    let a = run(&store, id);
    let lease = store.lock_run(a).expect("lease");
    let live = || {
        schema.sql(&format!(
            "SELECT 1 FROM leases WHERE run = '{a}' AND expires > now()"
        ))
    };
    // Renewals carry the lease past its 3 s expiry (control).
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(live(), Ok(1));
    assert!(!LOST.lock().expect("lost").contains(&a));
    fail(&relay);
    let broken = Instant::now();
    while !LOST.lock().expect("lost").contains(&a) {
        assert!(
            broken.elapsed() < Duration::from_secs(20),
            "the loss was never noticed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Given up after 1.5 s without a renewal, before the 3 s lease could expire.
    assert_eq!(
        live(),
        Ok(1),
        "still live in the store when the holder stopped"
    );
    let err = store.append(a, None, &error()).expect_err("lost");
    assert!(matches!(err, StoreError::LeaseLost(_)), "{err}");
    drop(lease);
    cordon_store::set_lease_times(LeaseTimes::default());
}

#[test]
fn a_holder_that_cannot_renew_stops_itself_before_its_lease_expires() {
    holder_stops_before_expiry(1, Relay::cut);
}

#[test]
fn a_holder_whose_store_stalls_stops_itself_before_its_lease_expires() {
    holder_stops_before_expiry(2, Relay::freeze);
}

#[test]
fn a_store_that_accepts_and_never_answers_is_given_up_on_at_the_call_timeout() {
    // Accepts every connection and says nothing, as a stalled server does.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().take(8) {
            held.push(stream);
        }
        std::thread::sleep(Duration::from_secs(60));
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let state = StateDir::new(dir.path().join("state"))
        .with_store(Some(format!("postgres://cordon@127.0.0.1:{port}/db")));
    let started = Instant::now();
    let err = Store::open(&state)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(started.elapsed() < Duration::from_secs(45), "bounded");
    assert!(err.contains("no answer within 15 s"), "{err}");
}

fn relay_port_of(url: &str) -> u16 {
    let config: postgres::Config = url.parse().expect("url");
    config.get_ports().first().copied().unwrap_or(5432)
}

#[test]
fn a_store_written_by_a_newer_cordon_is_refused() {
    let Some(fx) = fixture() else { return };
    fx.sql("UPDATE cordon_schema SET version = 99")
        .expect("bump");
    let err = Store::open(&fx.state)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("was written by a newer cordon (schema 99, this one knows up to 3); upgrade cordon or use another --store"), "{err}");
}

#[test]
fn machines_opening_a_fresh_store_at_once_migrate_it_once() {
    let Some(schema) = schema() else { return };
    let url = schema.url.clone();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            let url = url.clone();
            scope.spawn(move || {
                let dir = tempfile::tempdir().expect("tempdir");
                Store::open(&StateDir::new(dir.path().join("state")).with_store(Some(url)))
                    .expect("every opener succeeds");
            });
        }
    });
    assert_eq!(
        schema.sql("SELECT 1 FROM cordon_schema WHERE version = 3"),
        Ok(1)
    );
}

#[test]
fn a_password_in_the_url_is_refused_and_never_shown() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (url, want) in [
        (
            "postgres://cordon:hunter2@127.0.0.1:1/db",
            "the store URL `postgres://cordon@127.0.0.1:1/db` carries a password",
        ),
        (
            "postgres://cordon@127.0.0.1:1/db?password=hunter2",
            "the store URL `postgres://cordon@127.0.0.1:1/db` carries a password",
        ),
        (
            "mysql://cordon@127.0.0.1/db",
            "`mysql://cordon@127.0.0.1/db` is not a store URL this cordon can use (only postgres:// URLs name a shared store)",
        ),
    ] {
        let state = StateDir::new(dir.path().join("state")).with_store(Some(url.to_owned()));
        let err = Store::open(&state)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains(want), "{url}: {err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}

#[test]
fn an_unreachable_store_is_named_within_its_connect_timeout() {
    // A port nothing listens on: refused at once, with the store named and the fix.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let dir = tempfile::tempdir().expect("tempdir");
    let state = StateDir::new(dir.path().join("state"))
        .with_store(Some(format!("postgres://cordon@127.0.0.1:{port}/db")));
    let err = Store::open(&state)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.starts_with(&format!(
            "cannot use the store `postgres://cordon@127.0.0.1:{port}/db`: "
        )),
        "{err}"
    );
    assert!(
        err.ends_with(
            "check that the server is running and reachable (and, when it refused the login, \
             that $CORDON_STORE_PASSWORD_FILE or $PGPASSWORD holds the password)"
        ),
        "{err}"
    );
}

#[test]
fn a_store_that_restarts_fails_the_append_in_flight_once_and_is_reconnected_to() {
    let Some(schema) = schema() else { return };
    let server = std::env::var("CORDON_TEST_POSTGRES").expect("server");
    let relay = Relay::start(&server);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(
        &StateDir::new(dir.path().join("state")).with_store(Some(relay.url(&schema, &server))),
    )
    .expect("open");
    let a = run(&store, 1);
    store.append(a, None, &error()).expect("before the restart");
    relay.cut();
    let err = store
        .append(a, None, &error())
        .expect_err("the store is gone");
    assert!(
        err.to_string()
            .starts_with("cannot use the store `postgres://"),
        "{err}"
    );
    relay.heal();
    let after = store.append(a, None, &error()).expect("reconnected");
    // The failed append was not sent again behind the caller's back: the log has no gap and no
    // event the caller was told failed.
    assert_eq!(after.seq, 2);
    let seqs = crate::seqs(&store, a);
    assert_eq!(seqs, [1, 2]);
}
