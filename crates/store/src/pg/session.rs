//! One PostgreSQL session whose every wait has a deadline.
//!
//! rust-postgres' blocking client waits without end on a server that accepts the connection and
//! then says nothing (its connect timeout covers the TCP handshake only, and TCP timeouts only
//! see unacknowledged data — a stalled server's kernel still acknowledges). So the session is
//! tokio-postgres on a runtime of its own, and each call — the startup and authentication
//! exchange included — runs under `tokio::time::timeout`. A call that misses its deadline leaves
//! the session broken (the next call connects anew); it is never sent again, because it may have
//! been carried out just before its answer was lost.

use std::time::Duration;

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, NoTls, Row};

/// Why a call did not return an answer.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The server's or the client's own error.
    Pg(tokio_postgres::Error),
    /// No answer within the deadline.
    Timeout(Duration),
    /// The session's runtime could not be made.
    Runtime(std::io::Error),
}

impl Failure {
    pub(crate) fn as_db_error(&self) -> Option<&tokio_postgres::error::DbError> {
        match self {
            Failure::Pg(err) => err.as_db_error(),
            Failure::Timeout(_) | Failure::Runtime(_) => None,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Pg(err) => match err.as_db_error() {
                Some(db) => write!(f, "{} ({})", db.message(), db.code().code()),
                None => write!(f, "{err}"),
            },
            Failure::Timeout(limit) => write!(f, "no answer within {} s", limit.as_secs_f32()),
            Failure::Runtime(err) => write!(f, "cannot start the client's runtime: {err}"),
        }
    }
}

pub(crate) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A connected session.
pub(crate) struct Session {
    runtime: tokio::runtime::Runtime,
    client: Client,
    /// How long each call may wait.
    limit: Duration,
    broken: bool,
}

impl Session {
    /// Connects and authenticates within `limit`; each later call has `limit` too.
    pub(crate) fn connect(config: &Config, limit: Duration) -> Result<Session, Failure> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Failure::Runtime)?;
        let client = runtime.block_on(async {
            let (client, connection) = tokio::time::timeout(limit, config.connect(NoTls))
                .await
                .map_err(|_| Failure::Timeout(limit))?
                .map_err(Failure::Pg)?;
            // The connection's task runs whenever a call waits on this runtime.
            tokio::spawn(connection);
            Ok::<_, Failure>(client)
        })?;
        Ok(Session {
            runtime,
            client,
            limit,
            broken: false,
        })
    }

    /// Whether the session can take no more calls (closed by the server, or a call missed its
    /// deadline).
    pub(crate) fn is_closed(&self) -> bool {
        self.broken || self.client.is_closed()
    }

    /// The outcome of one call under the deadline; a missed deadline or a closed connection
    /// leaves the session broken.
    fn finish<T>(
        &mut self,
        outcome: Result<Result<T, tokio_postgres::Error>, tokio::time::error::Elapsed>,
    ) -> Result<T, Failure> {
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => {
                if err.is_closed() {
                    self.broken = true;
                }
                Err(Failure::Pg(err))
            }
            Err(_) => {
                self.broken = true;
                Err(Failure::Timeout(self.limit))
            }
        }
    }

    pub(crate) fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64, Failure> {
        let (limit, client) = (self.limit, &self.client);
        // (The deadline's timer is made inside the runtime, which owns the time driver.)
        let outcome = self.runtime.block_on(async move {
            tokio::time::timeout(limit, client.execute(sql, params)).await
        });
        self.finish(outcome)
    }

    pub(crate) fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, Failure> {
        let (limit, client) = (self.limit, &self.client);
        // (The deadline's timer is made inside the runtime, which owns the time driver.)
        let outcome = self
            .runtime
            .block_on(async move { tokio::time::timeout(limit, client.query(sql, params)).await });
        self.finish(outcome)
    }

    pub(crate) fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, Failure> {
        let (limit, client) = (self.limit, &self.client);
        // (The deadline's timer is made inside the runtime, which owns the time driver.)
        let outcome = self.runtime.block_on(async move {
            tokio::time::timeout(limit, client.query_one(sql, params)).await
        });
        self.finish(outcome)
    }

    pub(crate) fn query_opt(
        &mut self,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Option<Row>, Failure> {
        let (limit, client) = (self.limit, &self.client);
        // (The deadline's timer is made inside the runtime, which owns the time driver.)
        let outcome = self.runtime.block_on(async move {
            tokio::time::timeout(limit, client.query_opt(sql, params)).await
        });
        self.finish(outcome)
    }

    pub(crate) fn batch_execute(&mut self, sql: &str) -> Result<(), Failure> {
        let (limit, client) = (self.limit, &self.client);
        // (The deadline's timer is made inside the runtime, which owns the time driver.)
        let outcome = self
            .runtime
            .block_on(async move { tokio::time::timeout(limit, client.batch_execute(sql)).await });
        self.finish(outcome)
    }
}
