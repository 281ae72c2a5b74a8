//! Tests of [`super`]: every frame round-trips, and bad bytes are refused naming what is wrong.

use super::*;

fn split<const N: usize>(bytes: &[u8]) -> ([u8; N], &[u8]) {
    (take(bytes, 0), &bytes[N..])
}

#[test]
fn a_hello_names_the_sequence_and_carries_the_token_after_magic_and_version() {
    let bytes = Hello {
        sequence: "orders".into(),
        token: "a.b.c".into(),
    }
    .encode()
    .unwrap();
    assert_eq!(&bytes[..5], b"KFSO\x02");
    let (head, rest) = split::<HELLO_HEAD_LEN>(&bytes);
    assert_eq!(Hello::name_len(&head), Ok(6));
    let (name, rest) = rest.split_at(6);
    let (len, token) = split::<TOKEN_LEN_LEN>(rest);
    assert_eq!(Hello::token_len(&len), Ok(5));
    let hello = Hello::from_parts(name, token).unwrap();
    assert_eq!(
        (hello.sequence.as_str(), hello.token.as_str()),
        ("orders", "a.b.c")
    );
    assert!(
        !format!("{hello:?}").contains("a.b.c"),
        "a token is never logged"
    );
}

#[test]
fn a_hello_of_another_protocol_or_version_is_refused_naming_what_is_wrong() {
    assert_eq!(Hello::name_len(b"GET / "), Err(WireError::BadMagic));
    let mut older = *b"KFSO\x01\x01";
    assert_eq!(
        Hello::name_len(&older),
        Err(WireError::UnsupportedVersion { found: 1 }),
        "version 1 (no token) is not spoken: there is no unauthenticated mode"
    );
    older[4] = VERSION;
    assert_eq!(Hello::name_len(&older), Ok(1));
    let long = Hello {
        sequence: "x".repeat(256),
        token: String::new(),
    };
    assert_eq!(long.encode(), Err(WireError::NameTooLong { len: 256 }));
    assert_eq!(Hello::from_parts(&[0xff], b""), Err(WireError::NameNotUtf8));
    assert_eq!(
        Hello::from_parts(b"s", &[0xff]),
        Err(WireError::TokenNotUtf8)
    );
}

#[test]
fn a_token_longer_than_8_kib_is_refused_written_or_read() {
    let long = "t".repeat(MAX_TOKEN_LEN + 1);
    let hello = Hello {
        sequence: "s".into(),
        token: long.clone(),
    };
    let too_long = WireError::TokenTooLong {
        len: MAX_TOKEN_LEN + 1,
    };
    assert_eq!(hello.encode(), Err(too_long.clone()));
    assert_eq!(Welcome { token: long }.encode(), Err(too_long.clone()));
    let len = ((MAX_TOKEN_LEN + 1) as u16).to_be_bytes();
    assert_eq!(Hello::token_len(&len), Err(too_long.clone()));
    assert_eq!(Welcome::token_len(&len), Err(too_long));
    let max = (MAX_TOKEN_LEN as u16).to_be_bytes();
    assert_eq!(Hello::token_len(&max), Ok(MAX_TOKEN_LEN));
}

#[test]
fn a_welcome_carries_the_oracles_token_under_its_own_tag() {
    let bytes = Welcome {
        token: "x.y.z".into(),
    }
    .encode()
    .unwrap();
    assert_eq!(Reply::kind(bytes[0]), Ok(ReplyKind::Welcome));
    let (len, token) = split::<TOKEN_LEN_LEN>(&bytes[1..]);
    assert_eq!(Welcome::token_len(&len), Ok(5));
    assert_eq!(Welcome::from_token(token).unwrap().token, "x.y.z");
    assert_eq!(Welcome::from_token(&[0xc3]), Err(WireError::TokenNotUtf8));
}

#[test]
fn requests_and_values_round_trip_at_their_extremes() {
    for request in [
        ForwardRequest { count: 1, min: 0 },
        ForwardRequest {
            count: MAX_FORWARD_COUNT,
            min: u64::MAX,
        },
    ] {
        assert_eq!(ForwardRequest::decode(&request.encode()), request);
    }
    let values = ForwardReply {
        start: 1 << 62,
        end: u64::MAX,
        term: i32::MAX,
    };
    let bytes = Reply::Values(values).encode();
    assert_eq!(bytes.len(), 1 + VALUES_LEN);
    assert_eq!(Reply::kind(bytes[0]), Ok(ReplyKind::Values));
    assert_eq!(ForwardReply::decode(&take(&bytes, 1)), values);
}

#[test]
fn a_refusal_carries_its_status_and_a_message_cut_at_a_character_boundary() {
    let bytes = Reply::Refused {
        status: 503,
        message: "é".repeat(600),
    }
    .encode();
    assert_eq!(Reply::kind(bytes[0]), Ok(ReplyKind::Refused));
    let (status, len) = Reply::refusal_head(&take(&bytes, 1)).unwrap();
    assert_eq!(status, 503);
    assert_eq!(len, MAX_MESSAGE_LEN);
    let text = &bytes[1 + REFUSAL_HEAD_LEN..];
    assert_eq!(text.len(), len);
    assert!(std::str::from_utf8(text).is_ok());
    assert_eq!(Reply::kind(7), Err(WireError::UnknownReplyTag(7)));
    assert_eq!(
        Reply::refusal_head(&[1, 244, 0xff, 0xff]),
        Err(WireError::MessageTooLong { len: 65535 })
    );
}
