//! The closed-loop load generator: N connections, each sending one request and waiting
//! for its answer before the next, for a fixed time after a warm-up. Every peer (kubeflake,
//! the bare hyper ceiling, Redis, PostgreSQL) is driven by this same loop, so differences
//! in the figures are the servers', not the clients'. HTTP and Redis peers are reached over
//! TCP or a Unix socket ([`Target`]); the loop is generic over the stream ([`Dial`]), so
//! both transports run the very same code.
//!
//! One piece (over 400 lines): one loop drives every peer, and its connection kinds (HTTP,
//! Redis, PostgreSQL) stay beside it so that what differs between peers is seen in one place.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use crate::http1::{self, ResponseError};
use crate::resp::{self, ReplyError};
use crate::stats::{Summary, new_histogram};
use crate::target::{Dial, Target, Targets};

/// A request that takes longer than this ends the run with an error instead of a hang.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a run could not be completed.
#[derive(Debug, Error)]
pub enum LoadError {
    #[error("cannot connect to {peer}: {source}; is the server running on that address?")]
    Connect {
        peer: String,
        source: std::io::Error,
    },
    #[error("connection to {peer} failed mid-run: {source}")]
    Io {
        peer: String,
        source: std::io::Error,
    },
    #[error("{peer} closed the connection mid-run")]
    Closed { peer: String },
    #[error("no answer from {peer} within {REQUEST_TIMEOUT:?}")]
    Timeout { peer: String },
    #[error("bad HTTP answer from {peer}: {source}")]
    Http { peer: String, source: ResponseError },
    #[error("{peer} answered {body:?}, not a value (asked to check that values increase)")]
    NotAValue { peer: String, body: String },
    #[error(
        "{peer} answered {value} after {previous} on the same connection: the values went backwards"
    )]
    NotIncreasing {
        peer: String,
        previous: u64,
        value: u64,
    },
    #[error("bad reply from {peer}: {source}")]
    Redis { peer: String, source: ReplyError },
    #[error("PostgreSQL at {peer}: {source}")]
    Postgres {
        peer: String,
        source: tokio_postgres::Error,
    },
    #[error("a connection task of {peer} panicked")]
    Task { peer: String },
}

/// What one Redis round trip does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisOp {
    /// `INCR key`: one ID per round trip.
    Incr,
    /// `INCRBY key n`: a block of n IDs per round trip (the caller owns `v-n+1..=v`).
    IncrBy(u64),
    /// n `INCR key` commands written at once, n replies read: n IDs per round trip.
    PipelinedIncr(u64),
}

/// The server under load and how one request looks.
#[derive(Debug, Clone)]
pub enum Peer {
    /// `GET path` on keep-alive HTTP/1.1; a 200 answer carries `ids_per_answer` IDs.
    /// Connections are spread over `addrs` in turn. With `increasing`, every 200 body must
    /// be one value above the connection's previous one (what a strict sequence promises a
    /// client that waits for each answer), or the run ends with an error.
    Http {
        addrs: Targets,
        path: String,
        ids_per_answer: u64,
        increasing: bool,
    },
    Redis {
        addr: Target,
        key: String,
        op: RedisOp,
    },
    /// A prepared `SELECT nextval(...)` (over `generate_series(1, batch)` when batch > 1).
    Postgres {
        server: PgServer,
        user: String,
        batch: u64,
    },
}

/// Where a PostgreSQL server listens.
#[derive(Debug, Clone)]
pub enum PgServer {
    /// Its Unix socket: the directory holding it, and the port in its name.
    Socket {
        dir: PathBuf,
        port: u16,
    },
    Tcp(SocketAddr),
}

impl Peer {
    fn describe(&self) -> String {
        match self {
            Peer::Http { addrs, path, .. } => format!("GET {path} on {addrs}"),
            Peer::Redis { addr, .. } => format!("redis {addr}"),
            Peer::Postgres {
                server: PgServer::Socket { dir, port },
                ..
            } => format!("postgres {}:{port}", dir.display()),
            Peer::Postgres {
                server: PgServer::Tcp(addr),
                ..
            } => format!("postgres {addr}"),
        }
    }

    /// Whether the load generator's own connections are Unix sockets (PostgreSQL's client
    /// opens its own, so there it does not matter).
    fn is_unix(&self) -> bool {
        match self {
            Peer::Http { addrs, .. } => addrs.is_unix(),
            Peer::Redis { addr, .. } => addr.is_unix(),
            Peer::Postgres { .. } => false,
        }
    }
}

/// How long and how wide one run is.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub connections: usize,
    pub warmup: Duration,
    pub measure: Duration,
}

/// What one connection measured.
struct Tally {
    latencies: Histogram<u64>,
    ids: u64,
    refused: u64,
}

/// One open connection over a stream of type `S`, ready to make requests.
enum Conn<S> {
    Http {
        stream: S,
        request: Vec<u8>,
        buf: Vec<u8>,
        ids_per_answer: u64,
        /// With the `increasing` check: the last value this connection was given.
        last: Option<Last>,
    },
    Redis {
        stream: S,
        request: Vec<u8>,
        replies: u64,
        ids_per_round: u64,
        buf: Vec<u8>,
    },
    Postgres {
        client: tokio_postgres::Client,
        statement: tokio_postgres::Statement,
    },
}

