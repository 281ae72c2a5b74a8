//! `kubectl kubeflake sql` against real databases (issue 25 point 3): PostgreSQL, MariaDB
//! and SQLite from the Debian packages, each started here in a private temp directory.
//!
//! Per layout (63-bit default, 53-bit at 10 ms, datacenter bits with an epoch off the
//! second, a 10 ms unit, shardBits 4 and 10, bitReversed over 63 and 53 bits, Rotating),
//! two standalone sidecars issue 10,000 IDs and `/decode` each (sql_support::sample). The
//! plugin's SQL for that layout's IdSequence file is loaded as printed, the IDs go into a
//! table, and for every ID each function must agree with `/decode` (time, Unix ms, worker,
//! datacenter, shard) and with the API crate (the key, the smallest and largest key and ID
//! of a time inside the ID's tick, through the Unix-ms and the timestamp variants); the ID
//! bounds must decode to the ID's time and hold the ID. Then the edges of the layout's time
//! (before the epoch, its last tick, after it, a shard that does not exist), range queries
//! over windows of time (each must select exactly the IDs of its ticks), and the recipes of
//! docs/sql.md: PostgreSQL partitions bounded by the functions (a query of one tick pruned
//! to its partition) and the index each range query can use, MariaDB partitions bounded by
//! them through a prepared statement (pruned, read by primary key), and SQLite's printed
//! view, queries and index (its query plans must search, not scan).
//!
//! A database binary that is missing fails the test (scripts/install-deps.sh installs it).

mod operator_support;
mod sidecar_support;
mod sql_support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use operator_support::workspace_binary;
use sql_support::databases::{MariaDb, Postgres, Sqlite};
use sql_support::expect::Mismatches;
use sql_support::sample::{Decoded, Sample, cases, sample};
use sql_support::{CLIENT_TIMEOUT, cells, run_client};

#[test]
fn postgresql_functions_agree_with_the_sidecars_decode_for_every_layout() -> Result<()> {
    let db = Postgres::start()?;
    every_layout("PostgreSQL", |s| check_functions(Server::Postgres(&db), s))
}

#[test]
fn mariadb_functions_agree_with_the_sidecars_decode_for_every_layout() -> Result<()> {
    let db = MariaDb::start()?;
    every_layout("MariaDB", |s| check_functions(Server::MariaDb(&db), s))
}

#[test]
fn sqlite_view_and_queries_agree_with_the_sidecars_decode_for_every_layout() -> Result<()> {
    let db = Sqlite::open()?;
    every_layout("SQLite", |s| check_sqlite(&db, s))
}

/// Runs `check` for every layout, reporting every layout that failed (not only the first).
fn every_layout(database: &str, check: impl Fn(&Sample) -> Result<usize>) -> Result<()> {
    let started = Instant::now();
    let mut failures = Vec::new();
    for case in cases() {
        let s = sample(&case)?;
        let at = Instant::now();
        match check(&s) {
            Ok(values) => println!(
                "{database} {}: {} IDs, {values} values agree ({:.1} s)",
                case.name,
                s.ids.len(),
                at.elapsed().as_secs_f64()
            ),
            Err(e) => failures.push(format!("{}: {e:#}", case.name)),
        }
    }
    println!(
        "{database}: every layout in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if !failures.is_empty() {
        bail!("{database}:\n{}", failures.join("\n\n"));
    }
    Ok(())
}

/// What `kubectl kubeflake sql` prints for the sample's IdSequence file.
fn plugin_sql(s: &Sample, args: &[&str]) -> Result<String> {
    let file = s.file.to_string_lossy().into_owned();
    let mut all = vec!["sql", "-f", &file, "--prefix", s.case.name];
    all.extend(args);
    run_client(
        &workspace_binary("kubectl-kubeflake"),
        &all,
        "",
        CLIENT_TIMEOUT,
    )
    .context("kubectl kubeflake sql")
}

fn micros_text(micros: i64, format: &str) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|t| t.format(format).to_string())
        .unwrap_or_default()
}

