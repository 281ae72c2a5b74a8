//! `sql --dialect postgresql|mysql|sqlite`: SQL that decodes a sequence's IDs (time,
//! worker, datacenter, shard) and bounds them by time, for range queries, expression
//! indexes and time partitions (docs/sql.md).
//!
//! PostgreSQL gets IMMUTABLE SQL functions and MySQL/MariaDB DETERMINISTIC stored
//! functions, named `<prefix>_<what>`; SQLite has no CREATE FUNCTION, so it gets a view
//! over `--table` with the decoded fields and parameterised range queries ([`sqlite`]).
//! Every body is plain arithmetic built by [`expr`], inlined rather than calling the other
//! functions, so an index or partition bound on one does not depend on `search_path`.
//!
//! What the functions give depends on the key form:
//! - time-ordered (also `sequenceStart: Rotating`): the ID is its key, so the IDs of a time
//!   are one range: `<prefix>_min_id(t)` .. `<prefix>_max_id(t)`;
//! - `shardBits`: one range per shard, so the ID bounds take the shard;
//! - `bitReversed`: no range of IDs at all; only the key bounds, to query
//!   `<prefix>_key(id)` through an expression index.

mod expr;
mod functions;
mod sqlite;

use std::fmt::Write;

use kubeflake_crds::layout::{SequenceStart, Spread};
use kubeflake_crds::timebase::rfc3339;

use crate::cli::{Dialect, Format, SqlArgs};
use crate::source::Resolved;

pub use expr::Exprs;

/// A flag that does not fit the dialect, found after clap parsed the command line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SqlFlagError {
    #[error(
        "{flag} applies only to --dialect sqlite, which has no functions and needs a table to \
         decode; PostgreSQL and MySQL get functions of the ID: remove {flag}"
    )]
    TableWithFunctions { flag: &'static str },
    #[error("-o/--output does not apply to sql, which prints SQL text; remove it")]
    OutputFormat,
}

/// Checks what clap cannot: `--table`/`--column` only with SQLite, no `-o`.
pub fn check_flags(args: &SqlArgs, output: Format) -> Result<(), SqlFlagError> {
    if args.dialect != Dialect::Sqlite {
        if args.table.is_some() {
            return Err(SqlFlagError::TableWithFunctions { flag: "--table" });
        }
        if args.column.is_some() {
            return Err(SqlFlagError::TableWithFunctions { flag: "--column" });
        }
    }
    if output != Format::Table {
        return Err(SqlFlagError::OutputFormat);
    }
    Ok(())
}

/// The command line as typed (`kubectl kubeflake sql ...`), for the header.
pub fn command_line() -> String {
    // args_os: a file name need not be UTF-8 (std::env::args would panic on it).
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| shell_word(&a.to_string_lossy()))
        .collect();
    format!("kubectl kubeflake {}", args.join(" "))
}

fn shell_word(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// The SQL text for `args` and the resolved sequence.
pub fn generate(args: &SqlArgs, source: &Resolved, command: &str) -> String {
    let exprs = Exprs::new(args.dialect, &source.params);
    let mut out = header(args.dialect, source, command);
    match args.dialect {
        Dialect::Sqlite => {
            let table = args.table.as_deref().unwrap_or("ids");
            let column = args.column.as_deref().unwrap_or("id");
            sqlite::write(&mut out, &exprs, &args.prefix, table, column);
        }
        Dialect::Postgresql | Dialect::Mysql => functions::write(&mut out, &exprs, &args.prefix),
    }
    out
}

/// Width comment paragraphs are wrapped to.
const WIDTH: usize = 92;

/// `text` as SQL comment lines: each line a paragraph wrapped at [`WIDTH`], except lines
/// starting with two spaces (SQL examples), which are kept as they are.
fn comment(out: &mut String, text: &str) {
    for line in text.lines() {
        if line.starts_with("  ") || line.len() + 3 <= WIDTH {
            let _ = writeln!(out, "{}", format!("-- {line}").trim_end());
            continue;
        }
        let mut current = String::from("--");
        for word in line.split_whitespace() {
            if current.len() + 1 + word.len() > WIDTH && current != "--" {
                let _ = writeln!(out, "{current}");
                current = String::from("--");
            }
            current.push(' ');
            current.push_str(word);
        }
        let _ = writeln!(out, "{current}");
    }
}

fn header(dialect: Dialect, source: &Resolved, command: &str) -> String {
    let p = &source.params;
    let l = &p.layout;
    let name = match dialect {
        Dialect::Postgresql => "PostgreSQL 14 or later",
        Dialect::Mysql => "MySQL 8 or MariaDB 10.5 or later",
        Dialect::Sqlite => "SQLite 3.31 or later",
    };
    let mut out = String::new();
    let source_name = source.name.replace(['\n', '\r'], " ");
    let mut text = format!(
        "kubeflake: SQL for the IDs of {source_name} ({name}).\n\
         Generated by:\n  {command}\n\
         Layout: {}/{}/{}/{} bits (timestamp/datacenter/worker/sequence), {} bits in all; time \
         unit {}; epoch {}; datacenterId {}.\n",
        l.timestamp_bits(),
        l.datacenter_bits(),
        l.worker_bits(),
        l.sequence_bits(),
        l.total_bits(),
        p.timebase.unit().as_str(),
        rfc3339(p.timebase.epoch_unix_ms()),
        p.datacenter.0,
    );
    text.push_str(&key_form(l));
    text.push_str(
        "The functions read the fields of any value without checking it is an ID of this \
         sequence (the sidecar's /decode does). A time is a tick's start; bounds of a time \
         are those of the tick containing it; before the epoch they lie below every ID, and \
         at or after the end of the timestamp bits they are NULL.\n",
    );
    comment(&mut out, &text);
    out.push('\n');
    out
}

/// What the key form means for queries, one paragraph.
fn key_form(l: &kubeflake_crds::Layout) -> String {
    let rotating = match l.sequence_start() {
        SequenceStart::Zero => "",
        SequenceStart::Rotating => {
            " With sequenceStart Rotating, IDs of one tick are not in issue order; times, \
             workers and datacenters decode as without it."
        }
    };
    let form = match l.spread() {
        Spread::TimeOrdered => "time-ordered: an ID is its key, so IDs sort by time and \
                                the IDs of a time are one range of numbers."
            .to_string(),
        Spread::ShardBits { bits } => format!(
            "shardBits {bits}: a {bits}-bit shard (a hash of the rest) on top of the key, so the \
             IDs of a time are one range per shard ({} ranges); the ID bounds take the shard.",
            1u32 << bits
        ),
        Spread::BitReversed => format!(
            "bitReversed: an ID is its key with its {} bits reversed, so the IDs of a time are \
             no range of numbers: there are no ID bounds. Query the key instead (an expression \
             index on the key function finds them without a scan).",
            l.total_bits()
        ),
    };
    format!("Key form: {form}{rotating}\n")
}

#[cfg(test)]
mod tests;
