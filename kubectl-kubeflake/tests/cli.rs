//! The built `kubectl-kubeflake` binary, command by command: output, bad input and exit
//! codes. Expected values are computed with `kubeflake-crds` (the same encode/decode the
//! sidecar uses), never copied from a previous run. `slots` and `--sequence` need a cluster
//! and are tested in `e2e/tests/plugin.rs`.

use std::path::Path;
use std::process::{Command, Output};

use kubeflake_crds::timebase::rfc3339;
use kubeflake_crds::{DatacenterId, Id, IdParts, Layout, Slot, TextForm, Tick, TimeUnit, Timebase};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_kubectl-kubeflake");

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run_with(args: &[&str], kubeconfig: Option<&Path>) -> Run {
    let mut command = Command::new(BIN);
    command.args(args).env_remove("RUST_LOG");
    match kubeconfig {
        Some(path) => command.env("KUBECONFIG", path),
        // No cluster unless a test gives one: a developer's own must never be used.
        None => command.env("KUBECONFIG", "/nonexistent/kubeconfig"),
    };
    command.output().expect("the plugin binary runs").into()
}

impl From<Output> for Run {
    fn from(out: Output) -> Run {
        Run {
            code: out.status.code().expect("exited, not killed by a signal"),
            stdout: String::from_utf8(out.stdout).expect("utf-8 stdout"),
            stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
        }
    }
}

fn run(args: &[&str]) -> Run {
    run_with(args, None)
}

fn json(args: &[&str]) -> Value {
    let r = run(args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", r.stdout))
}

/// A layout, its timebase, datacenter ID, and the flags that describe it.
struct Case {
    layout: Layout,
    timebase: Timebase,
    datacenter: u32,
    flags: Vec<String>,
}

fn cases() -> Vec<Case> {
    let make = |bits: [i64; 5], unit: TimeUnit, unit_name: &str, epoch: &str, dc: u32| Case {
        layout: Layout::new(bits[0], bits[1], bits[2], bits[3], bits[4]).unwrap(),
        timebase: Timebase::parse(epoch, unit).unwrap(),
        datacenter: dc,
        flags: [
            ("--timestamp-bits", bits[0].to_string()),
            ("--datacenter-bits", bits[1].to_string()),
            ("--worker-bits", bits[2].to_string()),
            ("--sequence-bits", bits[3].to_string()),
            ("--total-bits", bits[4].to_string()),
            ("--time-unit", unit_name.to_string()),
            ("--epoch", epoch.to_string()),
            ("--datacenter-id", dc.to_string()),
        ]
        .into_iter()
        .flat_map(|(f, v)| [f.to_string(), v])
        .collect(),
    };
    vec![
        make(
            [41, 0, 10, 12, 63],
            TimeUnit::Millisecond,
            "1ms",
            "2025-01-01T00:00:00Z",
            0,
        ),
        make(
            [36, 0, 7, 10, 53],
            TimeUnit::TenMilliseconds,
            "10ms",
            "2024-06-01T00:00:00Z",
            0,
        ),
        make(
            [39, 5, 5, 14, 63],
            TimeUnit::Second,
            "1s",
            "2020-02-29T12:00:00+01:00",
            17,
        ),
    ]
}

fn with_flags<'a>(head: &[&'a str], case: &'a Case) -> Vec<&'a str> {
    head.iter()
        .copied()
        .chain(case.flags.iter().map(String::as_str))
        .collect()
}

#[test]
fn decode_returns_the_fields_that_the_crds_encode_put_in() {
    for case in cases() {
        let max_slot = (1u32 << case.layout.worker_bits()) - 1;
        let max_seq = (1u32 << case.layout.sequence_bits()) - 1;
        let parts = [
            IdParts {
                tick: Tick(12_345),
                datacenter: DatacenterId(case.datacenter),
                slot: Slot(max_slot),
                sequence: max_seq / 2,
            },
            IdParts {
                tick: case.layout.max_tick(),
                datacenter: DatacenterId(case.datacenter),
                slot: Slot(0),
                sequence: max_seq,
            },
        ];
        let ids: Vec<String> = parts
            .iter()
            .map(|p| case.layout.encode(*p).unwrap().to_string())
            .collect();
        let mut args = vec!["decode", ids[0].as_str(), ids[1].as_str(), "-o", "json"];
        args.extend(case.flags.iter().map(String::as_str));
        let out = json(&args);
        let decoded = out["ids"].as_array().expect("ids array");
        assert_eq!(decoded.len(), 2);
        for ((d, p), id) in decoded.iter().zip(&parts).zip(&ids) {
            assert_eq!(d["id"], id.as_str(), "IDs are strings");
            assert_eq!(d["tick"], p.tick.0);
            assert_eq!(d["datacenter"], p.datacenter.0);
            assert_eq!(d["worker"], p.slot.0);
            assert_eq!(d["sequence"], p.sequence);
            assert_eq!(d["time"], rfc3339(case.timebase.start_of(p.tick)).as_str());
        }
        assert_eq!(out["layout"]["workerBits"], case.layout.worker_bits());
        assert_eq!(out["layout"]["source"], "flags");
    }
}