/// The database a function check runs in.
#[derive(Clone, Copy)]
enum Server<'a> {
    Postgres(&'a Postgres),
    MariaDb(&'a MariaDb),
}

impl Server<'_> {
    fn dialect(self) -> &'static str {
        match self {
            Server::Postgres(_) => "postgresql",
            Server::MariaDb(_) => "mariadb",
        }
    }

    /// Runs a script in a session whose time zone is neither UTC nor whole hours: the
    /// functions must not depend on it.
    fn run(self, script: &str) -> Result<String> {
        match self {
            Server::Postgres(db) => {
                db.run(&format!("SET TimeZone = 'America/St_Johns';\n{script}"))
            }
            Server::MariaDb(db) => db.run(&format!("SET time_zone = '+05:30';\n{script}")),
        }
    }

    fn timestamp_type(self) -> &'static str {
        match self {
            Server::Postgres(_) => "timestamptz",
            Server::MariaDb(_) => "DATETIME(6)",
        }
    }

    /// A timestamp literal of Unix microseconds (DATETIME in UTC for MariaDB).
    fn timestamp(self, micros: i64) -> String {
        match self {
            Server::Postgres(_) => format!(
                "timestamptz '{}'",
                micros_text(micros, "%Y-%m-%dT%H:%M:%S%.6fZ")
            ),
            Server::MariaDb(_) => format!(
                "TIMESTAMP'{}'",
                micros_text(micros, "%Y-%m-%d %H:%M:%S%.6f")
            ),
        }
    }

    /// `e` (a timestamptz, or a DATETIME in UTC) as RFC 3339 with microseconds.
    fn time_text(self, e: &str) -> String {
        match self {
            Server::Postgres(_) => {
                format!("to_char({e} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
            }
            Server::MariaDb(_) => format!("DATE_FORMAT({e}, '%Y-%m-%dT%H:%i:%s.%fZ')"),
        }
    }

    /// A join source of every shard number 0 ..= max as column `n` of `shards`.
    fn shards(self, max: i64) -> (String, String) {
        match self {
            Server::Postgres(_) => (
                String::new(),
                format!("generate_series(0, {max}) AS shards(n)"),
            ),
            // MariaDB stops a recursion after max_recursive_iterations (1000) rows without
            // an error, which would drop shards 1001 to 1023 of a 10-bit layout.
            Server::MariaDb(_) => (
                format!(
                    "SET SESSION max_recursive_iterations = {};\nWITH RECURSIVE shards(n) AS \
                     (SELECT 0 UNION ALL SELECT n + 1 FROM shards WHERE n < {max}) ",
                    max + 1
                ),
                "shards".to_string(),
            ),
        }
    }
}

/// The table of a sample's IDs: the ID, its Unix ms from `/decode`, a probe time inside
/// its tick (as Unix ms, and as a timestamp half a millisecond later), and its shard.
fn load_script(s: &Sample, timestamp: Option<(&str, &dyn Fn(i64) -> String)>) -> String {
    let table = format!("ids_{}", s.case.name);
    let t_column = timestamp.map_or(String::new(), |(ty, _)| format!(", t {ty} NOT NULL"));
    // SQLite (no timestamp type): an INTEGER PRIMARY KEY is the rowid, as in most tables.
    let id_type = if timestamp.is_some() {
        "BIGINT"
    } else {
        "INTEGER"
    };
    let mut script = format!(
        "DROP TABLE IF EXISTS {table};\nCREATE TABLE {table} (id {id_type} PRIMARY KEY, unix_ms \
         BIGINT NOT NULL, probe_ms BIGINT NOT NULL{t_column}, shard INT NOT NULL);\n"
    );
    for chunk in s.ids.chunks(500) {
        let rows: Vec<String> = chunk
            .iter()
            .map(|d| {
                let probe = s.probe_ms(d);
                let t = timestamp.map_or(String::new(), |(_, literal)| {
                    format!(", {}", literal(probe * 1000 + 500))
                });
                let shard = s.shard_of(d).unwrap_or(0);
                format!("({}, {}, {probe}{t}, {shard})", d.id, d.unix_ms)
            })
            .collect();
        script.push_str(&format!(
            "INSERT INTO {table} VALUES {};\n",
            rows.join(",\n")
        ));
    }
    script
}