/// The `increasing` check's state: the value last answered on one connection, if any yet.
#[derive(Debug, Clone, Copy, Default)]
struct Last(Option<u64>);

impl Last {
    /// Takes the next 200 body; fails unless it is a value above the last one.
    fn check(&mut self, body: &[u8], peer: &str) -> Result<(), LoadError> {
        let text = String::from_utf8_lossy(body);
        let value: u64 = text.trim().parse().map_err(|_| LoadError::NotAValue {
            peer: peer.to_string(),
            body: text.to_string(),
        })?;
        if let Some(previous) = self.0
            && value <= previous
        {
            return Err(LoadError::NotIncreasing {
                peer: peer.to_string(),
                previous,
                value,
            });
        }
        self.0 = Some(value);
        Ok(())
    }
}

const SEQUENCE: &str = "kubeflake_bench_ids";

/// Opens connection number `i` to `peer`.
async fn connect<S: Dial>(peer: &Peer, i: usize) -> Result<Conn<S>, LoadError> {
    let name = peer.describe();
    let dial = |addr: &Target| {
        let name = name.clone();
        let addr = addr.clone();
        async move {
            S::dial(&addr)
                .await
                .map_err(|source| LoadError::Connect { peer: name, source })
        }
    };
    match peer {
        Peer::Http {
            addrs,
            path,
            ids_per_answer,
            increasing,
        } => Ok(Conn::Http {
            stream: dial(addrs.for_connection(i)).await?,
            request: http1::get_request(path),
            buf: Vec::with_capacity(64 * 1024),
            ids_per_answer: *ids_per_answer,
            last: increasing.then(Last::default),
        }),
        Peer::Redis { addr, key, op } => {
            let (request, replies, ids_per_round) = match op {
                RedisOp::Incr => (resp::command(&["INCR", key]), 1, 1),
                RedisOp::IncrBy(n) => (resp::command(&["INCRBY", key, &n.to_string()]), 1, *n),
                RedisOp::PipelinedIncr(n) => {
                    (resp::command(&["INCR", key]).repeat(*n as usize), *n, *n)
                }
            };
            Ok(Conn::Redis {
                stream: dial(addr).await?,
                request,
                replies,
                ids_per_round,
                buf: Vec::with_capacity(64 * 1024),
            })
        }
        Peer::Postgres {
            server,
            user,
            batch,
        } => {
            let client = pg_client(server, user, peer).await?;
            let sql = if *batch > 1 {
                format!("SELECT nextval('{SEQUENCE}') FROM generate_series(1, {batch})")
            } else {
                format!("SELECT nextval('{SEQUENCE}')")
            };
            let statement = client
                .prepare(&sql)
                .await
                .map_err(|source| LoadError::Postgres { peer: name, source })?;
            Ok(Conn::Postgres { client, statement })
        }
    }
}

/// A PostgreSQL session with `server`.
async fn pg_client(
    server: &PgServer,
    user: &str,
    peer: &Peer,
) -> Result<tokio_postgres::Client, LoadError> {
    let mut config = tokio_postgres::Config::new();
    match server {
        PgServer::Socket { dir, port } => config.host_path(dir).port(*port),
        PgServer::Tcp(addr) => config.host(addr.ip().to_string()).port(addr.port()),
    };
    let (client, connection) = config
        .user(user)
        .dbname("postgres")
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(|source| LoadError::Postgres {
            peer: peer.describe(),
            source,
        })?;
    tokio::spawn(async move {
        // Ends when the client is dropped; errors surface on the client's own calls.
        let _ = connection.await;
    });
    Ok(client)
}

/// Reads until `buf` holds one whole HTTP answer; returns its status and drops it from
/// `buf`. With `last`, a 200 answer's body must be a value above the last one.
async fn read_answer<S: Dial>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    last: Option<&mut Last>,
    peer: &str,
) -> Result<u16, LoadError> {
    loop {
        match http1::parse_answer(buf) {
            Ok(Some(answer)) => {
                if let Some(last) = last
                    && answer.status == 200
                {
                    last.check(&buf[answer.body_start..answer.len], peer)?;
                }
                buf.drain(..answer.len);
                return Ok(answer.status);
            }
            Ok(None) => {}
            Err(source) => {
                return Err(LoadError::Http {
                    peer: peer.to_string(),
                    source,
                });
            }
        }
        read_more(stream, buf, peer).await?;
    }
}

async fn read_more<S: Dial>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    peer: &str,
) -> Result<(), LoadError> {
    if buf.capacity() - buf.len() < 16 * 1024 {
        buf.reserve(64 * 1024);
    }
    let n = stream.read_buf(buf).await.map_err(|source| LoadError::Io {
        peer: peer.to_string(),
        source,
    })?;
    if n == 0 {
        return Err(LoadError::Closed {
            peer: peer.to_string(),
        });
    }
    Ok(())
}

