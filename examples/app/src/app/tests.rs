use super::*;
use crate::sidecar::SidecarUrl;

#[test]
fn count_bounds() {
    assert_eq!(parse_count("count=1"), Ok(1));
    assert_eq!(parse_count("count=1000"), Ok(1000));
    assert_eq!(parse_count("&count=7&"), Ok(7));
    for bad in [
        "count=0",
        "count=1001",
        "count=-1",
        "count=+5",
        "count=",
        "count",
        "count=abc",
        "count=1.5",
        "count=99999999999999999999",
    ] {
        let message = parse_count(bad).unwrap_err();
        assert!(
            message.contains("count must be a whole number from 1 to 1000"),
            "{bad:?}: {message}"
        );
    }
    assert!(
        parse_count("")
            .unwrap_err()
            .contains("missing query parameter count")
    );
    assert!(
        parse_count("count=1&count=2")
            .unwrap_err()
            .contains("given twice")
    );
    assert!(
        parse_count("count=1&size=5")
            .unwrap_err()
            .contains("unknown query parameter \"size\"")
    );
}

#[test]
fn query_params_split_and_refuse_unknown_keys() {
    assert_eq!(
        query_params("a=1&b=&c", &["a", "b", "c"]),
        Ok(vec![("a", "1"), ("b", ""), ("c", "")])
    );
    assert_eq!(query_params("", &[]), Ok(vec![]));
    assert!(query_params("x=1", &[]).unwrap_err().contains("takes none"));
}

#[test]
fn bodies_carry_ids_as_strings() {
    assert_eq!(
        id_body(18446744073709551615, "web-0").to_string(),
        r#"{"id":"18446744073709551615","pod":"web-0"}"#
    );
    assert_eq!(
        ids_body(&[1, 250096622069874688], "").to_string(),
        r#"{"ids":["1","250096622069874688"],"pod":""}"#
    );
    assert_eq!(ids_body(&[], "p").to_string(), r#"{"ids":[],"pod":"p"}"#);
    // A pod name is escaped, never spliced in raw.
    assert_eq!(id_body(5, "a\"b").to_string(), r#"{"id":"5","pod":"a\"b"}"#);
    assert_eq!(
        Response::error(400, "bad \"x\"").body,
        r#"{"error":"bad \"x\""}"#
    );
}

#[test]
fn responses_serialise_as_http_1_1() {
    let r = Response::error(405, "no").with_header("Allow", "GET");
    let wire = String::from_utf8(r.to_bytes()).unwrap();
    assert_eq!(
        wire,
        "HTTP/1.1 405 Method Not Allowed\r\nContent-Type: application/json\r\n\
             Content-Length: 14\r\nConnection: close\r\nAllow: GET\r\n\r\n{\"error\":\"no\"}"
    );
    let wire = String::from_utf8(Response::text(200, "ok").to_bytes()).unwrap();
    assert!(wire.starts_with("HTTP/1.1 200 OK\r\n"), "{wire}");
    assert!(wire.contains("\r\nContent-Length: 2\r\n"), "{wire}");
    assert!(wire.ends_with("\r\n\r\nok"), "{wire}");
}

#[test]
fn an_after_the_sidecar_cannot_honour_yet_is_409_with_its_retry_after() {
    let conflict = SidecarError::AfterConflict {
        request: "GET /id?after=5".into(),
        body: r#"{"error":"...","reason":"after_ahead_of_clock"}"#.into(),
        retry_after: Some("3".into()),
    };
    let r = sidecar_failure(&conflict);
    assert_eq!(r.status, 409);
    assert_eq!(r.headers, vec![("Retry-After", "3".to_string())]);
    assert!(r.body.contains("after_ahead_of_clock"), "{}", r.body);
    assert_eq!(parse_after("after=12", &["after"]), Ok(Some(12)));
    assert_eq!(parse_after("", &["after"]), Ok(None));
    for bad in [
        "after=",
        "after=+1",
        "after=x",
        "after=18446744073709551616",
    ] {
        assert!(
            parse_after(bad, &["after"])
                .unwrap_err()
                .contains("after must be")
        );
    }
}

#[test]
fn sidecar_failures_map_to_502_or_503() {
    let not_ready = SidecarError::NotReady {
        request: "GET /id".into(),
        body: r#"{"error":"not ready: waiting for a slot"}"#.into(),
        retry_after: Some("3".into()),
    };
    let r = sidecar_failure(&not_ready);
    assert_eq!(r.status, 503);
    assert_eq!(r.headers, vec![("Retry-After", "3".to_string())]);
    let error: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("waiting for a slot"),
        "{}",
        r.body
    );

    let odd = SidecarError::NotReady {
        request: "GET /id".into(),
        body: String::new(),
        retry_after: Some("Wed, 21 Oct 2015 07:28:00 GMT\r\nX: y".into()),
    };
    assert_eq!(
        sidecar_failure(&odd).headers,
        vec![("Retry-After", "1".to_string())],
        "only a number of seconds is passed on"
    );

    let status = SidecarError::Status {
        request: "GET /ids?count=5".into(),
        status: 400,
        body: "bad count".into(),
    };
    let r = sidecar_failure(&status);
    assert_eq!(r.status, 502);
    assert!(r.body.contains("answered 400: bad count"), "{}", r.body);

    let down = SidecarError::Unreachable {
        request: "GET /id".into(),
        detail: "connection refused".into(),
    };
    assert_eq!(sidecar_failure(&down).status, 502);
}

/// Routing that never reaches the sidecar (its address refuses connections anyway).
#[test]
fn routes_without_the_sidecar() {
    let app = App {
        sidecar: Sidecar::new(SidecarUrl::parse("http://127.0.0.1:9").unwrap()),
        pod: "web-0".into(),
        first_id: None,
    };
    assert_eq!(app.handle("GET", "/healthz"), Response::text(200, "ok"));
    let r = app.handle("GET", "/nope");
    assert_eq!(r.status, 404);
    assert!(r.body.contains("no route \\\"/nope\\\""), "{}", r.body);
    let r = app.handle("POST", "/");
    assert_eq!(r.status, 405);
    assert_eq!(r.headers, vec![("Allow", "GET".to_string())]);
    assert_eq!(app.handle("GET", "/ids?count=0").status, 400);
    assert_eq!(app.handle("GET", "/ids").status, 400);
    assert_eq!(app.handle("GET", "/?x=1").status, 400);
    let r = app.handle("GET", "/first");
    assert_eq!(r.status, 404);
    assert!(r.body.contains("started without --first-id"), "{}", r.body);
    assert_eq!(app.handle("POST", "/first").status, 405);
}

/// `/first` answers the ID taken at start, as often as asked, without the sidecar.
#[test]
fn first_answers_the_id_taken_at_start_without_asking_the_sidecar() {
    let app = App {
        sidecar: Sidecar::new(SidecarUrl::parse("http://127.0.0.1:9").unwrap()),
        pod: "web-0".into(),
        first_id: Some(250096622069874688),
    };
    for _ in 0..2 {
        let r = app.handle("GET", "/first");
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.body,
            r#"{"id":"250096622069874688","pod":"web-0","via":"tcp"}"#
        );
    }
    assert_eq!(app.handle("GET", "/first?x=1").status, 400);
}