#[test]
fn decode_prints_a_table_with_one_row_per_id() {
    let layout = Layout::default();
    let id = layout
        .encode(IdParts {
            tick: Tick(1000),
            datacenter: DatacenterId(0),
            slot: Slot(513),
            sequence: 7,
        })
        .unwrap();
    let r = run(&["decode", &id.to_string()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "ID",
            "TIME",
            "TICK",
            "DATACENTER",
            "WORKER",
            "SEQUENCE",
            "ABOVE",
            "PREVIOUS"
        ]
    );
    // Tick 1000 at 1 ms after the default epoch 2025-01-01T00:00:00Z is one second later.
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        [
            id.to_string().as_str(),
            "2025-01-01T00:00:01.000Z",
            "1000",
            "0",
            "513",
            "7",
            "-"
        ]
    );
}

#[test]
fn decode_refuses_text_that_is_not_an_id_with_exit_2_and_prints_nothing() {
    let r = run(&["decode", "1", "12abc", "-7"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert!(r.stderr.contains("\"12abc\" is not an ID"), "{}", r.stderr);
    assert!(r.stderr.contains("\"-7\" is not an ID"), "{}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

#[test]
fn decode_refuses_an_id_wider_than_the_layout() {
    // 2^53 needs 54 bits: too wide for a 53-bit layout, fine for the default 63 bits.
    let wide = (1u64 << 53).to_string();
    let r = run(&[
        "decode",
        &wide,
        "--timestamp-bits",
        "36",
        "--worker-bits",
        "7",
        "--sequence-bits",
        "10",
        "--total-bits",
        "53",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    // The crds agree that it does not fit; the message says once which ID and why.
    assert!(
        Layout::new(36, 0, 7, 10, 53)
            .unwrap()
            .decode(Id::new(1 << 53).unwrap())
            .is_err()
    );
    assert_eq!(
        r.stderr,
        format!(
            "error: ID {wide} does not fit the layout of flags: its IDs have 53 bits, so the \
             largest is {}\n",
            (1u64 << 53) - 1
        )
    );
    assert_eq!(run(&["decode", &wide]).code, 0);
}

#[test]
fn ids_with_bit_63_or_above_u64_are_called_too_large_once_each() {
    for text in [
        (1u64 << 63).to_string(),
        u64::MAX.to_string(),
        "123456789012345678901234567890".to_string(),
    ] {
        let r = run(&["decode", &text]);
        assert_eq!(r.code, 2, "bit 63 is never set: {}", r.stderr);
        assert!(r.stdout.is_empty(), "{}", r.stdout);
        assert_eq!(
            r.stderr,
            format!(
                "error: {text} is above the largest 63-bit ID, 9223372036854775807: \
                 no kubeflake ID sets bit 63\n"
            )
        );
    }
    let largest = json(&["decode", &i64::MAX.to_string(), "-o", "json"]);
    assert_eq!(largest["ids"][0]["id"], i64::MAX.to_string().as_str());
}

#[test]
fn decode_checks_the_ids_before_asking_the_cluster_for_the_layout() {
    // No kubeconfig: reaching the cluster would exit 1; the bad ID is found first.
    let r = run(&["decode", "abc", "--sequence", "orders"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("\"abc\" is not an ID"), "{}", r.stderr);
    assert!(!r.stderr.contains("kubeconfig"), "{}", r.stderr);
}

#[test]
fn layout_flags_that_do_not_fit_exit_2_naming_the_flags() {
    let r = run(&["decode", "1", "--worker-bits", "8"]);
    assert_eq!(r.code, 2);
    assert_eq!(
        r.stderr,
        "error: invalid layout flags: --timestamp-bits 41 + --datacenter-bits 0 + \
         --worker-bits 8 + --sequence-bits 12 + --shard-bits 0 add up to 61, but they must add \
         up to --total-bits 63; change one of them (flags not given take the defaults 41, 0, 10, \
         12, 0 and 63)\n"
    );
    let r = run(&["plan", "--timestamp-bits", "29", "--sequence-bits", "24"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .contains("--timestamp-bits is 29, but it must be between 30 and 55"),
        "{}",
        r.stderr
    );
    let r = run(&["plan", "--epoch", "yesterday"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .contains("--epoch \"yesterday\" is not an RFC 3339 time"),
        "{}",
        r.stderr
    );
    let r = run(&[
        "compose",
        "--time",
        "now",
        "--datacenter-bits",
        "2",
        "--worker-bits",
        "8",
        "--datacenter-id",
        "4",
    ]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .contains("--datacenter-id is 4, but --datacenter-bits 2 allows at most 3"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_manifest_given_with_f_supplies_the_layout_and_a_missing_one_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("js.yaml");
    std::fs::write(
        &path,
        "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata:\n  name: js\nspec:\n  \
         layout: {timestampBits: 36, workerBits: 7, sequenceBits: 10, totalBits: 53}\n  timeUnit: 10ms\n",
    )
    .unwrap();
    let layout = Layout::new(36, 0, 7, 10, 53).unwrap();
    let parts = IdParts {
        tick: Tick(99),
        datacenter: DatacenterId(0),
        slot: Slot(100),
        sequence: 1000,
    };
    let id = layout.encode(parts).unwrap().to_string();
    let path_text = path.to_str().unwrap();
    let out = json(&["decode", &id, "-f", path_text, "-o", "json"]);
    assert_eq!(out["ids"][0]["worker"], 100);
    assert_eq!(out["ids"][0]["sequence"], 1000);
    assert_eq!(out["layout"]["timeUnit"], "10ms");

    let missing = dir.path().join("nope.yaml");
    let r = run(&["decode", &id, "-f", missing.to_str().unwrap()]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("cannot read it"), "{}", r.stderr);
    std::fs::write(
        &path,
        "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: wide}\n\
         spec: {layout: {workerBits: 40}}\n",
    )
    .unwrap();
    let r = run(&["decode", &id, "-f", path_text]);
    assert_eq!(r.code, 2);
    // A manifest is spelled in spec fields, so its errors are too.
    let reason = Layout::new(41, 0, 40, 12, 63).unwrap_err().to_string();
    assert_eq!(
        r.stderr,
        format!("error: invalid layout given by -f {path_text} (idsequence wide): {reason}\n")
    );
    assert!(reason.contains("layout.workerBits is 40"), "{reason}");
}

/// Runs the plugin with `stdin` as its standard input.
fn run_with_stdin(args: &[&str], stdin: &str) -> Run {
    use std::io::Write;
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the plugin binary runs");
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(stdin.as_bytes())
        .expect("stdin written");
    child
        .wait_with_output()
        .expect("the plugin finishes")
        .into()
}

#[test]
fn f_dash_reads_the_manifest_from_standard_input() {
    let manifest = "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: js}\n\
                    spec: {layout: {timestampBits: 36, workerBits: 7, sequenceBits: 10, totalBits: 53}, timeUnit: 10ms}\n";
    let r = run_with_stdin(&["plan", "-f", "-", "-o", "json"], manifest);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(out["workers"], 128);
    assert_eq!(out["layout"]["source"], "-f - (idsequence js)");
    assert_eq!(out["javascriptSafe"], true);
    let r = run_with_stdin(&["plan", "-f", "-"], "kind: [");
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .starts_with("error: -f -: not an IdSequence manifest"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_segment_manifest_is_refused_by_decode_compose_and_plan_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("invoices.yaml");
    std::fs::write(
        &path,
        "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: invoices}\n\
         spec: {mode: Segment}\n",
    )
    .unwrap();
    let file = path.to_str().unwrap();
    for args in [
        vec!["decode", "1001", "-f", file],
        vec!["compose", "--time", "2025-06-01T12:00:00Z", "-f", file],
        vec!["plan", "-f", file],
    ] {
        let r = run(&args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(r.stdout.is_empty(), "no invented fields: {}", r.stdout);
        assert!(
            r.stderr.starts_with(&format!(
                "error: -f {file} (idsequence invoices) is a Segment sequence: its values are \
                 plain counter values with no time, datacenter, worker or sequence fields"
            )),
            "{args:?}: {}",
            r.stderr
        );
        assert!(
            r.stderr
                .contains("`kubectl kubeflake slots invoices` shows its counter"),
            "{}",
            r.stderr
        );
    }
}

#[test]
fn decode_prints_yaml_with_ids_as_strings() {
    let id = Layout::default()
        .encode(IdParts {
            tick: Tick(5),
            datacenter: DatacenterId(0),
            slot: Slot(3),
            sequence: 2,
        })
        .unwrap()
        .to_string();
    let r = run(&["decode", &id, "-o", "yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains(&format!("- id: \"{id}\"")),
        "{}",
        r.stdout
    );
    let out: Value = serde_saphyr::from_str(&r.stdout).unwrap();
    assert_eq!(out["ids"][0]["id"], id.as_str());
    assert_eq!(
        (
            &out["ids"][0]["tick"],
            &out["ids"][0]["worker"],
            &out["ids"][0]["sequence"]
        ),
        (&Value::from(5), &Value::from(3), &Value::from(2))
    );
    assert_eq!(out["layout"]["source"], "flags");
}

#[test]
fn compose_bounds_exactly_the_ids_of_the_tick_containing_the_time() {
    for case in cases() {
        let time = "2025-03-04T05:06:07.089Z";
        let args = with_flags(&["compose", "--time", time, "-o", "json"], &case);
        let out = json(&args);
        let unix_ms = chrono::DateTime::parse_from_rfc3339(time)
            .unwrap()
            .timestamp_millis() as u64;
        let tick = case.timebase.tick_at(unix_ms).unwrap();
        assert_eq!(out["tick"], tick.0);
        let id = |key: &str| Id::new(out[key].as_str().unwrap().parse().unwrap()).unwrap();
        let (min, max) = (id("min"), id("max"));
        assert_eq!((min, max), case.layout.id_range_of_tick(tick).unwrap());
        let tick_of = |raw: u64| case.layout.decode(Id::new(raw).unwrap()).unwrap().tick;
        assert_eq!(
            tick_of(min.get() - 1),
            Tick(tick.0 - 1),
            "just below is earlier"
        );
        assert_eq!(
            tick_of(max.get() + 1),
            Tick(tick.0 + 1),
            "just above is later"
        );
        assert_eq!(
            out["tickStart"],
            rfc3339(case.timebase.start_of(tick)).as_str()
        );
    }
}

#[test]
fn compose_prints_min_and_max_for_people_and_accepts_offsets() {
    let utc = run(&["compose", "--time", "2025-06-01T12:00:00Z"]);
    let offset = run(&["compose", "--time", "2025-06-01T14:00:00+02:00"]);
    assert_eq!(utc.code, 0, "{}", utc.stderr);
    assert_eq!(utc.stdout, offset.stdout, "the same instant");
    let (lo, hi) = Layout::default()
        .id_range_of_tick(
            Timebase::parse("2025-01-01T00:00:00Z", TimeUnit::Millisecond)
                .unwrap()
                .tick_at(
                    chrono::DateTime::parse_from_rfc3339("2025-06-01T12:00:00Z")
                        .unwrap()
                        .timestamp_millis() as u64,
                )
                .unwrap(),
        )
        .unwrap();
    assert!(
        utc.stdout.contains(&format!("MIN ID      {lo}")),
        "{}",
        utc.stdout
    );
    assert!(
        utc.stdout.contains(&format!("MAX ID      {hi}")),
        "{}",
        utc.stdout
    );
}

#[test]
fn compose_refuses_bad_times_and_times_outside_the_layout_with_exit_2() {
    let bad = run(&["compose", "--time", "2025-13-01"]);
    assert_eq!(bad.code, 2);
    assert_eq!(
        bad.stderr,
        "error: --time \"2025-13-01\" is not an RFC 3339 time such as 2025-06-01T12:00:00Z \
         (or \"now\")\n"
    );
    let before = run(&["compose", "--time", "2024-12-31T23:59:59.999Z"]);
    assert_eq!(before.code, 2);
    assert!(
        before
            .stderr
            .contains("before the epoch 2025-01-01T00:00:00.000Z"),
        "{}",
        before.stderr
    );
    let before_1970 = run(&["compose", "--time", "1969-07-20T20:17:00Z"]);
    assert_eq!(before_1970.code, 2, "{}", before_1970.stderr);
    let tb = Timebase::parse("2025-01-01T00:00:00Z", TimeUnit::Millisecond).unwrap();
    let end = rfc3339(tb.exhausts_at_ms(&Layout::default()));
    let beyond = run(&["compose", "--time", &end]);
    assert_eq!(beyond.code, 2);
    assert!(
        beyond.stderr.contains(&format!("at or after {end}")),
        "{}",
        beyond.stderr
    );
    let missing = run(&["compose"]);
    assert_eq!(missing.code, 2, "--time is required");
}

#[test]
fn compose_now_is_the_tick_of_the_current_instant() {
    let before = chrono::Utc::now().timestamp_millis() as u64;
    let out = json(&["compose", "--time", "now", "-o", "json"]);
    let after = chrono::Utc::now().timestamp_millis() as u64;
    let tb = Timebase::parse("2025-01-01T00:00:00Z", TimeUnit::Millisecond).unwrap();
    let tick = out["tick"].as_u64().unwrap();
    assert!(
        (tb.tick_at(before).unwrap().0..=tb.tick_at(after).unwrap().0).contains(&tick),
        "{out}"
    );
    let (lo, hi) = Layout::default().id_range_of_tick(Tick(tick)).unwrap();
    assert_eq!(out["min"], lo.to_string().as_str());
    assert_eq!(out["max"], hi.to_string().as_str());
}

#[test]
fn plan_reports_workers_throughput_lifetime_and_javascript_safety() {
    for case in cases() {
        let out = json(&with_flags(&["plan", "-o", "json"], &case));
        assert_eq!(out["workers"], case.layout.slot_count());
        assert_eq!(
            out["idsPerSecondPerWorker"],
            case.timebase.ids_per_second_per_worker(&case.layout)
        );
        assert_eq!(
            out["idsPerSecondTotal"],
            case.timebase.ids_per_second_per_worker(&case.layout) * case.layout.slot_count()
        );
        assert_eq!(
            out["exhaustsAt"],
            rfc3339(case.timebase.exhausts_at_ms(&case.layout)).as_str()
        );
        assert_eq!(out["javascriptSafe"], case.layout.total_bits() <= 53);
        assert_eq!(
            out["maxId"],
            ((1u64 << case.layout.total_bits()) - 1)
                .to_string()
                .as_str()
        );
        let max_id: u64 = out["maxId"].as_str().unwrap().parse().unwrap();
        let top = case.layout.decode(Id::new(max_id).unwrap()).unwrap();
        assert_eq!(top.tick, case.layout.max_tick(), "the last tick");
        assert!(out["yearsLeft"].is_number());
    }
    let table = run(&["plan"]);
    assert_eq!(table.code, 0);
    // 2^12 IDs per 1 ms tick: 4,096,000 per second per worker.
    assert!(table.stdout.contains("4,096,000"), "{}", table.stdout);
    assert!(table.stdout.contains("JAVASCRIPT SAFE"), "{}", table.stdout);
}

#[test]
fn plan_warns_on_stderr_when_replicas_exceed_or_near_the_slots_and_strict_exits_4() {
    // workerBits 3: 8 slots. 80% of 8 is 6.4, so 7 replicas are near the limit.
    let small = ["--worker-bits", "3", "--sequence-bits", "19"];
    let plan = |replicas: &str, strict: bool| {
        let mut args = vec!["plan", "--replicas", replicas];
        args.extend(small);
        if strict {
            args.push("--strict");
        }
        run(&args)
    };
    let over = plan("9", false);
    assert_eq!(over.code, 0, "warnings alone do not fail: {}", over.stderr);
    assert!(
        over.stderr
            .contains("warning: 9 replicas exceed the 8 worker slots"),
        "{}",
        over.stderr
    );
    assert!(!over.stdout.contains("warning"), "warnings stay off stdout");
    let near = plan("7", true);
    assert_eq!(near.code, 4, "{}", near.stderr);
    assert!(
        near.stderr
            .contains("7 replicas use 87% of the 8 worker slots"),
        "{}",
        near.stderr
    );
    let fine = plan("6", true);
    assert_eq!(fine.code, 0, "{}", fine.stderr);
    assert!(fine.stderr.is_empty(), "{}", fine.stderr);
    let negative = plan("-1", false);
    assert_eq!(negative.code, 2, "{}", negative.stderr);
}

#[test]
fn yaml_output_is_the_same_document_as_json() {
    let from_json = json(&[
        "plan",
        "-o",
        "json",
        "--worker-bits",
        "6",
        "--sequence-bits",
        "16",
    ]);
    let r = run(&[
        "plan",
        "-o",
        "yaml",
        "--worker-bits",
        "6",
        "--sequence-bits",
        "16",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let from_yaml: Value = serde_saphyr::from_str(&r.stdout).unwrap();
    // yearsLeft moves with the clock between the two runs; everything else is fixed.
    let strip = |mut v: Value| {
        v.as_object_mut().unwrap().remove("yearsLeft");
        v
    };
    assert_eq!(strip(from_json), strip(from_yaml));
}

#[test]
fn usage_errors_exit_2_and_name_the_flag() {
    let unknown = run(&["decode", "1", "--wroker-bits", "3"]);
    assert_eq!(unknown.code, 2);
    assert!(
        unknown.stderr.contains("--wroker-bits"),
        "{}",
        unknown.stderr
    );
    let unit = run(&["plan", "--time-unit", "5ms"]);
    assert_eq!(unit.code, 2);
    assert!(
        unit.stderr.contains("use 1ms, 10ms, 100ms or 1s"),
        "{}",
        unit.stderr
    );
    let mixed = run(&[
        "decode",
        "1",
        "--sequence",
        "orders",
        "--epoch",
        "2025-01-01T00:00:00Z",
    ]);
    assert_eq!(mixed.code, 2);
    assert!(
        mixed.stderr.contains("cannot be used with"),
        "{}",
        mixed.stderr
    );
    assert_eq!(run(&["decode"]).code, 2, "an ID is required");
    assert_eq!(run(&[]).code, 2, "a command is required");
    let format = run(&["plan", "-o", "xml"]);
    assert_eq!(format.code, 2);
    assert!(format.stderr.contains("xml"), "{}", format.stderr);
}

#[test]
fn help_documents_the_exit_codes() {
    for args in [
        vec!["--help"],
        vec!["slots", "--help"],
        vec!["plan", "--help"],
    ] {
        let r = run(&args);
        assert_eq!(r.code, 0);
        assert!(r.stdout.contains("Exit codes:"), "{args:?}: {}", r.stdout);
        assert!(
            r.stdout.contains("3  the IdSequence was not found"),
            "{}",
            r.stdout
        );
    }
}

#[test]
fn without_a_kubeconfig_cluster_commands_exit_1_saying_what_to_set() {
    let r = run(&["slots", "orders"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("cannot load the kubeconfig"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("KUBECONFIG"), "{}", r.stderr);
    let r = run(&["decode", "1", "--sequence", "orders"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("cannot load the kubeconfig"),
        "{}",
        r.stderr
    );
}

#[test]
fn an_unreachable_api_server_exits_1_without_a_panic() {
    // Port 1 on loopback: nothing listens there, so the connection is refused at once.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\ncurrent-context: dead\n\
         clusters: [{name: dead, cluster: {server: 'http://127.0.0.1:1'}}]\n\
         users: [{name: u, user: {token: t}}]\n\
         contexts: [{name: dead, context: {cluster: dead, user: u, namespace: shop}}]\n",
    )
    .unwrap();
    let r = run_with(&["slots", "orders"], Some(&kubeconfig));
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("cannot read idsequence orders in namespace shop"),
        "the context's namespace is used: {}",
        r.stderr
    );
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    let r = run_with(
        &["slots", "orders", "--context", "missing"],
        Some(&kubeconfig),
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("cannot load the kubeconfig"),
        "{}",
        r.stderr
    );
}

#[test]
fn completion_scripts_name_the_binary_and_its_commands() {
    for shell in ["bash", "zsh", "fish"] {
        let r = run(&["completion", shell]);
        assert_eq!(r.code, 0, "{shell}: {}", r.stderr);
        assert!(r.stdout.contains("kubectl-kubeflake"), "{shell}");
        for command in ["decode", "compose", "plan", "slots"] {
            assert!(r.stdout.contains(command), "{shell} completes {command}");
        }
    }
    assert_eq!(run(&["completion", "tcsh"]).code, 2);
}

#[test]
fn bash_completion_completes_commands_and_the_flags_of_a_command() {
    if Command::new("bash").arg("-c").arg("true").status().is_err() {
        eprintln!("bash is not installed: skipping the bash completion check");
        return;
    }
    let script = run(&["completion", "bash"]);
    assert_eq!(script.code, 0, "{}", script.stderr);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubectl-kubeflake.bash");
    std::fs::write(&path, &script.stdout).unwrap();
    // What bash does on TAB: set COMP_WORDS/COMP_CWORD and call the registered function.
    let complete = |words: &[&str]| {
        let function = script
            .stdout
            .lines()
            .find_map(|l| {
                l.trim_start()
                    .strip_prefix("complete -F ")?
                    .split_whitespace()
                    .next()
            })
            .expect("a complete -F line")
            .to_string();
        let cword = words.len() - 1;
        let program = format!(
            "source {}; COMP_WORDS=({}); COMP_CWORD={cword}; {function} kubectl-kubeflake '{}' '{}'; echo \"${{COMPREPLY[@]}}\"",
            path.display(),
            words.join(" "),
            words[cword],
            words[cword - 1],
        );
        let out = Command::new("bash")
            .arg("-c")
            .arg(program)
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let commands = complete(&["kubectl-kubeflake", "de"]);
    assert_eq!(commands.split_whitespace().collect::<Vec<_>>(), ["decode"]);
    let flags = complete(&["kubectl-kubeflake", "plan", "--tim"]);
    let mut flags: Vec<&str> = flags.split_whitespace().collect();
    flags.sort();
    assert_eq!(flags, ["--time-unit", "--timestamp-bits"]);
}

/// The binary under the name kubectl runs for `kubectl kubeflake <TAB>`, with `words`.
fn complete_as_kubectl_does(words: &[&str]) -> Run {
    let dir = tempfile::tempdir().expect("a temp dir");
    let completer = dir.path().join("kubectl_complete-kubeflake");
    std::os::unix::fs::symlink(BIN, &completer).expect("a symlink");
    Command::new(&completer)
        .args(words)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .expect("the completer runs")
        .into()
}

#[test]
fn linked_as_kubectl_complete_kubeflake_it_answers_kubectls_completion_protocol() {
    let r = complete_as_kubectl_does(&["pl"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(
        lines[0].starts_with("plan\t"),
        "candidate and description: {lines:?}"
    );
    assert_eq!(
        lines.last(),
        Some(&":4"),
        "the directive comes last: {lines:?}"
    );
    assert_eq!(lines.len(), 2, "{lines:?}");

    let r = complete_as_kubectl_does(&["slots", "orders", "--a"]);
    assert!(r.stdout.starts_with("--all\t"), "{}", r.stdout);
    let r = complete_as_kubectl_does(&["compose", "-o", "y"]);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(
        lines.len() == 2 && lines[0].split('\t').next() == Some("yaml"),
        "{lines:?}"
    );
    assert_eq!(lines[1], ":4");
    // Under its own name nothing changes: a bare word is a usage error.
    assert_eq!(run(&["pl"]).code, 2);
}

#[test]
fn decode_reads_base32_and_base62_ids_and_shows_them_in_decimal() {
    for case in cases() {
        let max_seq = (1u32 << case.layout.sequence_bits()) - 1;
        let ids: Vec<u64> = [Tick(0), Tick(777), case.layout.max_tick()]
            .into_iter()
            .map(|tick| {
                let parts = IdParts {
                    tick,
                    datacenter: DatacenterId(case.datacenter),
                    slot: Slot(1),
                    sequence: max_seq,
                };
                case.layout.encode(parts).unwrap().get()
            })
            .collect();
        let decimal: Vec<String> = ids.iter().map(u64::to_string).collect();
        let decimal_args: Vec<&str> = decimal.iter().map(String::as_str).collect();
        let expected = json(&with_flags(
            &[&["decode"], &decimal_args[..], &["-o", "json"]].concat(),
            &case,
        ));
        for form in [TextForm::Base32, TextForm::Base62] {
            let texts: Vec<String> = ids.iter().map(|id| form.encode(*id)).collect();
            let text_args: Vec<&str> = texts.iter().map(String::as_str).collect();
            let head = [
                &["decode", "--format", form.name()],
                &text_args[..],
                &["-o", "json"],
            ]
            .concat();
            assert_eq!(json(&with_flags(&head, &case)), expected, "{form}");
        }
    }
    // Base32 in any case, with Crockford's look-alikes; leading zeros may be left out.
    let lower = json(&["decode", "--format", "base32", "6y45hnz00000", "-o", "json"]);
    assert_eq!(lower["ids"][0]["id"], "250096622069874688");
}

#[test]
fn decode_refuses_a_text_that_is_not_an_id_in_its_format_with_exit_2_naming_each() {
    let r = run(&[
        "decode",
        "--format",
        "base32",
        "06Y45HNU00000",
        "8000000000000",
        "1",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert_eq!(
        r.stderr,
        "error: \"06Y45HNU00000\" is not a base32 ID: 'U' (character 8) is not a base32 digit; \
         the digits are Crockford's 0-9 and A-Z without I, L, O and U, in any case (I and L are \
         read as 1, O as 0)\n\
         error: \"8000000000000\" is not a base32 ID: its value is 2^63 or more, and the largest \
         ID is 7ZZZZZZZZZZZZ\n"
    );
    // A decimal ID given as base62 is too long for it, not silently another number.
    let r = run(&["decode", "--format", "base62", "250096622069874688"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("it has 18 characters, but base62 IDs have at most 11"),
        "{}",
        r.stderr
    );
}

#[test]
fn an_unknown_format_is_a_usage_error_naming_the_flag_and_the_forms() {
    for args in [
        vec!["decode", "1", "--format", "hex"],
        vec!["compose", "--time", "now", "--format", "Base32"],
    ] {
        let r = run(&args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("for '--format <FORM>'"),
            "{args:?}: {}",
            r.stderr
        );
        assert!(
            r.stderr
                .contains("[possible values: decimal, base32, base62]"),
            "{args:?}: {}",
            r.stderr
        );
    }
}

#[test]
fn compose_prints_the_bounds_in_the_format_asked_for_and_they_sort_like_the_ids() {
    let times = [
        "2025-03-04T05:06:07.089Z",
        "2025-03-04T05:06:07.090Z",
        "2031-01-01T00:00:00Z",
    ];
    let decimal: Vec<Value> = times
        .iter()
        .map(|t| json(&["compose", "--time", t, "-o", "json"]))
        .collect();
    let value = |out: &Value, key: &str| out[key].as_str().unwrap().parse::<u64>().unwrap();
    for form in [TextForm::Base32, TextForm::Base62] {
        let mut bounds = Vec::new();
        for (time, expected) in times.iter().zip(&decimal) {
            let out = json(&[
                "compose",
                "--time",
                time,
                "--format",
                form.name(),
                "-o",
                "json",
            ]);
            for key in ["min", "max"] {
                assert_eq!(
                    out[key],
                    form.encode(value(expected, key)).as_str(),
                    "{form} {key}"
                );
                bounds.push(out[key].as_str().unwrap().to_string());
            }
            assert_eq!(out["tick"], expected["tick"], "only the IDs change");
        }
        let mut sorted = bounds.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted, bounds,
            "{form}: min(T1) <= max(T1) < min(T2) ... as text"
        );
        let table = run(&["compose", "--time", times[0], "--format", form.name()]);
        let min = form.encode(value(&decimal[0], "min"));
        assert!(
            table.stdout.contains(&format!("MIN ID      {min}")),
            "{}",
            table.stdout
        );
    }
}

#[test]
fn format_values_complete_through_kubectl() {
    let r = complete_as_kubectl_does(&["decode", "1", "--format", "base"]);
    let candidates: Vec<&str> = r
        .stdout
        .lines()
        .filter_map(|l| l.split('\t').next())
        .collect();
    assert_eq!(candidates, ["base32", "base62", ":4"], "{}", r.stdout);
}

#[test]
fn key_form_flags_give_compose_one_range_per_shard_and_errors_name_the_flags() {
    let report = json(&[
        "compose",
        "--time",
        "2025-01-01T00:00:01.500Z",
        "--timestamp-bits",
        "37",
        "--shard-bits",
        "4",
        "--sequence-start",
        "rotating",
        "-o",
        "json",
    ]);
    assert_eq!(
        report["shards"].as_array().map(Vec::len),
        Some(16),
        "{report}"
    );
    assert_eq!(report["layout"]["shardBits"], 4);
    assert_eq!(report["layout"]["sequenceStart"], "Rotating");
    assert!(report.get("min").is_none(), "no single ID range: {report}");
    let reversed = json(&[
        "compose",
        "--time",
        "2025-01-01T00:00:01Z",
        "--bit-reversed",
        "-o",
        "json",
    ]);
    assert!(
        reversed["minKey"].is_string() && reversed.get("min").is_none(),
        "{reversed}"
    );

    let plan = run(&[
        "plan",
        "--timestamp-bits",
        "33",
        "--shard-bits",
        "8",
        "--sequence-start",
        "rotating",
    ]);
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    assert!(
        plan.stdout
            .contains("+ 8 shard bits, total 63); rotating sequence start"),
        "the plan names the key form: {}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains("2025-04-10"),
        "33 bits of 1 ms last 99 days: {}",
        plan.stdout
    );

    for (args, names) in [
        (
            &["--shard-bits", "4"][..],
            &["--shard-bits 4", "add up to 67"][..],
        ),
        (
            &["--shard-bits", "11", "--timestamp-bits", "30"],
            &["--shard-bits is 11"],
        ),
        (
            &[
                "--shard-bits",
                "4",
                "--timestamp-bits",
                "37",
                "--bit-reversed",
            ],
            &["--shard-bits and --bit-reversed"],
        ),
        (
            &[
                "--sequence-start",
                "rotating",
                "--sequence-bits",
                "0",
                "--timestamp-bits",
                "53",
            ],
            &["--sequence-start rotating needs --sequence-bits"],
        ),
    ] {
        let mut all = vec!["compose", "--time", "2025-01-01T00:00:01Z"];
        all.extend_from_slice(args);
        let r = run(&all);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        for name in names {
            assert!(r.stderr.contains(name), "{args:?}: {}", r.stderr);
        }
    }
}