/// The expected cells of the per-ID query for `d`, after the fields: key bounds of its
/// probe time by Unix ms and by timestamp, ID bounds likewise, and the Unix ms the
/// smallest and largest ID decode to.
fn bound_cells(s: &Sample, d: &Decoded) -> Vec<(&'static str, Option<String>)> {
    let tick = d.tick as i64;
    assert_eq!(
        s.tick_of(s.probe_ms(d)),
        tick,
        "probe of {} in its tick",
        d.id
    );
    let (kmin, kmax) = s.key_range(tick);
    let ids = s.id_range(tick, i64::from(s.shard_of(d).unwrap_or(0)));
    let text = |v: Option<i64>| v.map(|v| v.to_string());
    vec![
        ("min_key_ms", text(Some(kmin))),
        ("max_key_ms", text(Some(kmax))),
        ("min_key", text(Some(kmin))),
        ("max_key", text(Some(kmax))),
        ("min_id_ms", text(ids.map(|r| r.0))),
        ("max_id_ms", text(ids.map(|r| r.1))),
        ("min_id", text(ids.map(|r| r.0))),
        ("max_id", text(ids.map(|r| r.1))),
        ("unix_ms(min_id_ms)", text(ids.map(|_| d.unix_ms))),
        ("unix_ms(max_id)", text(ids.map(|_| d.unix_ms))),
    ]
}

/// Checks that the cells at `low` and `high` of a returned row hold `value` between them.
fn check_within(m: &mut Mismatches, what: &str, line: &str, value: u64, low: usize, high: usize) {
    let c = cells(line);
    let bound = |i: usize| {
        c.get(i)
            .copied()
            .flatten()
            .and_then(|v| v.parse::<i64>().ok())
    };
    if let (Some(lo), Some(hi)) = (bound(low), bound(high)) {
        let v = value as i64;
        m.check(lo <= v && v <= hi, || {
            format!("{what}: {v} outside its time's [{lo}, {hi}]")
        });
    }
}

/// PostgreSQL or MariaDB: the functions as printed, every ID, the edges, the windows and
/// the partition recipe.
fn check_functions(db: Server, s: &Sample) -> Result<usize> {
    let p = s.case.name;
    let table = format!("ids_{p}");
    let sql = plugin_sql(s, &["--dialect", db.dialect()])?;
    db.run(&sql).context("loading the printed SQL")?;
    let literal = |micros: i64| db.timestamp(micros);
    db.run(&load_script(s, Some((db.timestamp_type(), &literal))))?;

    let shard_arg = if s.sharded() { ", shard" } else { "" };
    let (min_ms, max_ms, min_t, max_t) = if s.reversed() {
        ("NULL".into(), "NULL".into(), "NULL".into(), "NULL".into())
    } else {
        (
            format!("{p}_min_id_ms(probe_ms{shard_arg})"),
            format!("{p}_max_id_ms(probe_ms{shard_arg})"),
            format!("{p}_min_id(t{shard_arg})"),
            format!("{p}_max_id(t{shard_arg})"),
        )
    };
    let decode_bound = |e: &str| {
        if s.reversed() {
            "NULL".to_string()
        } else {
            format!("{p}_unix_ms({e})")
        }
    };
    let shard = if s.sharded() {
        format!("{p}_shard(id)")
    } else {
        "NULL".into()
    };
    let query = format!(
        "SELECT id, {p}_key(id), {p}_unix_ms(id), {time}, {p}_worker(id), {p}_datacenter(id), \
         {shard}, {p}_min_key_ms(probe_ms), {p}_max_key_ms(probe_ms), {p}_min_key(t), \
         {p}_max_key(t), {min_ms}, {max_ms}, {min_t}, {max_t}, {}, {} FROM {table} ORDER BY id;",
        decode_bound(&min_ms),
        decode_bound(&max_t),
        time = db.time_text(&format!("{p}_time(id)")),
    );
    let out = db.run(&query)?;
    let lines: Vec<&str> = out.lines().collect();
    ensure!(
        lines.len() == s.ids.len(),
        "{} rows for {} IDs",
        lines.len(),
        s.ids.len()
    );
    let mut m = Mismatches::default();
    for (d, line) in s.ids.iter().zip(&lines) {
        let time = d.time.replace('Z', "000Z");
        let mut expected = s.field_cells(d, time);
        expected.extend(bound_cells(s, d));
        let what = format!("ID {}", d.id);
        m.row(&what, line, &expected);
        check_within(&mut m, &what, line, d.id, 11, 12);
    }
    let mut compared = m.compared();
    m.into_result("every ID")?;
    compared += check_edges(db, s)?;
    compared += check_windows(db, s)?;
    compared += check_partitions(db, s)?;
    Ok(compared)
}