impl<S: Dial> Conn<S> {
    /// Makes one request; returns the IDs it got (0 for a refusal).
    async fn round_trip(&mut self, peer: &str) -> Result<u64, LoadError> {
        let io = |source| LoadError::Io {
            peer: peer.to_string(),
            source,
        };
        match self {
            Conn::Http {
                stream,
                request,
                buf,
                ids_per_answer,
                last,
            } => {
                stream.write_all(request).await.map_err(io)?;
                let status = read_answer(stream, buf, last.as_mut(), peer).await?;
                Ok(if status == 200 { *ids_per_answer } else { 0 })
            }
            Conn::Redis {
                stream,
                request,
                replies,
                ids_per_round,
                buf,
            } => {
                stream.write_all(request).await.map_err(io)?;
                // Replies are consumed with a cursor and dropped from the buffer once, so
                // a pipeline of 1000 costs the client one pass, not 1000 buffer shifts.
                let (mut got, mut at) = (0, 0);
                while got < *replies {
                    match resp::integer_reply(&buf[at..]) {
                        Ok(Some((_, used))) => {
                            at += used;
                            got += 1;
                        }
                        Ok(None) => read_more(stream, buf, peer).await?,
                        Err(source) => {
                            return Err(LoadError::Redis {
                                peer: peer.to_string(),
                                source,
                            });
                        }
                    }
                }
                buf.drain(..at);
                Ok(*ids_per_round)
            }
            Conn::Postgres { client, statement } => {
                let rows =
                    client
                        .query(&*statement, &[])
                        .await
                        .map_err(|source| LoadError::Postgres {
                            peer: peer.to_string(),
                            source,
                        })?;
                Ok(rows.len() as u64)
            }
        }
    }
}

async fn drive<S: Dial>(
    mut conn: Conn<S>,
    peer: String,
    start: Instant,
    plan: Plan,
) -> Result<Tally, LoadError> {
    let measure_from = start + plan.warmup;
    let end = measure_from + plan.measure;
    let mut tally = Tally {
        latencies: new_histogram(),
        ids: 0,
        refused: 0,
    };
    loop {
        let sent = Instant::now();
        if sent >= end {
            return Ok(tally);
        }
        let ids = tokio::time::timeout(REQUEST_TIMEOUT, conn.round_trip(&peer))
            .await
            .map_err(|_| LoadError::Timeout { peer: peer.clone() })??;
        if sent >= measure_from {
            if ids == 0 {
                tally.refused += 1;
            } else {
                let ns = sent.elapsed().as_nanos().max(1) as u64;
                tally.latencies.saturating_record(ns);
                tally.ids += ids;
            }
        }
    }
}

/// Creates the PostgreSQL sequence the peer draws from (once, before a run).
async fn prepare_postgres(peer: &Peer) -> Result<(), LoadError> {
    let Peer::Postgres { server, user, .. } = peer else {
        return Ok(());
    };
    pg_client(server, user, peer)
        .await?
        .batch_execute(&format!("CREATE SEQUENCE IF NOT EXISTS {SEQUENCE}"))
        .await
        .map_err(|source| LoadError::Postgres {
            peer: peer.describe(),
            source,
        })
}

/// Runs `plan` against `peer`, labelled `name` in the summary.
pub async fn run(peer: &Peer, name: &str, plan: Plan) -> Result<Summary, LoadError> {
    match peer.is_unix() {
        true => run_over::<UnixStream>(peer, name, plan).await,
        // TCP; and PostgreSQL, whose client opens its own socket (the type goes unused).
        false => run_over::<TcpStream>(peer, name, plan).await,
    }
}

/// [`run`] with the connections' stream type fixed.
async fn run_over<S: Dial>(peer: &Peer, name: &str, plan: Plan) -> Result<Summary, LoadError> {
    prepare_postgres(peer).await?;
    // Every connection is open before the clock starts.
    let mut conns = Vec::with_capacity(plan.connections);
    for i in 0..plan.connections.max(1) {
        conns.push(connect::<S>(peer, i).await?);
    }
    let start = Instant::now();
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|conn| tokio::spawn(drive(conn, peer.describe(), start, plan)))
        .collect();
    let mut latencies = new_histogram();
    let (mut ids, mut refused) = (0, 0);
    for task in tasks {
        let tally = task.await.map_err(|_| LoadError::Task {
            peer: peer.describe(),
        })??;
        latencies
            .add(&tally.latencies)
            .expect("histograms share their bounds");
        ids += tally.ids;
        refused += tally.refused;
    }
    Ok(Summary::new(
        name.to_string(),
        plan.connections.max(1),
        plan.measure.as_secs_f64(),
        &latencies,
        ids,
        refused,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_increasing_check_takes_rising_values_and_names_one_that_went_back() {
        let mut last = Last::default();
        last.check(b"7\n", "p").unwrap();
        last.check(b"8", "p").unwrap();
        let err = last.check(b"8\n", "p").unwrap_err().to_string();
        assert!(
            err.contains("8 after 8") && err.contains("backwards"),
            "{err}"
        );
        let err = last.check(b"{\"error\":1}", "p").unwrap_err().to_string();
        assert!(err.contains("not a value"), "{err}");
    }
}
