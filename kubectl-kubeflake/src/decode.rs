//! `decode <id>...`: the fields of IDs under one layout, and whether each ID is above the
//! one before it (what `after=<previous>` guarantees, docs/api.md, `after`), so an incident
//! review can check that causally later events got larger IDs.
//!
//! Every argument is checked before anything is printed, so a script never gets half an
//! answer: one bad ID fails the command (exit 2) naming each bad argument.

use kubeflake_crds::timebase::rfc3339;
use kubeflake_crds::{Id, Layout, LayoutError, TextForm};
use serde::Serialize;

use crate::error::CliError;
use crate::output::{Report, table};
use crate::source::{LayoutView, Resolved};

/// One decoded ID. The ID is a decimal string, as in the sidecar's JSON (above 2^53
/// JavaScript numbers lose precision), whichever `--format` it was given in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decoded {
    pub id: String,
    /// Start of the ID's tick, RFC 3339 UTC.
    pub time: String,
    pub tick: u64,
    pub datacenter: u32,
    pub worker: u32,
    pub sequence: u32,
    /// Layouts with a key form (docs/layouts.md): the time-ordered key the ID stores.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Layouts with shard bits: the shard.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    /// Whether this ID comes after the one before it on the command line in the sequence's
    /// order (tick, datacenter and worker, sequence: for time-ordered layouts, simply a
    /// greater number), as an answer to `after=<previous>` always does; absent for the
    /// first.
    #[serde(rename = "abovePrevious", skip_serializing_if = "Option::is_none")]
    pub above_previous: Option<bool>,
}

impl Decoded {
    /// The ID's place in the sequence's order.
    fn order(&self) -> (u64, u32, u32, u32) {
        (self.tick, self.datacenter, self.worker, self.sequence)
    }
}

/// What `decode` prints.
#[derive(Debug, Clone, Serialize)]
pub struct DecodeReport {
    pub layout: LayoutView,
    pub ids: Vec<Decoded>,
}

impl Report for DecodeReport {
    fn table(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .ids
            .iter()
            .map(|d| {
                vec![
                    d.id.clone(),
                    d.time.clone(),
                    d.tick.to_string(),
                    d.datacenter.to_string(),
                    d.worker.to_string(),
                    d.sequence.to_string(),
                    match d.above_previous {
                        None => "-".to_string(),
                        Some(true) => "yes".to_string(),
                        Some(false) => "NO".to_string(),
                    },
                ]
            })
            .collect();
        table(
            &[
                "ID",
                "TIME",
                "TICK",
                "DATACENTER",
                "WORKER",
                "SEQUENCE",
                "ABOVE PREVIOUS",
            ],
            &rows,
        )
    }
}

/// Parses the text of an ID in `form` (surrounding spaces are ignored). Whether it has bit
/// 63 set does not depend on the layout, so that is checked here too.
pub fn parse_id(text: &str, form: TextForm) -> Result<Id, CliError> {
    let trimmed = text.trim();
    if form != TextForm::Decimal {
        let value = form.parse(trimmed)?;
        // Below 2^63: `parse` refuses anything larger.
        return Id::new(value).map_err(|_| CliError::IdAboveLargest {
            text: trimmed.to_string(),
        });
    }
    if trimmed.is_empty() || !trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CliError::NotAnId {
            text: text.to_string(),
        });
    }
    let above = || CliError::IdAboveLargest {
        text: trimmed.to_string(),
    };
    // All digits, so the only way parsing fails is a number above u64::MAX.
    let raw = trimmed.parse::<u64>().map_err(|_| above())?;
    Id::new(raw).map_err(|_| above())
}

/// Parses every argument before the layout is looked up, so bad input is reported (exit 2)
/// even when the layout would come from an unreachable cluster.
pub fn parse_ids(texts: &[String], form: TextForm) -> Result<Vec<Id>, Vec<CliError>> {
    collect_all(texts.iter().map(|t| parse_id(t, form)))
}

/// All values, or every error.
fn collect_all<T>(
    results: impl Iterator<Item = Result<T, CliError>>,
) -> Result<Vec<T>, Vec<CliError>> {
    let (good, bad): (Vec<_>, Vec<_>) = results.partition(Result::is_ok);
    if bad.is_empty() {
        Ok(good.into_iter().filter_map(Result::ok).collect())
    } else {
        Err(bad.into_iter().filter_map(Result::err).collect())
    }
}

