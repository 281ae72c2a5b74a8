use super::response::{decode_chunked, parse_response_head};
use super::*;

fn url(raw: &str) -> SidecarUrl {
    SidecarUrl::parse(raw).unwrap_or_else(|e| panic!("{raw}: {e}"))
}

fn url_err(raw: &str) -> String {
    match SidecarUrl::parse(raw) {
        Ok(u) => panic!("{raw:?} was accepted as {u:?}"),
        Err(e) => e.0,
    }
}

#[test]
fn parses_the_injected_url() {
    let u = url("http://127.0.0.1:7070");
    assert_eq!(u.addr, "127.0.0.1:7070".parse().unwrap());
    assert_eq!(u.host_header, "127.0.0.1:7070");
    assert_eq!(u.base_path, "");
    assert_eq!(u.to_string(), "http://127.0.0.1:7070");
}

#[test]
fn parses_paths_ports_ipv6_and_localhost() {
    let u = url("  http://10.1.2.3:8000/kubeflake/  ");
    assert_eq!(u.addr, "10.1.2.3:8000".parse().unwrap());
    assert_eq!(u.base_path, "/kubeflake");
    assert_eq!(u.to_string(), "http://10.1.2.3:8000/kubeflake/");

    let u = url("HTTP://[::1]:7070/");
    assert_eq!(u.addr, "[::1]:7070".parse().unwrap());
    assert_eq!(u.host_header, "[::1]:7070");
    assert_eq!(u.base_path, "");

    assert_eq!(url("http://127.0.0.1").addr.port(), 80);
    assert_eq!(url("http://[::1]").addr, "[::1]:80".parse().unwrap());
    assert_eq!(
        url("http://localhost:7070").addr,
        "127.0.0.1:7070".parse().unwrap()
    );
}

#[test]
fn rejects_bad_urls_naming_the_variable() {
    let cases = [
        ("", "is empty"),
        ("   ", "is empty"),
        ("127.0.0.1:7070", "no scheme"),
        ("https://127.0.0.1:7070", "https is not supported"),
        ("ftp://127.0.0.1:7070", "unsupported scheme"),
        ("http://", "no host"),
        ("http:///id", "no host"),
        ("http://kubeflake:7070", "not an IP address"),
        ("http://127.0.0.1:", "port \"\""),
        ("http://127.0.0.1:0", "port \"0\""),
        ("http://127.0.0.1:70700", "port \"70700\""),
        ("http://127.0.0.1:+80", "port \"+80\""),
        ("http://127.0.0.1:7070?x=1", "query or fragment"),
        ("http://127.0.0.1:7070/#x", "query or fragment"),
        ("http://user@127.0.0.1:7070", "user information"),
        ("http://::1:7070", "brackets"),
        ("http://[::1:7070", "unclosed"),
        ("http://[::1]x", "unexpected"),
        ("http://[127.0.0.1]:7070", "not an IPv6 address"),
        ("http://127.0.0.1:7070/a b", "whitespace"),
    ];
    for (raw, expected) in cases {
        let message = url_err(raw);
        assert!(
            message.contains(expected),
            "{raw:?}: {message:?} should contain {expected:?}"
        );
        assert!(
            message.contains("KUBEFLAKE_URL"),
            "{raw:?}: {message:?} should name KUBEFLAKE_URL"
        );
    }
}

#[test]
fn parses_id_answers() {
    assert_eq!(
        parse_id_answer(br#"{"id":"250096622069874688"}"#),
        Ok(250096622069874688)
    );
    assert_eq!(
        parse_id_answer(br#"{"id":18446744073709551615}"#),
        Ok(u64::MAX)
    );
    for bad in [
        &br#"{"id":"18446744073709551616"}"#[..],
        br#"{"id":"-1"}"#,
        br#"{"id":"12a"}"#,
        br#"{"id":""}"#,
        br#"{"id":null}"#,
        br#"{"ids":["1"]}"#,
        b"250096622069874688\n",
    ] {
        assert!(
            parse_id_answer(bad).is_err(),
            "{:?} was accepted",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn parses_ids_answers_and_checks_the_count() {
    assert_eq!(
        parse_ids_answer(br#"{"ids":["1","2","3"]}"#, 3),
        Ok(vec![1, 2, 3])
    );
    let short = parse_ids_answer(br#"{"ids":["1","2"]}"#, 3).unwrap_err();
    assert!(short.contains("asked for 3 IDs, got 2"), "{short}");
    assert!(parse_ids_answer(br#"{"ids":["1","x"]}"#, 2).is_err());
    assert!(parse_ids_answer(br#"{"id":"1"}"#, 1).is_err());
}

#[test]
fn parses_response_heads() {
    let (status, headers) = parse_response_head(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n\r\n",
        )
        .unwrap();
    assert_eq!(status, 503);
    assert_eq!(
        headers,
        vec![
            ("content-type".to_string(), "application/json".to_string()),
            ("retry-after".to_string(), "1".to_string()),
        ]
    );
    assert!(parse_response_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
    assert!(parse_response_head(b"HTTP/1.1 20 OK\r\n\r\n").is_err());
    assert!(parse_response_head(b"HTTP/1.1 200 OK\r\nno-colon\r\n\r\n").is_err());
}

#[test]
fn decodes_chunked_bodies() {
    assert_eq!(
        decode_chunked(b"4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\n\r\n"),
        Ok(Some(b"Wikipedia".to_vec()))
    );
    assert_eq!(
        decode_chunked(b"2\r\nok\r\n0\r\nX-Trailer: 1\r\n\r\n"),
        Ok(Some(b"ok".to_vec()))
    );
    assert_eq!(decode_chunked(b"4\r\nWiki\r\n"), Ok(None));
    assert_eq!(decode_chunked(b"4\r\nWi"), Ok(None));
    assert_eq!(decode_chunked(b"0\r\n"), Ok(None));
    assert!(decode_chunked(b"zz\r\n").is_err());
    assert!(decode_chunked(b"2\r\nokXX").is_err());
}

#[test]
fn quotes_long_bodies_shortly() {
    assert_eq!(quote_body(b"  \n"), "(empty body)");
    assert_eq!(quote_body(b" {\"error\":\"x\"}\n"), "{\"error\":\"x\"}");
    let long = "é".repeat(600);
    let quoted = quote_body(long.as_bytes());
    assert_eq!(quoted.chars().count(), QUOTED_BODY + 3);
    assert!(quoted.ends_with("..."));
}
