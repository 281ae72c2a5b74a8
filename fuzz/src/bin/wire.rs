//! Fuzz target: the strict oracle's forwarding wire format
//! (`kubeflake_crds::strict_oracle::wire`), read the way both ends read it.
//!
//! The input is a byte stream. Its first byte, modulo 3, says who reads or writes it:
//! - 0: the oracle, reading a forwarder's connection (a hello, its name and token, then
//!   requests);
//! - 1: a forwarder, reading the oracle's frames (a tag, then a welcome's token, values or
//!   a refusal);
//! - 2: the writers: a hello naming and carrying, a welcome carrying, and a refusal
//!   saying, the rest as text.
//!
//! No input may panic, and every frame read back is the frame written: encoding what was
//! decoded gives the bytes read, and decoding what was encoded gives the value.
#![no_main]

use kubeflake_crds::strict_oracle::wire::{
    ForwardReply, ForwardRequest, HELLO_HEAD_LEN, Hello, MAX_MESSAGE_LEN, MAX_TOKEN_LEN,
    REFUSAL_HEAD_LEN, REQUEST_LEN, Reply, ReplyKind, TOKEN_LEN_LEN, VALUES_LEN, Welcome,
};
use kubeflake_fuzz::Stream;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&end, rest)) = data.split_first() else {
        return;
    };
    let mut stream = Stream::new(rest);
    match end % 3 {
        0 => oracle_reads(&mut stream),
        1 => forwarder_reads(&mut stream),
        _ => written_and_read(rest),
    }
});

/// A hello and a refusal written from any text, then read back.
fn written_and_read(data: &[u8]) {
    let (status, text) = match data {
        [a, b, text @ ..] => (u16::from_be_bytes([*a, *b]), text),
        _ => return,
    };
    let text = String::from_utf8_lossy(text);
    // The name is the text's first 300 bytes at most (cut at a character), the token all
    // of it.
    let mut cut = text.len().min(300);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let hello = Hello {
        sequence: text[..cut].to_string(),
        token: text.to_string(),
    };
    match hello.encode() {
        Ok(bytes) => {
            let mut stream = Stream::new(&bytes);
            let head = stream.array::<HELLO_HEAD_LEN>().expect("a hello's head");
            let len = Hello::name_len(&head).expect("a hello written is read");
            let name = stream.bytes(len).expect("the name written");
            let token_len = stream.array::<TOKEN_LEN_LEN>().expect("the token's length");
            let token_len = Hello::token_len(&token_len).expect("a token written is read");
            let token = stream.bytes(token_len).expect("the token written");
            assert!(stream.is_empty(), "bytes after the token");
            assert_eq!(Hello::from_parts(name, token), Ok(hello));
        }
        Err(_) => assert!(
            cut > 255 || text.len() > MAX_TOKEN_LEN,
            "a name of {cut} bytes and a token of {} refused",
            text.len()
        ),
    }
    let welcome = Welcome {
        token: text.to_string(),
    };
    match welcome.encode() {
        Ok(bytes) => {
            let mut stream = Stream::new(&bytes);
            let tag = stream.byte().expect("a tag");
            assert_eq!(Reply::kind(tag), Ok(ReplyKind::Welcome));
            let len = stream.array::<TOKEN_LEN_LEN>().expect("the token's length");
            let len = Welcome::token_len(&len).expect("a token written is read");
            let token = stream.bytes(len).expect("the token written");
            assert!(stream.is_empty(), "bytes after the token");
            assert_eq!(Welcome::from_token(token), Ok(welcome));
        }
        Err(_) => assert!(text.len() > MAX_TOKEN_LEN, "a token of {} bytes refused", text.len()),
    }
    let bytes = Reply::Refused {
        status,
        message: text.to_string(),
    }
    .encode();
    let mut stream = Stream::new(&bytes);
    let tag = stream.byte().expect("a tag");
    assert_eq!(Reply::kind(tag), Ok(ReplyKind::Refused));
    let head = stream
        .array::<REFUSAL_HEAD_LEN>()
        .expect("a refusal's head");
    let (read_status, len) = Reply::refusal_head(&head).expect("a refusal written is read");
    assert_eq!(read_status, status);
    let message = stream.bytes(len).expect("the message written");
    assert!(stream.is_empty(), "bytes after the message");
    let message = std::str::from_utf8(message).expect("a message cut inside a character");
    assert!(
        text.starts_with(message),
        "the message is not the text's start"
    );
    assert!(
        message.len() == text.len() || message.len() + 4 > MAX_MESSAGE_LEN,
        "a message of {} bytes cut to {}",
        text.len(),
        message.len()
    );
}

