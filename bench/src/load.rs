//! The closed-loop load generator: N connections, each sending one request and waiting
//! for its answer before the next, for a fixed time after a warm-up. Every peer (kubeflake,
//! the bare hyper ceiling, Redis, PostgreSQL) is driven by this same loop, so differences
//! in the figures are the servers', not the clients'. HTTP and Redis peers are reached over
//! TCP or a Unix socket ([`Target`]); the loop is generic over the stream ([`Dial`]), so
//! both transports run the very same code.
//!
//! One piece (over 400 lines): one loop drives every peer, and its connection kinds (HTTP,
//! Redis, PostgreSQL) stay beside it so that what differs between peers is seen in one place.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use crate::http1::{self, ResponseError};
use crate::resp::{self, ReplyError};
use crate::stats::{Summary, new_histogram};
use crate::target::{Dial, Target};

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
    Http {
        addr: Target,
        path: String,
        ids_per_answer: u64,
    },
    Redis {
        addr: Target,
        key: String,
        op: RedisOp,
    },
    /// A prepared `SELECT nextval(...)` (over `generate_series(1, batch)` when batch > 1)
    /// over the unix socket in `socket_dir`.
    Postgres {
        socket_dir: PathBuf,
        port: u16,
        user: String,
        batch: u64,
    },
}

impl Peer {
    fn describe(&self) -> String {
        match self {
            Peer::Http {
                addr: Target::Tcp(addr),
                path,
                ..
            } => format!("http://{addr}{path}"),
            Peer::Http { addr, path, .. } => format!("GET {path} on {addr}"),
            Peer::Redis { addr, .. } => format!("redis {addr}"),
            Peer::Postgres {
                socket_dir, port, ..
            } => format!("postgres {}:{port}", socket_dir.display()),
        }
    }

    /// The address the load generator dials itself (PostgreSQL's client dials its own).
    fn target(&self) -> Option<&Target> {
        match self {
            Peer::Http { addr, .. } | Peer::Redis { addr, .. } => Some(addr),
            Peer::Postgres { .. } => None,
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

const SEQUENCE: &str = "kubeflake_bench_ids";

async fn connect<S: Dial>(peer: &Peer) -> Result<Conn<S>, LoadError> {
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
            addr,
            path,
            ids_per_answer,
        } => Ok(Conn::Http {
            stream: dial(addr).await?,
            request: http1::get_request(path),
            buf: Vec::with_capacity(64 * 1024),
            ids_per_answer: *ids_per_answer,
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
            socket_dir,
            port,
            user,
            batch,
        } => {
            let client = pg_client(socket_dir, *port, user, peer).await?;
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

/// A PostgreSQL session over the unix socket in `socket_dir`.
async fn pg_client(
    socket_dir: &std::path::Path,
    port: u16,
    user: &str,
    peer: &Peer,
) -> Result<tokio_postgres::Client, LoadError> {
    let (client, connection) = tokio_postgres::Config::new()
        .host_path(socket_dir)
        .port(port)
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

/// Reads until `buf` holds one whole HTTP answer; returns it and drops it from `buf`.
async fn read_answer<S: Dial>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    peer: &str,
) -> Result<u16, LoadError> {
    loop {
        match http1::parse_answer(buf) {
            Ok(Some(answer)) => {
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
            } => {
                stream.write_all(request).await.map_err(io)?;
                let status = read_answer(stream, buf, peer).await?;
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
    let Peer::Postgres {
        socket_dir,
        port,
        user,
        ..
    } = peer
    else {
        return Ok(());
    };
    pg_client(socket_dir, *port, user, peer)
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
    match peer.target() {
        Some(Target::Unix(_)) => run_over::<UnixStream>(peer, name, plan).await,
        // TCP; and PostgreSQL, whose client opens its own socket (the type goes unused).
        Some(Target::Tcp(_)) | None => run_over::<TcpStream>(peer, name, plan).await,
    }
}

/// [`run`] with the connections' stream type fixed.
async fn run_over<S: Dial>(peer: &Peer, name: &str, plan: Plan) -> Result<Summary, LoadError> {
    prepare_postgres(peer).await?;
    // Every connection is open before the clock starts.
    let mut conns = Vec::with_capacity(plan.connections);
    for _ in 0..plan.connections.max(1) {
        conns.push(connect::<S>(peer).await?);
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