/// The bound functions before the epoch, at it, at the end of the timestamp bits and
/// after, and for a shard that does not exist.
fn check_edges(db: Server, s: &Sample) -> Result<usize> {
    let p = s.case.name;
    let edges = s.edges();
    let script: String = edges
        .iter()
        .map(|(f, ms, shard, _)| {
            let shard = if f.contains("_id") {
                format!(", {shard}")
            } else {
                String::new()
            };
            format!("SELECT {p}_{f}({ms}{shard});\n")
        })
        .collect();
    let out = db.run(&script)?;
    let mut m = Mismatches::default();
    for ((f, ms, shard, want), line) in edges.iter().zip(out.lines()) {
        let what = format!("{p}_{f}({ms}, shard {shard})");
        m.row(&what, line, &[("value", want.map(|v| v.to_string()))]);
    }
    m.check(out.lines().count() == edges.len(), || {
        "one row per edge".into()
    });
    let compared = m.compared();
    m.into_result("the edges of the layout's time")
        .map(|()| compared)
}

/// Range queries through the timestamp functions must select exactly each window's IDs.
fn check_windows(db: Server, s: &Sample) -> Result<usize> {
    let p = s.case.name;
    let table = format!("ids_{p}");
    let windows = s.windows();
    let mut script = String::new();
    for (i, (from, to, _)) in windows.iter().enumerate() {
        let (from, to) = (db.timestamp(from * 1000 + 999), db.timestamp(to * 1000));
        let query = if s.reversed() {
            format!(
                "SELECT {i}, id FROM {table} WHERE {p}_key(id) BETWEEN {p}_min_key({from}) AND \
                 {p}_max_key({to});"
            )
        } else if s.sharded() {
            let (with, source) = db.shards(s.max_shard());
            format!(
                "{with}SELECT {i}, id FROM {source} JOIN {table} ON {table}.id BETWEEN \
                 {p}_min_id({from}, shards.n) AND {p}_max_id({to}, shards.n);"
            )
        } else {
            format!(
                "SELECT {i}, id FROM {table} WHERE id BETWEEN {p}_min_id({from}) AND \
                 {p}_max_id({to});"
            )
        };
        script.push_str(&query);
        script.push('\n');
    }
    compare_windows(&db.run(&script)?, &windows)
}

fn compare_windows(out: &str, windows: &[(i64, i64, BTreeSet<u64>)]) -> Result<usize> {
    let mut got: BTreeMap<usize, BTreeSet<u64>> = BTreeMap::new();
    for line in out.lines() {
        let c = cells(line);
        let (Some(Some(i)), Some(Some(id))) = (c.first(), c.get(1)) else {
            bail!("unexpected row {line:?}");
        };
        got.entry(i.parse()?).or_default().insert(id.parse()?);
    }
    let mut m = Mismatches::default();
    for (i, (from, to, want)) in windows.iter().enumerate() {
        let have = got.remove(&i).unwrap_or_default();
        m.check(&have == want, || {
            let extra: Vec<_> = have.difference(want).take(3).collect();
            let missing: Vec<_> = want.difference(&have).take(3).collect();
            format!(
                "window {from} ..= {to} ms: {} IDs, expected {} (extra {extra:?}, missing \
                 {missing:?})",
                have.len(),
                want.len()
            )
        });
    }
    let compared = m.compared();
    m.into_result("range queries over windows of time")
        .map(|()| compared)
}

/// Three partitions split at two times of the sample: the IDs before, between and after.
fn partition_split(s: &Sample) -> (i64, i64, BTreeMap<u64, &'static str>) {
    let times: Vec<i64> = s
        .ids
        .iter()
        .map(|d| d.unix_ms)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let (b1, b2) = (times[times.len() / 3], times[2 * times.len() / 3]);
    let (t1, t2) = (s.tick_of(b1), s.tick_of(b2));
    let expected = s
        .ids
        .iter()
        .map(|d| {
            let tick = d.tick as i64;
            let part = if tick < t1 {
                "before"
            } else if tick < t2 {
                "during"
            } else {
                "after"
            };
            (d.id, part)
        })
        .collect();
    (b1, b2, expected)
}

