//! `format=decimal|base32|base62` over HTTP (issue 25 point 4): `/id` and `/ids` answer in
//! the form asked for, as text and as JSON strings, in both modes; `/decode` reads the
//! same forms; a bad `format` or text is a 400 that says what to send. The servers run
//! in-process, Snowflake on a manual clock.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kubeflake_crds::sequence::SegmentParams;
use kubeflake_crds::{IdSequenceSpec, TextForm};
use kubeflake_sidecar::clock::ManualClock;
use kubeflake_sidecar::standalone::{SegmentStandaloneConfig, StandaloneConfig};
use support::{Answer, InProcess, get, request, segment_in_process, snowflake_in_process};

const NOW_MS: u64 = 1_800_000_000_000;

type Server = InProcess<tempfile::TempDir>;

/// A standalone Snowflake sidecar, worker 5, default layout.
fn snowflake() -> Server {
    let state = tempfile::tempdir().unwrap();
    let config = StandaloneConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        listen_unix: None,
        state_dir: state.path().to_path_buf(),
        worker_id: 5,
        sequence_name: "text-forms".into(),
        sequence: IdSequenceSpec::default().params().unwrap(),
        max_batch: 10_000,
        fence_ahead: Duration::from_secs(30),
        drain: Duration::from_secs(5),
    };
    let clock = Arc::new(ManualClock::at_millis(NOW_MS));
    snowflake_in_process(state, config, clock)
}

/// A standalone segment sidecar whose counter starts at `start`.
fn segment(start: u64) -> Server {
    let state = tempfile::tempdir().unwrap();
    let config = SegmentStandaloneConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        listen_unix: None,
        state_dir: state.path().to_path_buf(),
        sequence_name: "text-forms".into(),
        segment: SegmentParams {
            start,
            block_size: 100,
            max_block_size: 100,
            prefetch_percent: 50,
            target_claim_interval_secs: 60,
            strict: false,
        },
        max_batch: 10_000,
        max_range: 1_000_000,
        drain: Duration::from_secs(5),
    };
    segment_in_process(state, config)
}

fn json_get(addr: SocketAddr, target: &str) -> Answer {
    request(addr, "GET", target, &[("Accept", "application/json")]).unwrap()
}

/// The lines of a 200 text answer.
fn lines(answer: &Answer) -> Vec<String> {
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.header("content-type"), Some("text/plain"));
    answer.body.lines().map(str::to_string).collect()
}

/// Every ID a server hands out, in the three forms: one `/id`, then batches, as text and
/// as JSON, in the order they were issued.
fn issued_texts(server: &Server, form: TextForm) -> Vec<String> {
    let name = form.name();
    let mut texts = lines(&get(server.addr, &format!("/id?format={name}")));
    texts.extend(lines(&get(
        server.addr,
        &format!("/ids?count=300&format={name}"),
    )));
    let one = json_get(server.addr, &format!("/id?format={name}"));
    assert_eq!(one.status, 200, "{}", one.body);
    texts.push(
        one.json()["id"]
            .as_str()
            .expect("a JSON string")
            .to_string(),
    );
    let many = json_get(server.addr, &format!("/ids?format={name}&count=3"));
    assert_eq!(many.status, 200, "{}", many.body);
    for id in many.json()["ids"].as_array().unwrap() {
        texts.push(id.as_str().expect("JSON strings").to_string());
    }
    texts
}

/// The answer's texts have the form's width and alphabet, read back to increasing IDs,
/// and (fixed width) are already in byte order: sorting them changes nothing.
fn check_form(server: &Server, form: TextForm) -> Vec<u64> {
    let texts = issued_texts(server, form);
    let values: Vec<u64> = texts
        .iter()
        .map(|t| form.parse(t).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{form}: {texts:?}");
    if let Some(width) = form.width() {
        assert!(texts.iter().all(|t| t.len() == width), "{form}: {texts:?}");
        let mut sorted = texts.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, texts, "{form}: byte order is issue order");
    }
    values
}

#[test]
fn snowflake_ids_come_in_the_form_asked_for_and_decode_reads_that_form_back() {
    let s = snowflake();
    for form in TextForm::ALL {
        check_form(&s, form);
    }
    let id: u64 = get(s.addr, "/id").body.trim().parse().unwrap();
    let decimal = get(s.addr, &format!("/decode/{id}")).json();
    for form in [TextForm::Base32, TextForm::Base62] {
        let text = form.encode(id);
        let answer = get(s.addr, &format!("/decode/{form}/{text}"));
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(
            answer.json(),
            decimal,
            "the reply does not depend on the form"
        );
        assert_eq!(answer.json()["id"], id.to_string(), "id stays decimal");
    }
    let lower = TextForm::Base32.encode(id).to_lowercase();
    let answer = get(s.addr, &format!("/decode/base32/{lower}"));
    assert_eq!(answer.json(), decimal, "base32 is read in any case");
    let short = TextForm::Base62
        .encode(id)
        .trim_start_matches('0')
        .to_string();
    let answer = get(s.addr, &format!("/decode/base62/{short}"));
    assert_eq!(answer.json(), decimal, "leading zeros may be left out");
}

