//! PostgreSQL and MySQL/MariaDB: one function per field and per bound of a time, each body
//! an expression of [`Exprs`]. PostgreSQL's are `LANGUAGE sql IMMUTABLE STRICT PARALLEL
//! SAFE` with a SQL-standard body (checked when created); MySQL's `DETERMINISTIC NO SQL`,
//! each behind a `DROP FUNCTION IF EXISTS` (MySQL has no `CREATE OR REPLACE FUNCTION`).

use std::fmt::Write;

use kubeflake_crds::layout::Spread;

use super::{Exprs, comment};
use crate::cli::Dialect;

/// One function: a comment, then the dialect's CREATE.
struct Function {
    doc: String,
    name: String,
    params: &'static [(&'static str, Kind)],
    returns: Kind,
    body: String,
}

const ID: &[(&str, Kind)] = &[("id", Kind::Big)];
const MS: &[(&str, Kind)] = &[("unix_ms", Kind::Big)];
const TIME: &[(&str, Kind)] = &[("t", Kind::TimeArg)];
const MS_SHARD: &[(&str, Kind)] = &[("unix_ms", Kind::Big), ("shard", Kind::Int)];
const TIME_SHARD: &[(&str, Kind)] = &[("t", Kind::TimeArg), ("shard", Kind::Int)];

/// The SQL types the functions take and return.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Big,
    Int,
    Time,
    /// A time argument (MySQL's takes microseconds, so nothing is rounded on the way in).
    TimeArg,
}

impl Kind {
    fn name(self, dialect: Dialect) -> &'static str {
        match (self, dialect) {
            (Kind::Big, Dialect::Mysql) => "BIGINT",
            (Kind::Int, Dialect::Mysql) => "INT",
            (Kind::Time, Dialect::Mysql) => "DATETIME(3)",
            (Kind::TimeArg, Dialect::Mysql) => "DATETIME(6)",
            (Kind::Big, _) => "bigint",
            (Kind::Int, _) => "integer",
            (Kind::Time | Kind::TimeArg, _) => "timestamptz",
        }
    }
}

fn write_function(out: &mut String, dialect: Dialect, f: &Function) {
    comment(out, &f.doc);
    let params: Vec<String> = f
        .params
        .iter()
        .map(|(name, kind)| format!("{name} {}", kind.name(dialect)))
        .collect();
    let (name, params, returns) = (&f.name, params.join(", "), f.returns.name(dialect));
    let body = &f.body;
    let _ = match dialect {
        Dialect::Mysql => writeln!(
            out,
            "DROP FUNCTION IF EXISTS {name};\n\
             CREATE FUNCTION {name}({params}) RETURNS {returns}\n  DETERMINISTIC NO SQL\n  \
             RETURN {body};\n"
        ),
        _ => writeln!(
            out,
            "CREATE OR REPLACE FUNCTION {name}({params}) RETURNS {returns}\n  \
             LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE\n  RETURN {body};\n"
        ),
    };
}

/// Unix milliseconds of the time argument `t`, floored.
fn ms_of_time(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Mysql => {
            "(TIMESTAMPDIFF(MICROSECOND, TIMESTAMP'1970-01-01 00:00:00', t) DIV 1000)"
        }
        // extract() gives an exact numeric from PostgreSQL 14 on.
        _ => "(floor(extract(epoch FROM t) * 1000)::bigint)",
    }
}

/// The instant of Unix milliseconds `ms`, exactly (no floating point on the way).
fn time_of_ms(dialect: Dialect, ms: &str) -> String {
    match dialect {
        Dialect::Mysql => {
            format!("TIMESTAMPADD(MICROSECOND, {ms} * 1000, TIMESTAMP'1970-01-01 00:00:00')")
        }
        _ => format!("to_timestamp({ms} / 1000) + ({ms} % 1000) * interval '1 millisecond'"),
    }
}

/// Casts a bigint expression for an `integer` result (PostgreSQL checks the type).
fn int(dialect: Dialect, e: String) -> String {
    match dialect {
        Dialect::Mysql => e,
        _ => format!("{e}::integer"),
    }
}

