//! The HTTP API, served in-process by a standalone sidecar on a manual clock.

mod support;

use std::sync::Arc;
use std::time::Duration;

use kubeflake_crds::IdSequenceSpec;
use kubeflake_sidecar::clock::ManualClock;
use kubeflake_sidecar::standalone::StandaloneConfig;
use support::{InProcess, get, request, snowflake_in_process, wait_for};

const NOW_MS: u64 = 1_800_000_000_000;

/// An in-process standalone sidecar (worker 5) on a manual clock, with its state directory.
struct Server {
    clock: Arc<ManualClock>,
    served: InProcess<tempfile::TempDir>,
}

impl std::ops::Deref for Server {
    type Target = InProcess<tempfile::TempDir>;
    fn deref(&self) -> &Self::Target {
        &self.served
    }
}

impl Server {
    fn start() -> Server {
        Server::start_with(IdSequenceSpec::default())
    }

    fn start_with(spec: IdSequenceSpec) -> Server {
        let clock = Arc::new(ManualClock::at_millis(NOW_MS));
        let state = tempfile::tempdir().unwrap();
        let config = StandaloneConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            listen_unix: None,
            state_dir: state.path().to_path_buf(),
            worker_id: 5,
            sequence_name: "http-test".into(),
            sequence: spec.params().unwrap(),
            max_batch: 10_000,
            fence_ahead: Duration::from_millis(1000),
            drain: Duration::from_secs(5),
        };
        Server {
            served: snowflake_in_process(state, config, clock.clone()),
            clock,
        }
    }

    fn state(&self) -> &std::path::Path {
        self.served.kept().path()
    }
}

#[test]
fn decode_of_a_sharded_id_names_its_shard_and_key_and_refuses_a_mistyped_one() {
    let mut spec = IdSequenceSpec::default();
    spec.layout.timestamp_bits = 37;
    spec.layout.shard_bits = 4;
    spec.layout.sequence_start = kubeflake_crds::sequence::SequenceStartSpec::Rotating;
    let layout = spec.params().unwrap().layout;
    let s = Server::start_with(spec);
    let id: u64 = get(s.addr, "/id").body.trim().parse().expect("decimal ID");
    let decoded = get(s.addr, &format!("/decode/{id}")).json();
    assert_eq!(decoded["worker"], 5);
    assert_eq!(decoded["time"], "2027-01-15T08:00:00.000Z");
    assert_eq!(decoded["shard"], id >> 59, "the top 4 of 63 bits");
    assert_eq!(decoded["key"], (id & ((1 << 59) - 1)).to_string());
    let parts = layout.decode(kubeflake_crds::Id::new(id).unwrap()).unwrap();
    assert_eq!(decoded["sequence"], parts.sequence);
    // The same ID with another shard: not an ID of this sequence.
    let mistyped = id ^ (1 << 59);
    let refused = get(s.addr, &format!("/decode/{mistyped}"));
    assert_eq!(refused.status, 400);
    assert!(refused.body.contains("copied whole"), "{}", refused.body);
    let refused = get(s.addr, &format!("/id?after={mistyped}"));
    assert_eq!(refused.status, 400);
    assert!(refused.body.contains("shard"), "{}", refused.body);
}

#[test]
fn rule12_after_answers_later_in_the_sequence_order_for_bit_reversed_ids() {
    let mut spec = IdSequenceSpec::default();
    spec.layout.bit_reversed = true;
    let layout = spec.params().unwrap().layout;
    let s = Server::start_with(spec);
    let order = |id: u64| {
        let p = layout.decode(kubeflake_crds::Id::new(id).unwrap()).unwrap();
        (p.tick, p.slot, p.sequence)
    };
    // An ID a later tick from a larger worker than this sidecar's 5.
    let ahead = layout
        .encode(kubeflake_crds::IdParts {
            tick: kubeflake_crds::Tick(
                order(get(s.addr, "/id").body.trim().parse().unwrap()).0.0 + 3,
            ),
            datacenter: kubeflake_crds::DatacenterId(0),
            slot: kubeflake_crds::Slot(9),
            sequence: 7,
        })
        .unwrap()
        .get();
    s.clock.advance_millis(10);
    let answer: u64 = get(s.addr, &format!("/id?after={ahead}"))
        .body
        .trim()
        .parse()
        .unwrap();
    assert!(order(answer) > order(ahead), "{answer} after {ahead}");
}

#[test]
fn id_is_decimal_text_and_decode_round_trips_it() {
    let s = Server::start();
    let answer = get(s.addr, "/id");
    assert_eq!(answer.status, 200);
    let id: u64 = answer.body.trim().parse().expect("decimal ID");
    let decoded = get(s.addr, &format!("/decode/{id}")).json();
    assert_eq!(decoded["id"], id.to_string());
    assert_eq!(decoded["worker"], 5);
    assert_eq!(decoded["datacenter"], 0);
    assert_eq!(decoded["time"], "2027-01-15T08:00:00.000Z");
    let layout = kubeflake_crds::Layout::default();
    let tick = decoded["tick"].as_u64().unwrap();
    let seq = decoded["sequence"].as_u64().unwrap() as u32;
    let rebuilt = layout
        .encode(kubeflake_crds::IdParts {
            tick: kubeflake_crds::Tick(tick),
            datacenter: kubeflake_crds::DatacenterId(0),
            slot: kubeflake_crds::Slot(5),
            sequence: seq,
        })
        .unwrap();
    assert_eq!(rebuilt.get(), id);
}