#[test]
fn after_and_format_combine() {
    let s = snowflake();
    let x: u64 = get(s.addr, "/id").body.trim().parse().unwrap();
    let one = get(s.addr, &format!("/id?after={x}&format=base32"));
    let got = TextForm::Base32.parse(lines(&one)[0].as_str()).unwrap();
    assert!(got > x);
    let many = get(s.addr, &format!("/ids?format=base62&count=5&after={got}"));
    let values: Vec<u64> = lines(&many)
        .iter()
        .map(|t| TextForm::Base62.parse(t).unwrap())
        .collect();
    assert!(values[0] > got && values.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn segment_values_come_in_the_form_asked_for_and_decode_reads_that_form_back() {
    let s = segment(1_000);
    let values = check_form(&s, TextForm::Base32);
    assert_eq!(values[0], 1_000, "a fresh counter starts at segment.start");
    check_form(&s, TextForm::Base62);
    let answer = get(s.addr, "/id?format=base62");
    assert_eq!(lines(&answer), [TextForm::Base62.encode(1_610)]);
    let decoded = get(s.addr, "/decode/base32/0000000000zz");
    assert_eq!(decoded.status, 200, "{}", decoded.body);
    assert_eq!(decoded.json()["id"], (31 * 32 + 31).to_string());
    assert_eq!(decoded.json()["mode"], "Segment");
    let decoded = get(s.addr, "/decode/base62/AzL8n0Y58m7");
    assert_eq!(decoded.json()["id"], i64::MAX.to_string());
}

/// Every refusal is a 400 with the JSON error body, and names what to send instead.
fn assert_refused(server: &Server, target: &str, message: &str) {
    let answer = get(server.addr, target);
    assert_eq!(answer.status, 400, "{target}: {}", answer.body);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let error = answer.json()["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(error.contains(message), "{target}: {error}");
}

#[test]
fn an_unknown_format_is_a_400_naming_the_parameter_and_the_forms() {
    let s = snowflake();
    let forms = "is not a text form of IDs: use decimal, base32 or base62";
    for target in [
        "/id?format=hex",
        "/id?format=",
        "/id?format",
        "/ids?count=3&format=BASE32",
        "/decode/1?format=base64",
    ] {
        assert_refused(&s, target, "query parameter format: ");
        assert_refused(&s, target, forms);
    }
    assert_refused(
        &s,
        "/id?format=base32&format=base62",
        "query parameter \"format\" is given twice",
    );
    assert_refused(&s, "/decode/1?after=2", "unknown query parameter \"after\"");
    assert_refused(&s, "/decode/base32/1?after=2", "unknown query parameter");
    assert_eq!(get(s.addr, "/id").status, 200, "still serving");
}

/// The text form of `/decode` is in its path, so that the OpenAPI document can say which
/// texts each path takes; a `format=` there names the path to ask instead.
#[test]
fn decode_with_a_format_parameter_is_a_400_naming_the_path_to_ask() {
    for s in [snowflake(), segment(1)] {
        assert_refused(
            &s,
            "/decode/7ZZZZZZZZZZZZ?format=base32",
            "ask /decode/base32/<id>",
        );
        assert_refused(&s, "/decode/1?format=decimal", "ask /decode/<id>");
        assert_refused(
            &s,
            "/decode/base62/1?format=base62",
            "ask /decode/base62/<id>",
        );
    }
}

#[test]
fn a_text_that_is_not_an_id_in_the_form_is_a_400_saying_why() {
    for s in [snowflake(), segment(1)] {
        assert_refused(
            &s,
            "/decode/base32/8000000000000",
            "its value is 2^63 or more, and the largest ID is 7ZZZZZZZZZZZZ",
        );
        assert_refused(
            &s,
            "/decode/base62/AzL8n0Y58m8",
            "the largest ID is AzL8n0Y58m7",
        );
        assert_refused(
            &s,
            "/decode/base32/06Y45HNU00000",
            "'U' (character 8) is not a base32 digit",
        );
        assert_refused(
            &s,
            "/decode/base62/250096622069874688",
            "it has 18 characters, but base62 IDs have at most 11",
        );
        assert_refused(&s, "/decode/base32/", "an empty text is not a base32 ID");
        // Decimal stays digits only: a sign is not a digit.
        assert_refused(&s, "/decode/+5", "\"+5\" is not a");
    }
}