/// The functions of one ID.
fn field_functions(x: &Exprs, prefix: &str) -> Vec<Function> {
    let d = x.dialect;
    let f = |what: &str, doc: &str, returns, body| Function {
        doc: doc.to_string(),
        name: format!("{prefix}_{what}"),
        params: ID,
        returns,
        body,
    };
    let time_doc = match d {
        Dialect::Mysql => "The start of the ID's tick, as a DATETIME in UTC.",
        _ => "The start of the ID's tick.",
    };
    let mut list = vec![
        f(
            "key",
            "The time-ordered key of an ID: its fields packed as \
             [tick][datacenter][worker][sequence], which sorts by time in every key form.",
            Kind::Big,
            x.key("id"),
        ),
        f(
            "unix_ms",
            "Unix milliseconds of the start of the ID's tick.",
            Kind::Big,
            x.unix_ms("id"),
        ),
        f(
            "time",
            time_doc,
            Kind::Time,
            time_of_ms(d, &x.unix_ms("id")),
        ),
        f(
            "worker",
            "The worker slot that issued the ID.",
            Kind::Int,
            int(d, x.worker("id")),
        ),
        f(
            "datacenter",
            "The datacenter field of the ID.",
            Kind::Int,
            int(d, x.datacenter("id")),
        ),
    ];
    if let Spread::ShardBits { .. } = x.layout.spread() {
        list.push(f(
            "shard",
            "The shard of the ID: its top bits.",
            Kind::Int,
            int(d, x.shard("id")),
        ));
    }
    list
}

/// The bounds of a time: keys always, IDs where the IDs of a time are ranges.
fn bound_functions(x: &Exprs, prefix: &str) -> Vec<Function> {
    let tms = ms_of_time(x.dialect);
    let sharded = matches!(x.layout.spread(), Spread::ShardBits { .. });
    let mut list = Vec::new();
    for (last, word, which) in [(false, "min", "smallest"), (true, "max", "largest")] {
        for (suffix, arg, of) in [
            ("_ms", "unix_ms", "Unix millisecond unix_ms"),
            ("", tms, "t"),
        ] {
            list.push(Function {
                doc: format!("The {which} key of the tick containing {of}."),
                name: format!("{prefix}_{word}_key{suffix}"),
                params: if suffix.is_empty() { TIME } else { MS },
                returns: Kind::Big,
                body: x.key_bound(arg, last),
            });
        }
        for (suffix, arg, of) in [
            ("_ms", "unix_ms", "Unix millisecond unix_ms"),
            ("", tms, "t"),
        ] {
            let Some(body) = x.id_bound(arg, "shard", last) else {
                continue;
            };
            let (doc, params) = match (sharded, suffix.is_empty()) {
                (false, by_time) => (
                    format!("The {which} ID of the tick containing {of}."),
                    if by_time { TIME } else { MS },
                ),
                (true, by_time) => (
                    format!(
                        "The {which} ID of shard `shard` in the tick containing {of} (NULL \
                         for a shard that does not exist)."
                    ),
                    if by_time { TIME_SHARD } else { MS_SHARD },
                ),
            };
            list.push(Function {
                doc,
                name: format!("{prefix}_{word}_id{suffix}"),
                params,
                returns: Kind::Big,
                body,
            });
        }
    }
    list
}

/// The PostgreSQL or MySQL functions.
pub fn write(out: &mut String, x: &Exprs, prefix: &str) {
    let d = x.dialect;
    if d == Dialect::Postgresql {
        out.push_str("BEGIN;\n\n");
    }
    for f in field_functions(x, prefix)
        .iter()
        .chain(&bound_functions(x, prefix))
    {
        write_function(out, d, f);
    }
    if x.layout.spread() == Spread::BitReversed {
        comment(
            out,
            &format!(
                "No {prefix}_min_id/{prefix}_max_id: bit-reversed IDs of one time are spread \
                 over the whole range of numbers. Select on the key, which an expression index \
                 serves, for example:\n  CREATE INDEX orders_{prefix}_key ON orders \
                 (({prefix}_key(id)));\n  SELECT * FROM orders WHERE {prefix}_key(id) BETWEEN \
                 {prefix}_min_key(t1) AND {prefix}_max_key(t2);"
            ),
        );
        out.push('\n');
    }
    if d == Dialect::Postgresql {
        out.push_str("COMMIT;\n");
    }
}