#[test]
fn json_ids_are_strings_so_javascript_keeps_every_digit() {
    let s = Server::start();
    let one = request(s.addr, "GET", "/id", &[("Accept", "application/json")]).unwrap();
    assert!(one.json()["id"].is_string(), "{}", one.body);
    let many = request(
        s.addr,
        "GET",
        "/ids?count=3",
        &[("Accept", "application/json")],
    )
    .unwrap();
    let ids = many.json()["ids"].as_array().unwrap().clone();
    assert_eq!(ids.len(), 3);
    assert!(ids.iter().all(|v| v.is_string()));
}

#[test]
fn ids_batch_returns_count_unique_increasing_ids() {
    let s = Server::start();
    let answer = get(s.addr, "/ids?count=10000");
    assert_eq!(answer.status, 200);
    let ids: Vec<u64> = answer.body.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(ids.len(), 10_000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let next: u64 = get(s.addr, "/id").body.trim().parse().unwrap();
    assert!(next > *ids.last().unwrap());
}

#[test]
fn bad_http_input_gets_4xx_with_a_json_error_and_the_server_keeps_serving() {
    let s = Server::start();
    let cases: &[(&str, &str, u16, &str)] = &[
        ("GET", "/ids", 400, "missing query parameter count"),
        (
            "GET",
            "/ids?count=0",
            400,
            "count must be a whole number from 1 to 10000",
        ),
        ("GET", "/ids?count=-5", 400, "count must be"),
        ("GET", "/ids?count=abc", 400, "count must be"),
        ("GET", "/ids?count=10001", 400, "from 1 to 10000"),
        (
            "GET",
            "/ids?count=99999999999999999999999",
            400,
            "count must be",
        ),
        ("GET", "/ids?count=1.5", 400, "count must be"),
        ("GET", "/ids?count=1&count=2", 400, "given twice"),
        (
            "GET",
            "/ids?count=5&size=3",
            400,
            "unknown query parameter \\\"size\\\"",
        ),
        ("GET", "/id?count=3", 400, "unknown query parameter"),
        ("GET", "/decode/abc", 400, "is not an ID"),
        ("GET", "/decode/", 400, "is not an ID"),
        ("GET", "/decode/-1", 400, "is not an ID"),
        ("GET", "/decode/9223372036854775808", 400, "does not fit"),
        ("GET", "/decode/18446744073709551616", 400, "is not an ID"),
        ("GET", "/nope", 404, "no route /nope"),
        ("GET", "/", 404, "no route /"),
        ("POST", "/id", 405, "method POST is not allowed on /id"),
        ("DELETE", "/ids?count=1", 405, "use GET"),
        ("PUT", "/decode/1", 405, "use GET"),
    ];
    for &(method, target, status, message) in cases {
        let answer = request(s.addr, method, target, &[]).unwrap();
        assert_eq!(answer.status, status, "{method} {target}: {}", answer.body);
        assert_eq!(
            answer.header("content-type"),
            Some("application/json"),
            "{method} {target}"
        );
        let error = answer.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(answer.body.contains(message), "{method} {target}: {error}");
        assert_eq!(
            get(s.addr, "/id").status,
            200,
            "still serving after {method} {target}"
        );
    }
    let malformed = {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(s.addr).unwrap();
        c.write_all(b"NOT HTTP AT ALL\r\n\r\n").unwrap();
        let mut out = String::new();
        let _ = c.read_to_string(&mut out);
        out
    };
    assert!(
        malformed.is_empty() || malformed.starts_with("HTTP/1.1 4"),
        "{malformed}"
    );
    assert_eq!(
        get(s.addr, "/id").status,
        200,
        "still serving after a malformed request"
    );
}

#[test]
fn rule8_large_rollback_is_refused_with_503_and_retry_after_then_recovers() {
    let s = Server::start();
    let before: u64 = get(s.addr, "/id").body.trim().parse().unwrap();
    s.clock.step_back_millis(10_000);
    let refused = get(s.addr, "/id");
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.header("retry-after"), Some("8"));
    assert_eq!(refused.json()["reason"], "ahead_of_clock");
    assert_eq!(
        get(s.addr, "/readyz").status,
        503,
        "not ready while refusing"
    );
    // The step is detected and counted by the clock watcher.
    wait_for(Duration::from_secs(5), "rollback metric", || {
        get(s.addr, "/metrics")
            .body
            .contains("kubeflake_clock_rollbacks_total 1")
            .then_some(())
    });
    assert!(
        get(s.addr, "/metrics")
            .body
            .contains("kubeflake_refusals_total{reason=\"ahead_of_clock\"} 1")
    );
    s.clock.advance_millis(8_000);
    let after = get(s.addr, "/id");
    assert_eq!(after.status, 200, "recovered by itself: {}", after.body);
    assert!(after.body.trim().parse::<u64>().unwrap() > before);
    assert_eq!(get(s.addr, "/readyz").status, 200);
}