/// docs/sql.md's partitions: PostgreSQL ranges bounded by `<prefix>_min_id(t)` (on the key
/// expression for shard and bit-reversed layouts, plus an index on it that the planner
/// uses); MariaDB ranges whose literal bounds a prepared statement takes from the
/// functions (time-ordered layouts: MariaDB partitions on columns only).
fn check_partitions(db: Server, s: &Sample) -> Result<usize> {
    let p = s.case.name;
    let table = format!("ids_{p}");
    let (b1, b2, expected) = partition_split(s);
    let (t1, t2) = (db.timestamp(b1 * 1000), db.timestamp(b2 * 1000));
    let time_ordered = !s.sharded() && !s.reversed();
    let script = match db {
        Server::Postgres(_) => {
            let (key, bound, pk) = if time_ordered {
                ("id".to_string(), format!("{p}_min_id"), " PRIMARY KEY")
            } else {
                (format!("({p}_key(id))"), format!("{p}_min_key"), "")
            };
            format!(
                "DROP TABLE IF EXISTS parts_{p};\n\
                 CREATE TABLE parts_{p} (id bigint NOT NULL{pk}) PARTITION BY RANGE ({key});\n\
                 CREATE TABLE parts_{p}_before PARTITION OF parts_{p} FOR VALUES FROM (MINVALUE) TO ({bound}({t1}));\n\
                 CREATE TABLE parts_{p}_during PARTITION OF parts_{p} FOR VALUES FROM ({bound}({t1})) TO ({bound}({t2}));\n\
                 CREATE TABLE parts_{p}_after PARTITION OF parts_{p} FOR VALUES FROM ({bound}({t2})) TO (MAXVALUE);\n\
                 INSERT INTO parts_{p} SELECT id FROM {table};\n\
                 SELECT replace(tableoid::regclass::text, 'parts_{p}_', ''), id FROM parts_{p};\n"
            )
        }
        Server::MariaDb(_) if time_ordered => format!(
            "DROP TABLE IF EXISTS parts_{p};\n\
             SET @ddl = CONCAT('CREATE TABLE parts_{p} (id BIGINT PRIMARY KEY) PARTITION BY RANGE (id) (',\n\
               'PARTITION p_before VALUES LESS THAN (', {p}_min_id({t1}), '), ',\n\
               'PARTITION p_during VALUES LESS THAN (', {p}_min_id({t2}), '), ',\n\
               'PARTITION p_after VALUES LESS THAN MAXVALUE)');\n\
             PREPARE create_parts FROM @ddl;\nEXECUTE create_parts;\nDEALLOCATE PREPARE create_parts;\n\
             INSERT INTO parts_{p} SELECT id FROM {table};\n\
             SELECT 'before', id FROM parts_{p} PARTITION (p_before) UNION ALL \
             SELECT 'during', id FROM parts_{p} PARTITION (p_during) UNION ALL \
             SELECT 'after', id FROM parts_{p} PARTITION (p_after);\n"
        ),
        Server::MariaDb(_) => return Ok(0),
    };
    let out = db.run(&script)?;
    let mut m = Mismatches::default();
    let mut seen = 0;
    for line in out.lines() {
        let c = cells(line);
        let (Some(Some(part)), Some(Some(id))) = (c.first(), c.get(1)) else {
            bail!("unexpected row {line:?}");
        };
        let id: u64 = id.parse()?;
        seen += 1;
        let want = expected.get(&id).copied();
        m.check(want == Some(*part), || {
            format!("ID {id} in partition {part}, expected {want:?}")
        });
    }
    m.check(seen == expected.len(), || {
        format!("{seen} rows in the partitions, {} IDs", expected.len())
    });
    match db {
        Server::Postgres(_) => {
            check_postgres_index(db, s, &mut m)?;
            check_postgres_pruning(db, s, b1, &mut m)?;
        }
        Server::MariaDb(_) => check_mariadb_index(db, s, b1, &mut m)?,
    }
    let compared = m.compared();
    m.into_result("the partition recipe").map(|()| compared)
}

