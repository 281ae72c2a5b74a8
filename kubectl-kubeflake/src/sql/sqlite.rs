//! SQLite, which has no CREATE FUNCTION: the same expressions as the other dialects' function
//! bodies, as
//!
//! 1. a view of `--table` with the decoded fields of `--column` (`<prefix>_time`, ...),
//! 2. a query for the bounds of a time (`:unix_ms`, and `:shard` for `shardBits`), and
//! 3. a query for the rows of a time range (`:from_ms`, `:to_ms`): on the ID column for
//!    time-ordered layouts, per shard for `shardBits`, on the key for bit-reversed ones.
//!
//! The queries take named parameters: an application binds them, the sqlite3 shell takes
//! `.param set :unix_ms 1767225600000`. Run unbound they are NULL and return nothing, so
//! the whole output can be run as it is to create the view. Application-defined functions
//! (`sqlite3_create_function`) would need code in every program that opens the database;
//! a view and plain SQL need none.

use std::fmt::Write;

use kubeflake_crds::layout::Spread;

use super::{Exprs, comment};

/// A table or column name in double quotes (checked to need no escaping).
fn quoted(name: &str) -> String {
    format!("\"{name}\"")
}

/// The view, the bounds query and the range query.
pub fn write(out: &mut String, x: &Exprs, prefix: &str, table: &str, column: &str) {
    let (t, c) = (quoted(table), quoted(column));
    let view = quoted(&format!("{prefix}_{table}"));
    comment(
        out,
        &format!(
            "SQLite has no CREATE FUNCTION, so this is a view of {table} with the fields of \
             {column} decoded, and queries with named parameters for the bounds of a time and \
             the rows of a time range: bind the parameters (in the sqlite3 shell: .param set \
             :unix_ms 1767225600000), or copy the expressions into your own queries. Unbound \
             they are NULL and the queries return nothing."
        ),
    );
    let time = format!(
        "strftime('%Y-%m-%dT%H:%M:%fZ', {} / 1000.0, 'unixepoch')",
        x.unix_ms(&c)
    );
    let mut columns = vec![
        ("key", x.key(&c)),
        ("unix_ms", x.unix_ms(&c)),
        ("time", time),
        ("worker", x.worker(&c)),
        ("datacenter", x.datacenter(&c)),
    ];
    if let Spread::ShardBits { .. } = x.layout.spread() {
        columns.push(("shard", x.shard(&c)));
    }
    let columns: Vec<String> = columns
        .iter()
        .map(|(name, e)| format!("  {e} AS {prefix}_{name}"))
        .collect();
    let _ = writeln!(
        out,
        "DROP VIEW IF EXISTS {view};\nCREATE VIEW {view} AS\nSELECT *,\n{}\nFROM {t};\n",
        columns.join(",\n")
    );
    bounds(out, x, prefix);
    range(out, x, prefix, &t, &c);
}

/// The bounds of the tick containing `:unix_ms`.
fn bounds(out: &mut String, x: &Exprs, prefix: &str) {
    let mut select = vec![
        format!("  {} AS {prefix}_min_key", x.key_bound(":unix_ms", false)),
        format!("  {} AS {prefix}_max_key", x.key_bound(":unix_ms", true)),
    ];
    for (last, word) in [(false, "min"), (true, "max")] {
        if let Some(e) = x.id_bound(":unix_ms", ":shard", last) {
            select.push(format!("  {e} AS {prefix}_{word}_id"));
        }
    }
    let of = match x.layout.spread() {
        Spread::TimeOrdered => {
            "of the tick containing :unix_ms (Unix milliseconds); keys and \
                                IDs are the same numbers here"
        }
        Spread::ShardBits { .. } => {
            "of the tick containing :unix_ms (Unix milliseconds), the \
                                     IDs of shard :shard"
        }
        Spread::BitReversed => {
            "of the tick containing :unix_ms (Unix milliseconds); \
                                bit-reversed IDs of a time are no range, so there are only \
                                key bounds"
        }
    };
    comment(out, &format!("The smallest and largest keys and IDs {of}:"));
    let _ = writeln!(out, "SELECT\n{};\n", select.join(",\n"));
}

/// The rows issued from `:from_ms` to `:to_ms`.
fn range(out: &mut String, x: &Exprs, prefix: &str, t: &str, c: &str) {
    let what = "The rows issued from :from_ms to :to_ms (Unix milliseconds, whole ticks, both \
                ends included)";
    match x.layout.spread() {
        Spread::TimeOrdered => {
            comment(out, &format!("{what}, through an index on {c}:"));
            let (low, high) = (x.key_bound(":from_ms", false), x.key_bound(":to_ms", true));
            let _ = writeln!(
                out,
                "SELECT * FROM {t}\nWHERE {c} BETWEEN {low}\n  AND {high}\nORDER BY {c};"
            );
        }
        Spread::ShardBits { .. } => {
            comment(
                out,
                &format!("{what}: one range of IDs per shard, each through an index on {c}:"),
            );
            let shards = format!("{prefix}_shards");
            let shard = format!("{shards}.shard");
            let low = x.id_bound(":from_ms", &shard, false).unwrap_or_default();
            let high = x.id_bound(":to_ms", &shard, true).unwrap_or_default();
            let _ = writeln!(
                out,
                "WITH RECURSIVE {shards}(shard) AS (\n  SELECT 0 UNION ALL SELECT shard + 1 FROM \
                 {shards} WHERE shard < {max}\n)\nSELECT {t}.* FROM {shards} JOIN {t}\n  ON {t}.{c} \
                 BETWEEN {low}\n  AND {high};",
                max = x.max_shard()
            );
        }
        Spread::BitReversed => {
            let key = x.key(c);
            comment(
                out,
                &format!(
                    "{what}, on the key: bit-reversed IDs of a time are no range. An index on \
                     the key expression (the same text as below) lets SQLite find them without \
                     a scan:"
                ),
            );
            comment(
                out,
                &format!(
                    "  CREATE INDEX {} ON {t} (\n  {key}\n  );",
                    quoted(&format!("{}_{prefix}_key", t.trim_matches('"')))
                ),
            );
            let (low, high) = (x.key_bound(":from_ms", false), x.key_bound(":to_ms", true));
            let _ = writeln!(
                out,
                "SELECT * FROM {t}\nWHERE {key}\n  BETWEEN {low}\n  AND {high};"
            );
        }
    }
}
