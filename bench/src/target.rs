//! Where the load generator connects: a TCP address on loopback or a Unix domain socket,
//! written `127.0.0.1:7070` or `unix:/path/to/socket`. The request loop is the same for
//! both ([`Dial`] opens either kind of stream), so a socket-against-TCP comparison
//! measures the transports, not two clients.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};

/// The prefix that marks a Unix socket path.
const UNIX_PREFIX: &str = "unix:";

/// A server address: TCP or a Unix domain socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl FromStr for Target {
    type Err = String;

    fn from_str(raw: &str) -> Result<Target, String> {
        if let Some(path) = raw.strip_prefix(UNIX_PREFIX) {
            if path.is_empty() {
                return Err(format!(
                    "{raw:?}: no socket path after {UNIX_PREFIX:?}; write unix:/path/to/socket"
                ));
            }
            return Ok(Target::Unix(PathBuf::from(path)));
        }
        raw.parse::<SocketAddr>().map(Target::Tcp).map_err(|_| {
            format!("{raw:?} is neither IP:PORT (e.g. 127.0.0.1:7070) nor unix:/path/to/socket")
        })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Tcp(addr) => write!(f, "{addr}"),
            Target::Unix(path) => write!(f, "{UNIX_PREFIX}{}", path.display()),
        }
    }
}

/// The servers one run spreads its connections over: at least one, all of one kind (TCP
/// or Unix socket), so that one stream type serves every connection. Connection `i` dials
/// the `i mod n`-th, so 16 connections over 4 targets are 4 on each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Targets(Vec<Target>);

impl Targets {
    pub fn new(targets: Vec<Target>) -> Result<Targets, String> {
        let Some(first) = targets.first() else {
            return Err("no address: give at least one".to_string());
        };
        if let Some(other) = targets.iter().find(|t| t.is_unix() != first.is_unix()) {
            return Err(format!(
                "{first} and {other} are of two kinds: give only TCP or only unix: addresses"
            ));
        }
        Ok(Targets(targets))
    }

    /// What connection `i` dials.
    pub fn for_connection(&self, i: usize) -> &Target {
        &self.0[i % self.0.len()]
    }

    /// Whether these are Unix sockets (else TCP addresses).
    pub fn is_unix(&self) -> bool {
        self.0[0].is_unix()
    }
}

impl From<Target> for Targets {
    fn from(target: Target) -> Targets {
        Targets(vec![target])
    }
}

impl fmt::Display for Targets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, target) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{target}")?;
        }
        Ok(())
    }
}

impl Target {
    pub fn is_unix(&self) -> bool {
        matches!(self, Target::Unix(_))
    }
}

/// A byte stream the load generator can open to a [`Target`] of its own kind.
pub trait Dial: AsyncRead + AsyncWrite + Unpin + Send + Sized + 'static {
    fn dial(target: &Target) -> impl Future<Output = io::Result<Self>> + Send;
}

fn wrong_kind(target: &Target, wanted: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{target} is not a {wanted} address"),
    )
}

impl Dial for TcpStream {
    async fn dial(target: &Target) -> io::Result<TcpStream> {
        let Target::Tcp(addr) = target else {
            return Err(wrong_kind(target, "TCP"));
        };
        let stream = TcpStream::connect(addr).await?;
        // One small request at a time: send it now (the servers set it too).
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}

impl Dial for UnixStream {
    async fn dial(target: &Target) -> io::Result<UnixStream> {
        let Target::Unix(path) = target else {
            return Err(wrong_kind(target, "Unix socket"));
        };
        UnixStream::connect(path).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_and_unix_targets_parse_and_print_as_written() {
        for raw in ["127.0.0.1:7070", "[::1]:80", "unix:/tmp/k/kubeflake.sock"] {
            let target: Target = raw.parse().unwrap();
            assert_eq!(target.to_string(), raw);
        }
        assert_eq!(
            "unix:/run/a.sock".parse::<Target>(),
            Ok(Target::Unix(PathBuf::from("/run/a.sock")))
        );
    }

    #[test]
    fn a_bad_target_names_both_accepted_forms() {
        let err = "localhost".parse::<Target>().unwrap_err();
        assert!(err.contains("IP:PORT") && err.contains("unix:/"), "{err}");
        assert!(
            "unix:"
                .parse::<Target>()
                .unwrap_err()
                .contains("no socket path")
        );
    }

    #[test]
    fn connections_are_spread_over_targets_of_one_kind_in_turn() {
        let parse = |raw: &[&str]| -> Result<Targets, String> {
            Targets::new(raw.iter().map(|r| r.parse().unwrap()).collect())
        };
        let four = parse(&["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"]).unwrap();
        let ports: Vec<String> = (0..6).map(|i| four.for_connection(i).to_string()).collect();
        assert_eq!(ports[0], "127.0.0.1:1");
        assert_eq!(ports[3], "127.0.0.1:4");
        assert_eq!(ports[4], "127.0.0.1:1");
        assert_eq!(
            four.to_string(),
            "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,127.0.0.1:4"
        );
        assert!(parse(&[]).unwrap_err().contains("at least one"));
        let mixed = parse(&["127.0.0.1:1", "unix:/tmp/a.sock"]).unwrap_err();
        assert!(mixed.contains("only TCP or only unix"), "{mixed}");
    }

    #[tokio::test]
    async fn a_stream_of_one_kind_refuses_a_target_of_the_other() {
        let unix = Target::Unix(PathBuf::from("/nonexistent/x.sock"));
        let err = TcpStream::dial(&unix).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        let tcp: Target = "127.0.0.1:9".parse().unwrap();
        let err = UnixStream::dial(&tcp).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
