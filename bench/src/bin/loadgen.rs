//! `kubeflake-loadgen`: drives one peer (kubeflake, the hyper ceiling, Redis or
//! PostgreSQL) with N closed-loop connections and prints one JSON line per run.
//!
//! Example: `kubeflake-loadgen --connections 16 --secs 5 http --addr 127.0.0.1:7070 --path /id`
//! (or `--addr unix:/path/to/kubeflake.sock` for the same requests over a Unix socket;
//! `--addr` again spreads the connections over several servers in turn).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use kubeflake_bench::load::{self, Peer, PgServer, Plan, RedisOp};
use kubeflake_bench::target::{Target, Targets};

/// Closed-loop load on one ID server; prints a JSON summary line per run.
#[derive(Parser, Debug)]
#[command(about)]
struct Cli {
    /// Label of the peer in the output.
    #[arg(long, default_value = "peer")]
    name: String,
    /// Concurrent connections, each with one request in flight.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    connections: u64,
    /// Seconds of warm-up (requests not counted) before each run.
    #[arg(long, default_value_t = 1.0)]
    warmup_secs: f64,
    /// Seconds measured in each run (at most 600).
    #[arg(long, default_value_t = 5.0)]
    secs: f64,
    /// Runs, one JSON line each.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    runs: u64,
    /// Client threads (the rest of the machine is the server's).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    threads: u64,
    #[command(subcommand)]
    peer: PeerArgs,
}

#[derive(Subcommand, Debug)]
enum PeerArgs {
    /// Keep-alive HTTP/1.1 GETs (kubeflake or the ceiling server).
    Http {
        /// IP:PORT, or unix:/path/to/socket; repeat it to spread the connections over
        /// several servers in turn (all TCP or all unix:).
        #[arg(long, required = true)]
        addr: Vec<Target>,
        #[arg(long, default_value = "/id")]
        path: String,
        /// IDs in one 200 answer (the count of /ids?count=N).
        #[arg(long, default_value_t = 1)]
        ids_per_answer: u64,
        /// Fail unless every connection's values increase (a strict sequence's promise).
        #[arg(long)]
        increasing: bool,
    },
    /// Redis INCR / INCRBY, one round trip at a time per connection.
    Redis {
        /// IP:PORT, or unix:/path/to/socket (redis-server's `unixsocket`).
        #[arg(long)]
        addr: Target,
        #[arg(long, default_value = "kubeflake:bench")]
        key: String,
        /// incr | incrby:N (a block of N per call) | pipeline:N (N INCRs per round trip).
        #[arg(long, default_value = "incr", value_parser = parse_redis_op)]
        op: RedisOp,
    },
    /// PostgreSQL nextval() as a prepared statement, over a unix socket or TCP.
    Postgres {
        /// Directory holding the server's unix socket.
        #[arg(long, required_unless_present = "addr")]
        socket_dir: Option<PathBuf>,
        /// The socket's port number.
        #[arg(long, default_value_t = 5432, conflicts_with = "addr")]
        port: u16,
        /// IP:PORT of the server over TCP, instead of --socket-dir.
        #[arg(long, conflicts_with = "socket_dir")]
        addr: Option<SocketAddr>,
        #[arg(long, default_value = "postgres")]
        user: String,
        /// IDs per statement (nextval over generate_series when above 1).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        batch: u64,
    },
}

fn parse_redis_op(raw: &str) -> Result<RedisOp, String> {
    let count = |n: &str| match n.parse::<u64>() {
        Ok(n) if (1..=100_000).contains(&n) => Ok(n),
        _ => Err(format!(
            "{raw:?}: N must be a whole number from 1 to 100000"
        )),
    };
    match raw.split_once(':') {
        None if raw == "incr" => Ok(RedisOp::Incr),
        Some(("incrby", n)) => count(n).map(RedisOp::IncrBy),
        Some(("pipeline", n)) => count(n).map(RedisOp::PipelinedIncr),
        _ => Err(format!(
            "unknown op {raw:?}; use incr, incrby:N or pipeline:N"
        )),
    }
}