fn decode_one(id: Id, source: &Resolved) -> Result<Decoded, CliError> {
    let layout: &Layout = &source.params.layout;
    let parts = layout.decode(id).map_err(|e| match e {
        LayoutError::IdOutOfRange { .. } => CliError::IdOutsideLayout {
            id: id.get(),
            source_name: source.name.clone(),
            total_bits: layout.total_bits(),
            max_id: ((1u64 << layout.total_bits()) - 1).to_string(),
        },
        other => CliError::IdNotOfSequence {
            id: id.get(),
            source_name: source.name.clone(),
            reason: other.to_string(),
        },
    })?;
    let key = (!layout.is_time_ordered())
        .then(|| layout.time_ordered_value(id).ok())
        .flatten()
        .map(|k| k.to_string());
    Ok(Decoded {
        key,
        shard: layout.shard(id),
        id: id.to_string(),
        time: rfc3339(source.params.timebase.start_of(parts.tick)),
        tick: parts.tick.0,
        datacenter: parts.datacenter.0,
        worker: parts.slot.0,
        sequence: parts.sequence,
        above_previous: None,
    })
}

/// Decodes every ID, or fails with the errors of all that do not fit the layout.
pub fn decode(ids: &[Id], source: &Resolved) -> Result<DecodeReport, Vec<CliError>> {
    let mut decoded = collect_all(ids.iter().map(|id| decode_one(*id, source)))?;
    let orders: Vec<_> = decoded.iter().map(Decoded::order).collect();
    for (d, pair) in decoded.iter_mut().skip(1).zip(orders.windows(2)) {
        d.above_previous = Some(pair[1] > pair[0]);
    }
    Ok(DecodeReport {
        layout: source.view(),
        ids: decoded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::LayoutArgs;
    use crate::source::from_flags;
    use kubeflake_crds::{DatacenterId, IdParts, Slot, Tick};

    #[test]
    fn decode_inverts_encode_of_the_crds_layout() {
        let source = from_flags(&LayoutArgs::default()).unwrap();
        let parts = IdParts {
            tick: Tick(123_456_789),
            datacenter: DatacenterId(0),
            slot: Slot(517),
            sequence: 4000,
        };
        let id = source.params.layout.encode(parts).unwrap();
        let report = decode(&[id], &source).unwrap();
        let d = &report.ids[0];
        assert_eq!((d.tick, d.worker, d.sequence), (123_456_789, 517, 4000));
        assert_eq!(
            d.time,
            rfc3339(source.params.timebase.start_of(Tick(123_456_789)))
        );
    }

    /// Carrying an ID along (`after`): the review question "did the later event get the
    /// larger ID?" is answered per pair.
    #[test]
    fn each_id_says_whether_it_is_above_the_one_before() {
        let source = from_flags(&LayoutArgs::default()).unwrap();
        let ids = parse_ids(
            &["100".into(), "5000".into(), "4999".into()],
            TextForm::Decimal,
        )
        .unwrap();
        let report = decode(&ids, &source).unwrap();
        let above: Vec<_> = report.ids.iter().map(|d| d.above_previous).collect();
        assert_eq!(above, vec![None, Some(true), Some(false)]);
        let table = report.table();
        assert!(table.contains("ABOVE PREVIOUS"), "{table}");
        assert!(
            table.lines().last().unwrap().trim_end().ends_with("NO"),
            "{table}"
        );
    }

    #[test]
    fn ids_that_are_not_decimal_numbers_are_refused() {
        for text in ["", "abc", "-5", "+5", "1.5", "0x10"] {
            assert!(
                matches!(
                    parse_id(text, TextForm::Decimal),
                    Err(CliError::NotAnId { .. })
                ),
                "{text:?}"
            );
        }
        assert_eq!(parse_id(" 42 ", TextForm::Decimal).unwrap().get(), 42);
    }

    #[test]
    fn ids_at_or_above_2_to_the_63_are_called_too_large_not_malformed() {
        let largest = i64::MAX.to_string();
        assert_eq!(
            parse_id(&largest, TextForm::Decimal).unwrap().get(),
            i64::MAX as u64
        );
        for text in [
            (1u64 << 63).to_string(),
            u64::MAX.to_string(),
            "99999999999999999999".to_string(),
        ] {
            let err = parse_id(&text, TextForm::Decimal).unwrap_err();
            assert!(matches!(err, CliError::IdAboveLargest { .. }), "{text}");
            let message = err.to_string();
            assert!(
                message.contains("above the largest 63-bit ID, 9223372036854775807"),
                "{message}"
            );
            assert_eq!(message.matches(&text).count(), 1, "{message}");
        }
    }

    #[test]
    fn every_bad_id_is_reported_and_nothing_is_decoded() {
        let errs = parse_ids(
            &["1".into(), "x".into(), u64::MAX.to_string()],
            TextForm::Decimal,
        )
        .unwrap_err();
        assert_eq!(errs.len(), 2);
        assert!(matches!(errs[0], CliError::NotAnId { .. }));
        assert!(matches!(errs[1], CliError::IdAboveLargest { .. }));
        let js = from_flags(&LayoutArgs {
            timestamp_bits: Some(36),
            worker_bits: Some(7),
            sequence_bits: Some(10),
            total_bits: Some(53),
            ..Default::default()
        })
        .unwrap();
        let ids = parse_ids(
            &[
                "1".into(),
                (1u64 << 53).to_string(),
                (1u64 << 60).to_string(),
            ],
            TextForm::Decimal,
        )
        .unwrap();
        let errs = decode(&ids, &js).unwrap_err();
        assert_eq!(errs.len(), 2, "{errs:?}");
        let message = errs[0].to_string();
        assert!(
            message.contains("its IDs have 53 bits, so the largest is 9007199254740991"),
            "{message}"
        );
    }

    #[test]
    fn ids_in_base32_or_base62_decode_to_the_same_fields_as_their_decimal() {
        let source = from_flags(&LayoutArgs::default()).unwrap();
        let decimal = parse_ids(&["250096622069874688".into()], TextForm::Decimal).unwrap();
        let expected = decode(&decimal, &source).unwrap().ids;
        for text in ["06Y45HNZ00000", "06y45hnz00000", " 6Y45HNZ00000 "] {
            let ids = parse_ids(&[text.into()], TextForm::Base32).unwrap();
            assert_eq!(decode(&ids, &source).unwrap().ids, expected, "{text:?}");
        }
        let ids = parse_ids(&["0ITRbHQvEoq".into()], TextForm::Base62).unwrap();
        assert_eq!(decode(&ids, &source).unwrap().ids, expected);
        assert_eq!(expected[0].id, "250096622069874688", "shown in decimal");
    }

    #[test]
    fn bad_base32_or_base62_ids_are_reported_each_in_the_form_s_own_words() {
        let errs = parse_ids(
            &["06Y45HNU00000".into(), "8000000000000".into(), "1".into()],
            TextForm::Base32,
        )
        .unwrap_err();
        let messages: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(
            messages[0].contains("'U' (character 8) is not a base32 digit"),
            "{messages:?}"
        );
        assert!(
            messages[1].contains("the largest ID is 7ZZZZZZZZZZZZ"),
            "{messages:?}"
        );
        assert!(
            errs.iter()
                .all(|e| e.exit_code() == crate::error::EXIT_USAGE)
        );
        let err = parse_id("250096622069874688", TextForm::Base62).unwrap_err();
        assert!(
            err.to_string()
                .contains("it has 18 characters, but base62 IDs have at most 11"),
            "{err}"
        );
    }

    #[test]
    fn above_previous_follows_the_sequence_order_and_a_mistyped_shard_is_refused() {
        let mut spec = kubeflake_crds::IdSequenceSpec::default();
        spec.layout.timestamp_bits = 37;
        spec.layout.shard_bits = 4;
        let source = Resolved {
            name: "test".into(),
            params: spec.params().unwrap(),
        };
        let layout = source.params.layout;
        let at = |tick, sequence| {
            layout
                .encode(IdParts {
                    tick: Tick(tick),
                    datacenter: DatacenterId(0),
                    slot: Slot(3),
                    sequence,
                })
                .unwrap()
        };
        let ids = [at(100, 0), at(100, 1), at(101, 0), at(100, 5)];
        let report = decode(&ids, &source).unwrap();
        let above: Vec<_> = report.ids.iter().map(|d| d.above_previous).collect();
        assert_eq!(above, [None, Some(true), Some(true), Some(false)]);
        assert_eq!(report.ids[0].shard, layout.shard(ids[0]));
        assert!(report.ids[0].key.is_some());
        let mistyped = Id::new(ids[0].get() ^ (1 << 59)).unwrap();
        let errors = decode(&[mistyped], &source).unwrap_err();
        assert!(
            matches!(&errors[0], CliError::IdNotOfSequence { reason, .. } if reason.contains("shard")),
            "{:?}",
            errors
        );
    }
}
