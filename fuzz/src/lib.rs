//! What the fuzz targets (`src/bin/`) share: a reader over the fuzzer's bytes, and the
//! Lease a `leases` input describes.
//!
//! A `leases` input is text, one field a line, so that its seeds (`corpus/leases/`) are
//! written by hand and the fuzzer's mutations stay readable:
//!
//! ```text
//! name orders-slot-3
//! version 17
//! label kubeflake.io/slot=3
//! annotation kubeflake.io/fence=42
//! holder 6f1c...
//! duration 5
//! transitions 2
//! sequence orders
//! start 65537
//! ```
//!
//! `label` and `annotation` add to the metadata's maps (split at the first `=`); `holder`,
//! `duration` and `transitions` set the spec's fields (a number that does not read as an
//! `i32` is left out); `sequence` and `start` ask for the Leases kubeflake itself makes for
//! that sequence to be read back. Unknown lines are skipped; bytes that are not UTF-8 become
//! U+FFFD.
//!
//! A value `@c` (one character after `@`) stands for one of [`EDGES`], the numbers and times
//! at the edges of what the parsers accept: a one-byte mutation moves a field from one edge
//! to another, where spelling `9223372036854775807` digit by digit would take the fuzzer
//! many lucky mutations in a row (the digits are compared inside the standard library,
//! which is not instrumented, so they give it no coverage to follow).

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};

/// The fuzzer's bytes, read from the front.
pub struct Stream<'a> {
    rest: &'a [u8],
}

impl<'a> Stream<'a> {
    pub fn new(bytes: &'a [u8]) -> Stream<'a> {
        Stream { rest: bytes }
    }

    pub fn byte(&mut self) -> Option<u8> {
        self.bytes(1).map(|b| b[0])
    }

    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (taken, rest) = self.rest.split_at(n);
        self.rest = rest;
        Some(taken)
    }

    pub fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N).map(|b| b.try_into().expect("N bytes"))
    }

    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
}

/// The values an `@c` stands for: `EDGES[c % EDGES.len()]`.
pub const EDGES: &[&str] = &[
    "0",
    "1",
    "2",
    "-1",
    "+1",
    "01",
    " 1",
    "",
    "255",
    "256",
    "65535",
    "65536",
    "1048576",
    "2147483646",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "4294967295",
    "4294967296",
    "9223372036854775806",
    "9223372036854775807",
    "9223372036854775808",
    "9223372036854775809",
    "-9223372036854775808",
    "18446744073709551614",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999",
    "1e3",
    "0x10",
    "\u{0661}",
    "2026-11-23T08:00:00Z",
    "2026-11-23T08:00:00.123456789+05:30",
    "9999-12-31T23:59:59.999999999Z",
    "9999-12-31T23:59:59.999999999-23:59",
    "0000-01-01T00:00:00+23:59",
    "1970-01-01T00:00:00Z",
];

/// `text`, or the edge it stands for.
fn value(text: &str) -> String {
    let mut chars = text.chars();
    match (chars.next(), chars.next(), chars.next()) {
        (Some('@'), Some(c), None) => EDGES[c as usize % EDGES.len()].to_string(),
        _ => text.to_string(),
    }
}

/// A `leases` input read: the Lease, and the sequence whose own Leases are read back.
#[derive(Debug, Default)]
pub struct LeaseInput {
    pub lease: Lease,
    pub sequence: Option<String>,
    pub start: u64,
}

impl LeaseInput {
    pub fn parse(data: &[u8]) -> LeaseInput {
        let text = String::from_utf8_lossy(data);
        let mut input = LeaseInput::default();
        for line in text.split('\n') {
            let (field, text) = line.split_once(' ').unwrap_or((line, ""));
            let lease = &mut input.lease;
            match field {
                "name" => lease.metadata.name = Some(value(text)),
                "version" => lease.metadata.resource_version = Some(value(text)),
                "label" => insert(&mut lease.metadata.labels, text),
                "annotation" => insert(&mut lease.metadata.annotations, text),
                "holder" => spec(lease).holder_identity = Some(value(text)),
                "duration" => spec(lease).lease_duration_seconds = value(text).parse().ok(),
                "transitions" => spec(lease).lease_transitions = value(text).parse().ok(),
                "sequence" => input.sequence = Some(value(text)),
                "start" => input.start = value(text).parse().unwrap_or(0),
                _ => {}
            }
        }
        input
    }
}

fn insert(map: &mut Option<BTreeMap<String, String>>, pair: &str) {
    let (key, text) = pair.split_once('=').unwrap_or((pair, ""));
    map.get_or_insert_with(BTreeMap::new)
        .insert(key.to_string(), value(text));
}

fn spec(lease: &mut Lease) -> &mut LeaseSpec {
    lease.spec.get_or_insert_with(LeaseSpec::default)
}

/// Whether `name` is a name Kubernetes accepts for an object (a DNS label of at most 40
/// characters, leaving room for kubeflake's suffixes): only for those must kubeflake read
/// back the Leases it writes.
pub fn dns_label(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 40
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}