/// The range query of each key form can use an index: the primary key for time-ordered
/// and shard layouts, an expression index on `<prefix>_key(id)` for bit-reversed ones.
fn check_postgres_index(db: Server, s: &Sample, m: &mut Mismatches) -> Result<()> {
    let p = s.case.name;
    let table = format!("ids_{p}");
    let (t1, t2) = (
        db.timestamp(s.ids[0].unix_ms * 1000),
        db.timestamp(s.ids[9].unix_ms * 1000),
    );
    let (setup, query, index) = if s.reversed() {
        (
            format!("CREATE INDEX IF NOT EXISTS {table}_key ON {table} (({p}_key(id)));\n"),
            format!(
                "SELECT id FROM {table} WHERE {p}_key(id) BETWEEN {p}_min_key({t1}) AND {p}_max_key({t2})"
            ),
            format!("{table}_key"),
        )
    } else if s.sharded() {
        let (_, source) = db.shards(s.max_shard());
        (
            String::new(),
            format!(
                "SELECT id FROM {source} JOIN {table} ON {table}.id BETWEEN {p}_min_id({t1}, shards.n) \
                 AND {p}_max_id({t2}, shards.n)"
            ),
            format!("{table}_pkey"),
        )
    } else {
        (
            String::new(),
            format!(
                "SELECT id FROM {table} WHERE id BETWEEN {p}_min_id({t1}) AND {p}_max_id({t2})"
            ),
            format!("{table}_pkey"),
        )
    };
    // Every function of an ID can be indexed, the time too (IMMUTABLE as declared).
    let time_index =
        format!("CREATE INDEX IF NOT EXISTS {table}_time ON {table} (({p}_time(id)));\n");
    let plan = db.run(&format!(
        "{setup}{time_index}ANALYZE {table};\nSET enable_seqscan = off;\nEXPLAIN (COSTS OFF) {query};\n"
    ))?;
    m.check(plan.contains(&index) && !plan.contains("Seq Scan"), || {
        format!("the range query does not use {index}:\n{plan}")
    });
    Ok(())
}

/// A range query of one tick reads only the partition the recipe put that tick in.
fn check_postgres_pruning(db: Server, s: &Sample, b1: i64, m: &mut Mismatches) -> Result<()> {
    let p = s.case.name;
    let t = db.timestamp(b1 * 1000);
    let condition = if s.sharded() || s.reversed() {
        format!("{p}_key(id) BETWEEN {p}_min_key({t}) AND {p}_max_key({t})")
    } else {
        format!("id BETWEEN {p}_min_id({t}) AND {p}_max_id({t})")
    };
    let plan = db.run(&format!(
        "EXPLAIN (COSTS OFF) SELECT id FROM parts_{p} WHERE {condition};\n"
    ))?;
    m.check(
        plan.contains(&format!("parts_{p}_during"))
            && !plan.contains(&format!("parts_{p}_before"))
            && !plan.contains(&format!("parts_{p}_after")),
        || format!("the range query of one tick is not pruned to parts_{p}_during:\n{plan}"),
    );
    Ok(())
}

/// MariaDB evaluates the DETERMINISTIC bounds of constant times once: a range query of
/// one tick reads one partition (the one the recipe put that tick in) through a range of
/// the primary key (time-ordered layouts; it cannot index a stored function's result).
fn check_mariadb_index(db: Server, s: &Sample, b1: i64, m: &mut Mismatches) -> Result<()> {
    if s.sharded() || s.reversed() {
        return Ok(());
    }
    let p = s.case.name;
    let t = db.timestamp(b1 * 1000);
    let plan = db.run(&format!(
        "ANALYZE TABLE parts_{p};\nEXPLAIN PARTITIONS SELECT id FROM parts_{p} WHERE id BETWEEN \
         {p}_min_id({t}) AND {p}_max_id({t});\n"
    ))?;
    let row = plan.lines().last().unwrap_or_default();
    let c = cells(row);
    // id, select_type, table, partitions, type, possible_keys, key, ...
    m.check(
        c.get(3) == Some(&Some("p_during"))
            && c.get(4) == Some(&Some("range"))
            && c.get(6) == Some(&Some("PRIMARY")),
        || {
            format!(
                "the range query of one tick does not read p_during by its primary key:\n{plan}"
            )
        },
    );
    Ok(())
}

/// The printed SQLite text's statements (comment lines left out), in order.
fn statements(sql: &str) -> Vec<String> {
    let mut list = Vec::new();
    let mut current = String::new();
    for line in sql.lines().filter(|l| !l.starts_with("--")) {
        current.push_str(line);
        current.push('\n');
        if line.trim_end().ends_with(';') {
            list.push(std::mem::take(&mut current));
        }
    }
    list
}

