//! Helpers for e2e/tests/sql_functions.rs: real PostgreSQL, MariaDB and SQLite from the
//! Debian packages ([`databases`]), IDs of a running standalone sidecar per layout with its
//! own `/decode` of each ([`sample`]), and running their command-line clients.
#![allow(dead_code)]

pub mod databases;
pub mod expect;
pub mod sample;

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How long one client run (a script of a few thousand statements) may take.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(300);

/// Runs `program args` with `stdin` as its input and returns its standard output; fails
/// with the end of its standard error when it exits non-zero or runs past `timeout`
/// (it is then killed).
pub fn run_client<S: AsRef<OsStr>>(
    program: &Path,
    args: &[S],
    stdin: &str,
    timeout: Duration,
) -> Result<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {}", program.display()))?;
    let mut input = child.stdin.take().context("stdin")?;
    let text = stdin.to_string();
    let writer = std::thread::spawn(move || input.write_all(text.as_bytes()));
    let mut stdout = child.stdout.take().context("stdout")?;
    let mut stderr = child.stderr.take().context("stderr")?;
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).map(|_| s)
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).map(|_| s)
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{} ran longer than {timeout:?}", program.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // A client that stops at the first error may leave part of its input unread.
    let _ = writer.join();
    let out = out_reader
        .join()
        .map_err(|_| anyhow::anyhow!("stdout reader panicked"))??;
    let err = err_reader
        .join()
        .map_err(|_| anyhow::anyhow!("stderr reader panicked"))??;
    if !status.success() {
        let tail: Vec<&str> = err.lines().rev().take(20).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!(
            "{} failed ({status}):\n{}",
            program.display(),
            tail.join("\n")
        );
    }
    Ok(out)
}

/// Waits up to `limit` for `ready` to succeed, failing at once when `alive` fails (the
/// server exited); the last error of `ready` is reported on timeout.
pub fn wait_until(
    what: &str,
    limit: Duration,
    alive: impl Fn() -> Result<()>,
    ready: impl Fn() -> Result<()>,
) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        alive()?;
        let attempt = ready();
        match attempt {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(e.context(format!("{what} not ready within {limit:?}")));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// One line of tab-separated client output as cells; the clients print SQL NULL as an
/// empty cell (psql, sqlite3) or `NULL` (mariadb), both read as `None`.
pub fn cells(line: &str) -> Vec<Option<&str>> {
    line.split('\t')
        .map(|c| (!c.is_empty() && c != "NULL").then_some(c))
        .collect()
}
