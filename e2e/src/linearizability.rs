//! Checking that values are linearizable: strictly increasing in real-time order, across
//! every sidecar, and never reused (what a strict sequence promises, docs/segment.md).
//!
//! - [`History`] records operations from many threads: when each was called and when it
//!   returned (nanoseconds from one [`Instant`]), and its values as a run `[lo, hi]`.
//! - [`check`] is a quick exact check: no two runs share a value, and whenever an
//!   operation returned before another was called, the later one's values are above the
//!   earlier one's. It returns the first violation found.
//! - [`porcupine`] writes the history as JSON lines and runs `kubeflake-lincheck`, a
//!   porcupine checker (`e2e/linearizability/`), as a second, independent opinion.
//!
//! Only operations whose reply was received are recorded: a refused or broken request
//! returned no value anyone could have seen, so it constrains nothing.

use std::collections::HashMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::bin_dir::{repo_file, script_output_dir};

/// Overrides the checker binary instead of running `e2e/linearizability/build.sh`.
pub const LINCHECK_ENV: &str = "KUBEFLAKE_LINCHECK";

/// How long porcupine may search before it answers "unknown".
pub const PORCUPINE_TIMEOUT_SECS: u64 = 60;

/// One completed operation: a run of values `[lo, hi]` (one value: `lo == hi`) returned
/// to `client`, called at `call` and returned at `ret` (ns from the history's origin).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    pub client: u32,
    pub call: u64,
    pub ret: u64,
    pub lo: u64,
    pub hi: u64,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |ns: u64| ns as f64 / 1e6;
        if self.lo == self.hi {
            write!(f, "{}", self.lo)?;
        } else {
            write!(f, "[{}, {}]", self.lo, self.hi)?;
        }
        write!(
            f,
            " to client {}, called at {:.3} ms, returned at {:.3} ms",
            self.client,
            ms(self.call),
            ms(self.ret)
        )
    }
}

/// A call in flight: its client and when it was called.
#[derive(Clone, Copy, Debug)]
#[must_use = "record the operation with History::returned once its reply is read"]
pub struct Call {
    client: u32,
    at: u64,
}

/// A thread-safe recorder of operations, with one clock for every thread.
#[derive(Debug)]
pub struct History {
    origin: Instant,
    ops: Mutex<Vec<Op>>,
}

impl Default for History {
    fn default() -> History {
        History::new()
    }
}

impl History {
    pub fn new() -> History {
        History {
            origin: Instant::now(),
            ops: Mutex::new(Vec::new()),
        }
    }

    /// Nanoseconds since the history began.
    pub fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// Stamps a call; take it right before the request is sent.
    pub fn call(&self, client: u32) -> Call {
        Call {
            client,
            at: self.now(),
        }
    }

    /// Records a call that returned `values` (in the order received), stamping the return
    /// now: call it right after the whole reply was read. The run is `[first, last]`. A
    /// reply whose values do not strictly increase is recorded so that [`check`] reports
    /// it: as `lo > hi`, or (all values equal) as two operations with that value. An empty
    /// reply records nothing.
    pub fn returned(&self, call: Call, values: &[u64]) {
        let ret = self.now();
        let (Some(&first), Some(&last)) = (values.first(), values.last()) else {
            return;
        };
        let op = |lo, hi| Op {
            client: call.client,
            call: call.at,
            ret,
            lo,
            hi,
        };
        let mut ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        if values.windows(2).all(|w| w[0] < w[1]) {
            ops.push(op(first, last));
            return;
        }
        let (min, max) = values
            .iter()
            .fold((u64::MAX, 0), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
        if max > min {
            ops.push(op(max, min));
        } else {
            ops.extend([op(min, min), op(min, min)]);
        }
    }

    /// Every operation recorded so far, in the order they were recorded.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn len(&self) -> usize {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The first violation [`check`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// The values of one reply did not increase (recorded as `lo > hi`).
    NotIncreasingWithin(Op),
    /// Two operations returned a common value (or their runs interleave, so that no order
    /// puts one run entirely above the other).
    Overlap { first: Op, second: Op },
    /// `later` was called after `earlier` had returned, yet its values are not above.
    RealTimeOrder { earlier: Op, later: Op },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::NotIncreasingWithin(op) => {
                write!(f, "the values of one reply do not increase: {op}")
            }
            Violation::Overlap { first, second }
                if first.lo == first.hi && second.lo == second.hi && first.lo == second.lo =>
            {
                write!(
                    f,
                    "value {} was returned twice: {first}; {second}",
                    first.lo
                )
            }
            Violation::Overlap { first, second } => write!(
                f,
                "two operations share values (a value returned twice, or runs that interleave): {first}; {second}"
            ),
            Violation::RealTimeOrder { earlier, later } => write!(
                f,
                "not linearizable: {later} was called after {earlier} had returned, yet its values are not above"
            ),
        }
    }
}