/// The CREATE INDEX the SQLite text suggests in a comment (bit-reversed layouts).
fn suggested_index(sql: &str) -> Option<String> {
    let start = sql.find("--   CREATE INDEX")?;
    let mut text = String::new();
    for line in sql[start..].lines() {
        let line = line.strip_prefix("-- ")?;
        text.push_str(line);
        text.push('\n');
        if line.trim_end().ends_with(';') {
            return Some(text);
        }
    }
    None
}

/// SQLite: the printed text runs as it is; the view decodes every ID; the bounds query
/// gives each ID's time's bounds; the range query selects each window's IDs through an
/// index (the suggested one for bit-reversed layouts).
fn check_sqlite(db: &Sqlite, s: &Sample) -> Result<usize> {
    let p = s.case.name;
    let table = format!("ids_{p}");
    let sql = plugin_sql(
        s,
        &["--dialect", "sqlite", "--table", &table, "--column", "id"],
    )?;
    db.run(&load_script(s, None))?;
    db.run(&sql).context("running the printed SQL as it is")?;
    let list = statements(&sql);
    let find = |needle: &str| {
        list.iter()
            .find(|st| st.contains(needle))
            .cloned()
            .with_context(|| format!("no statement with {needle:?} in:\n{sql}"))
    };
    let bounds = find(&format!("AS {p}_min_key"))?;
    let range = find(":from_ms")?;

    let shard = if s.sharded() {
        format!("{p}_shard")
    } else {
        "NULL".into()
    };
    let out = db.run(&format!(
        "SELECT id, {p}_key, {p}_unix_ms, {p}_time, {p}_worker, {p}_datacenter, {shard} \
         FROM \"{p}_{table}\" ORDER BY id;"
    ))?;
    let mut m = Mismatches::default();
    ensure!(out.lines().count() == s.ids.len(), "one row per ID:\n{out}");
    for (d, line) in s.ids.iter().zip(out.lines()) {
        m.row(
            &format!("ID {}", d.id),
            line,
            &s.field_cells(d, d.time.clone()),
        );
    }

    // The bounds of each ID's probe time (and shard).
    let mut script = String::new();
    for d in &s.ids {
        let shard = s.shard_of(d).unwrap_or(0);
        script.push_str(&format!(
            ".param set :unix_ms {}\n.param set :shard {shard}\n{bounds}",
            s.probe_ms(d)
        ));
    }
    let out = db.run(&script)?;
    ensure!(out.lines().count() == s.ids.len(), "one bounds row per ID");
    for (d, line) in s.ids.iter().zip(out.lines()) {
        let expected: Vec<_> = bound_cells(s, d)
            .into_iter()
            .filter(|(name, _)| {
                ["min_key_ms", "max_key_ms", "min_id_ms", "max_id_ms"].contains(name)
            })
            .filter(|(name, _)| !(s.reversed() && name.contains("_id")))
            .collect();
        let what = format!("bounds of ID {}", d.id);
        m.row(&what, line, &expected);
        check_within(&mut m, &what, line, d.id, 2, 3);
    }

    // The range query over each window, and its plan.
    if let Some(index) = suggested_index(&sql) {
        db.run(&index).context("the suggested index")?;
    }
    let windows = s.windows();
    let mut script = String::new();
    for (i, (from, to, _)) in windows.iter().enumerate() {
        script.push_str(&format!(
            ".param set :from_ms {from}\n.param set :to_ms {to}\n{}",
            range
                .replace("SELECT *", &format!("SELECT {i} AS w, *"))
                .replace(
                    &format!("SELECT \"{table}\".*"),
                    &format!("SELECT {i} AS w, \"{table}\".*")
                )
        ));
    }
    let windows_compared = compare_windows(&db.run(&script)?, &windows)?;
    let plan = db.run(&format!(
        ".param set :from_ms {}\n.param set :to_ms {}\nEXPLAIN QUERY PLAN {range}",
        s.ids[0].unix_ms, s.ids[9].unix_ms
    ))?;
    m.check(
        plan.contains(&format!("SEARCH {table}")) && !plan.contains(&format!("SCAN {table}")),
        || format!("the range query scans {table}:\n{plan}"),
    );
    let compared = m.compared() + windows_compared;
    m.into_result("SQLite").map(|()| compared)
}