fn seconds(flag: &str, secs: f64) -> Duration {
    if !(0.0..=600.0).contains(&secs) {
        eprintln!("kubeflake-loadgen: error: --{flag} must be between 0 and 600, got {secs}");
        std::process::exit(2);
    }
    Duration::from_secs_f64(secs)
}

fn main() {
    let cli = Cli::parse();
    let plan = Plan {
        connections: cli.connections as usize,
        warmup: seconds("warmup-secs", cli.warmup_secs),
        measure: seconds("secs", cli.secs),
    };
    let peer = match cli.peer {
        PeerArgs::Http {
            addr,
            path,
            ids_per_answer,
            increasing,
        } => Peer::Http {
            addrs: Targets::new(addr).unwrap_or_else(|e| {
                eprintln!("kubeflake-loadgen: error: --addr: {e}");
                std::process::exit(2);
            }),
            path,
            ids_per_answer,
            increasing,
        },
        PeerArgs::Redis { addr, key, op } => Peer::Redis { addr, key, op },
        PeerArgs::Postgres {
            socket_dir,
            port,
            addr,
            user,
            batch,
        } => Peer::Postgres {
            server: match (addr, socket_dir) {
                (Some(addr), _) => PgServer::Tcp(addr),
                (None, Some(dir)) => PgServer::Socket { dir, port },
                // clap requires one of the two
                (None, None) => unreachable!("--socket-dir or --addr is required"),
            },
            user,
            batch,
        },
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.threads as usize)
        .enable_all()
        .build()
        .expect("can start the tokio runtime");
    for _ in 0..cli.runs {
        match runtime.block_on(load::run(&peer, &cli.name, plan)) {
            Ok(summary) => println!(
                "{}",
                serde_json::to_string(&summary).expect("a summary serializes")
            ),
            Err(e) => {
                eprintln!("kubeflake-loadgen: error: {e}");
                std::process::exit(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_ops_are_parsed_and_bad_ones_name_the_accepted_forms() {
        assert_eq!(parse_redis_op("incr"), Ok(RedisOp::Incr));
        assert_eq!(parse_redis_op("incrby:1000"), Ok(RedisOp::IncrBy(1000)));
        assert_eq!(
            parse_redis_op("pipeline:10"),
            Ok(RedisOp::PipelinedIncr(10))
        );
        assert!(
            parse_redis_op("pipeline:0")
                .unwrap_err()
                .contains("from 1 to")
        );
        assert!(parse_redis_op("get").unwrap_err().contains("incrby:N"));
    }

    #[test]
    fn postgres_is_reached_over_its_socket_dir_or_tcp_but_not_both_nor_neither() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(["kubeflake-loadgen", "postgres"].iter().chain(args))
        };
        assert!(parse(&["--socket-dir", "/tmp/pg"]).is_ok());
        assert!(parse(&["--addr", "127.0.0.1:5432"]).is_ok());
        let both = parse(&["--socket-dir", "/tmp/pg", "--addr", "127.0.0.1:5432"]);
        assert!(both.unwrap_err().to_string().contains("--addr"));
        let neither = parse(&[]).unwrap_err().to_string();
        assert!(neither.contains("--socket-dir"), "{neither}");
    }

    #[test]
    fn http_takes_several_addresses() {
        let cli = Cli::try_parse_from([
            "kubeflake-loadgen",
            "http",
            "--addr",
            "127.0.0.1:1",
            "--addr",
            "127.0.0.1:2",
            "--increasing",
        ])
        .unwrap();
        let PeerArgs::Http {
            addr, increasing, ..
        } = cli.peer
        else {
            panic!("not http: {:?}", cli.peer);
        };
        assert_eq!(addr.len(), 2);
        assert!(increasing);
    }
}