impl std::error::Error for Violation {}

/// Checks that the operations are linearizable as a strict sequence, in O(n log n).
///
/// Two conditions, both necessary: whenever an operation was called after another had
/// returned, its values are above the other's (checked first: a sweep in call order
/// keeping the highest run among the operations returned so far); and no two runs share a
/// value or interleave (ordered by `lo`, each starts above the previous one's `hi`).
/// Together they are sufficient: with disjoint runs the order by `lo` is a
/// linearization, and it respects real time. Intervals are closed: an operation called at
/// the very nanosecond another returned counts as concurrent with it.
pub fn check(ops: &[Op]) -> Result<(), Violation> {
    if let Some(op) = ops.iter().find(|o| o.lo > o.hi) {
        return Err(Violation::NotIncreasingWithin(*op));
    }
    let mut by_call: Vec<&Op> = ops.iter().collect();
    by_call.sort_by_key(|o| o.call);
    let mut by_ret: Vec<&Op> = ops.iter().collect();
    by_ret.sort_by_key(|o| o.ret);
    // The operation with the highest values among those that returned before the
    // current call.
    let mut highest: Option<&Op> = None;
    let mut returned = by_ret.iter().peekable();
    for later in by_call {
        while let Some(earlier) = returned.next_if(|o| o.ret < later.call) {
            if highest.is_none_or(|h| earlier.hi > h.hi) {
                highest = Some(earlier);
            }
        }
        if let Some(earlier) = highest
            && later.lo <= earlier.hi
        {
            return Err(Violation::RealTimeOrder {
                earlier: *earlier,
                later: *later,
            });
        }
    }
    let mut by_lo: Vec<&Op> = ops.iter().collect();
    by_lo.sort_by_key(|o| (o.lo, o.hi));
    for w in by_lo.windows(2) {
        if w[1].lo <= w[0].hi {
            return Err(Violation::Overlap {
                first: *w[0],
                second: *w[1],
            });
        }
    }
    Ok(())
}

/// Porcupine's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The checker's report line ("linearizable: N operations ...").
    Linearizable(String),
    /// The witness lines and the verdict line.
    NotLinearizable(String),
    /// The search did not finish within its time or memory bound.
    Unknown(String),
}

/// The `kubeflake-lincheck` binary: `$KUBEFLAKE_LINCHECK`, else built (or found in the
/// cache) by `e2e/linearizability/build.sh`, once per process.
pub fn lincheck_binary() -> Result<PathBuf> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = match std::env::var_os(LINCHECK_ENV) {
            Some(path) => PathBuf::from(path),
            None => script_output_dir(&repo_file("e2e/linearizability/build.sh"))
                .map_err(|e| format!("{e:#}"))?,
        };
        if bin.is_file() {
            Ok(bin)
        } else {
            Err(format!(
                "{} is not a file ({LINCHECK_ENV} or build.sh)",
                bin.display()
            ))
        }
    })
    .clone()
    .map_err(anyhow::Error::msg)
}

/// Writes the operations as JSON lines to `history_file` and runs porcupine on them.
/// With `html`, porcupine also writes its visualization there when the history is not
/// linearizable (slower: it keeps every partial linearization).
pub fn porcupine(ops: &[Op], history_file: &Path, html: Option<&Path>) -> Result<Verdict> {
    write_history(ops, history_file)?;
    let bin = lincheck_binary()?;
    let mut command = Command::new(&bin);
    command
        .arg("-timeout")
        .arg(format!("{PORCUPINE_TIMEOUT_SECS}s"));
    if let Some(html) = html {
        command.arg("-html").arg(html);
    }
    let output = command
        .arg(history_file)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", bin.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
    match output.status.code() {
        Some(0) => Ok(Verdict::Linearizable(stdout)),
        Some(1) => Ok(Verdict::NotLinearizable(stdout)),
        Some(3) => Ok(Verdict::Unknown(stdout)),
        _ => bail!(
            "{} {} failed ({}): {stdout} {stderr}",
            bin.display(),
            history_file.display(),
            output.status
        ),
    }
}

/// One JSON object per line: `{"client":..,"call":..,"return":..,"lo":..,"hi":..}`.
pub fn write_history(ops: &[Op], path: &Path) -> Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    for o in ops {
        writeln!(
            out,
            r#"{{"client":{},"call":{},"return":{},"lo":{},"hi":{}}}"#,
            o.client, o.call, o.ret, o.lo, o.hi
        )?;
    }
    out.flush()?;
    Ok(())
}

/// Operations per client, for reports.
pub fn per_client(ops: &[Op]) -> HashMap<u32, usize> {
    let mut counts = HashMap::new();
    for o in ops {
        *counts.entry(o.client).or_insert(0) += 1;
    }
    counts
}

#[cfg(test)]
mod tests;