#[test]
fn rule3_fence_running_out_is_refused_with_503_until_it_can_be_written_again() {
    let s = Server::start();
    assert_eq!(get(s.addr, "/id").status, 200);
    // Make every fence write fail: the temporary file's path is taken by a directory.
    let blocker = s.state().join("http-test-worker-5.fence.tmp");
    std::fs::create_dir(&blocker).unwrap();
    // More than half of the fence's margin (1 s) used: a write falls due, and fails.
    s.clock.advance_millis(600);
    wait_for(Duration::from_secs(5), "a failed fence write", || {
        (!get(s.addr, "/metrics")
            .body
            .contains("kubeflake_fence_writes_total{result=\"error\"} 0"))
        .then_some(())
    });
    s.clock.advance_millis(3_000); // past the last fence written (drift 2 s + 1 s ahead of start)
    let refused = get(s.addr, "/id");
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.json()["reason"], "fence_reached");
    assert!(refused.header("retry-after").is_some());
    assert_eq!(get(s.addr, "/readyz").status, 503);
    std::fs::remove_dir(&blocker).unwrap();
    wait_for(
        Duration::from_secs(5),
        "serving again after the fence is renewed",
        || (get(s.addr, "/id").status == 200).then_some(()),
    );
}

/// The number of fence writes that succeeded, from `/metrics`.
fn fence_writes_ok(s: &Server) -> u64 {
    let metrics = get(s.addr, "/metrics").body;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("kubeflake_fence_writes_total{result=\"ok\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no fence write count in\n{metrics}"))
}

#[test]
fn rule6_an_idle_sidecar_writes_no_fence_and_its_next_id_waits_for_one_write() {
    let s = Server::start();
    assert_eq!(get(s.addr, "/id").status, 200);
    // Let the renewal task (every 250 ms) write what that ID made due, then go idle.
    s.clock.advance_millis(600);
    std::thread::sleep(Duration::from_millis(600));
    let before = fence_writes_ok(&s);
    // 10 s pass on the clock, far beyond the fence written (drift 2 s + 1 s ahead), with
    // several renewal periods of real time for a write to happen if one were made unasked.
    for _ in 0..10 {
        s.clock.advance_millis(1_000);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        fence_writes_ok(&s),
        before,
        "an idle sidecar writes no fence"
    );
    assert_eq!(get(s.addr, "/readyz").status, 200, "and is still ready");
    let id = get(s.addr, "/id");
    assert_eq!(
        id.status, 200,
        "the next ID waits for one write: {}",
        id.body
    );
    assert_eq!(
        fence_writes_ok(&s),
        before + 1,
        "exactly one write, asked by the ID"
    );
    let on_disk: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.state().join("http-test-worker-5.fence")).unwrap())
            .unwrap();
    let id: u64 = id.body.trim().parse().unwrap();
    let layout = IdSequenceSpec::default().params().unwrap().layout;
    let tick = layout
        .decode(kubeflake_crds::Id::new(id).unwrap())
        .unwrap()
        .tick
        .0;
    assert!(
        tick <= on_disk["fenceTick"].as_u64().unwrap(),
        "served only below the fence written"
    );
}

#[test]
fn health_readiness_and_metrics_answer() {
    let s = Server::start();
    assert_eq!(get(s.addr, "/healthz").status, 200);
    assert_eq!(get(s.addr, "/readyz").json()["status"], "ready");
    get(s.addr, "/ids?count=7");
    let metrics = get(s.addr, "/metrics").body;
    for needle in [
        "kubeflake_ids_issued_total 7",
        "kubeflake_http_requests_total{code=\"200\",route=\"ids\"} 1",
        "kubeflake_ready 1",
        "kubeflake_worker_slot 5",
        "kubeflake_fence_headroom_seconds",
        "kubeflake_generator_ahead_of_clock_seconds 0",
    ] {
        assert!(metrics.contains(needle), "missing {needle} in\n{metrics}");
    }
}

#[test]
fn every_id_answer_and_refusal_is_counted_by_route_and_status() {
    let s = Server::start();
    for _ in 0..3 {
        assert_eq!(get(s.addr, "/id").status, 200);
    }
    let json = request(s.addr, "GET", "/id", &[("Accept", "application/json")]).unwrap();
    assert_eq!(json.status, 200);
    assert!(json.json()["id"].is_string(), "{}", json.body);
    assert_eq!(get(s.addr, "/id?x=1").status, 400);
    let metrics = get(s.addr, "/metrics").body;
    for needle in [
        "kubeflake_ids_issued_total 4",
        "kubeflake_http_requests_total{code=\"200\",route=\"id\"} 4",
        "kubeflake_http_requests_total{code=\"400\",route=\"id\"} 1",
        "kubeflake_http_request_duration_seconds_count{route=\"id\"} 5",
    ] {
        assert!(metrics.contains(needle), "missing {needle} in\n{metrics}");
    }
}