/// A forwarder's connection as the oracle reads it.
fn oracle_reads(stream: &mut Stream<'_>) {
    let Some(head) = stream.array::<HELLO_HEAD_LEN>() else {
        return;
    };
    let Ok(len) = Hello::name_len(&head) else {
        return;
    };
    assert!(len <= 255, "a name length from one byte: {len}");
    let Some(name) = stream.bytes(len) else {
        return;
    };
    let Some(token_len) = stream.array::<TOKEN_LEN_LEN>() else {
        return;
    };
    let Ok(len) = Hello::token_len(&token_len) else {
        assert!(
            usize::from(u16::from_be_bytes(token_len)) > MAX_TOKEN_LEN,
            "a token length up to 8 KiB refused"
        );
        return;
    };
    let Some(token) = stream.bytes(len) else {
        return;
    };
    let Ok(hello) = Hello::from_parts(name, token) else {
        assert!(
            std::str::from_utf8(name).is_err() || std::str::from_utf8(token).is_err(),
            "a UTF-8 name and token refused"
        );
        return;
    };
    let mut sent = head.to_vec();
    sent.extend_from_slice(name);
    sent.extend_from_slice(&token_len);
    sent.extend_from_slice(token);
    assert_eq!(
        hello.encode().as_deref(),
        Ok(sent.as_slice()),
        "hello re-encoded"
    );
    while let Some(bytes) = stream.array::<REQUEST_LEN>() {
        let request = ForwardRequest::decode(&bytes);
        assert_eq!(request.encode(), bytes, "request re-encoded");
        assert_eq!(ForwardRequest::decode(&request.encode()), request);
    }
}

/// The oracle's replies as a forwarder reads them.
fn forwarder_reads(stream: &mut Stream<'_>) {
    while let Some(tag) = stream.byte() {
        match Reply::kind(tag) {
            Err(_) => {
                assert!(tag > 2, "tag {tag} refused");
                return;
            }
            Ok(ReplyKind::Welcome) => {
                let Some(len_bytes) = stream.array::<TOKEN_LEN_LEN>() else {
                    return;
                };
                let Ok(len) = Welcome::token_len(&len_bytes) else {
                    return;
                };
                assert!(len <= MAX_TOKEN_LEN, "a token of {len} bytes accepted");
                let Some(token) = stream.bytes(len) else {
                    return;
                };
                if let Ok(welcome) = Welcome::from_token(token) {
                    let mut sent = vec![tag];
                    sent.extend_from_slice(&len_bytes);
                    sent.extend_from_slice(token);
                    assert_eq!(welcome.encode().as_deref(), Ok(sent.as_slice()), "welcome re-encoded");
                }
            }
            Ok(ReplyKind::Values) => {
                let Some(bytes) = stream.array::<VALUES_LEN>() else {
                    return;
                };
                let values = ForwardReply::decode(&bytes);
                let mut sent = vec![tag];
                sent.extend_from_slice(&bytes);
                assert_eq!(Reply::Values(values).encode(), sent, "values re-encoded");
            }
            Ok(ReplyKind::Refused) => {
                let Some(head) = stream.array::<REFUSAL_HEAD_LEN>() else {
                    return;
                };
                let Ok((status, len)) = Reply::refusal_head(&head) else {
                    return;
                };
                assert!(len <= MAX_MESSAGE_LEN, "a refusal of {len} bytes accepted");
                let Some(text) = stream.bytes(len) else {
                    return;
                };
                // A message that is not UTF-8 is the reader's to refuse; one that is
                // encodes to the same bytes.
                if let Ok(message) = std::str::from_utf8(text) {
                    let reply = Reply::Refused {
                        status,
                        message: message.to_string(),
                    };
                    let mut sent = vec![tag];
                    sent.extend_from_slice(&head);
                    sent.extend_from_slice(text);
                    assert_eq!(reply.encode(), sent, "refusal re-encoded");
                }
            }
        }
    }
}
