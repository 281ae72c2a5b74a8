//! `decode <id>...`: the fields of IDs under one layout.
//!
//! Every argument is checked before anything is printed, so a script never gets half an
//! answer: one bad ID fails the command (exit 2) naming each bad argument.

use kubeflake_crds::timebase::rfc3339;
use kubeflake_crds::{Id, Layout};
use serde::Serialize;

use crate::error::CliError;
use crate::output::{Report, table};
use crate::source::{LayoutView, Resolved};

/// One decoded ID. The ID is a string, as in the sidecar's JSON (above 2^53 JavaScript
/// numbers lose precision).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decoded {
    pub id: String,
    /// Start of the ID's tick, RFC 3339 UTC.
    pub time: String,
    pub tick: u64,
    pub datacenter: u32,
    pub worker: u32,
    pub sequence: u32,
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
                ]
            })
            .collect();
        table(
            &["ID", "TIME", "TICK", "DATACENTER", "WORKER", "SEQUENCE"],
            &rows,
        )
    }
}

/// Parses the decimal text of an ID (surrounding spaces are ignored).
pub fn parse_id(text: &str) -> Result<u64, CliError> {
    let trimmed = text.trim();
    if trimmed.is_empty() || !trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CliError::NotAnId {
            text: text.to_string(),
        });
    }
    trimmed.parse::<u64>().map_err(|_| CliError::NotAnId {
        text: text.to_string(),
    })
}

fn decode_one(text: &str, source: &Resolved) -> Result<Decoded, CliError> {
    let raw = parse_id(text)?;
    let layout: &Layout = &source.params.layout;
    let parts = Id::new(raw)
        .and_then(|id| layout.decode(id))
        .map_err(|reason| CliError::IdOutsideLayout {
            id: raw.to_string(),
            source_name: source.name.clone(),
            reason,
        })?;
    Ok(Decoded {
        id: raw.to_string(),
        time: rfc3339(source.params.timebase.start_of(parts.tick)),
        tick: parts.tick.0,
        datacenter: parts.datacenter.0,
        worker: parts.slot.0,
        sequence: parts.sequence,
    })
}

/// Decodes every ID, or fails with the errors of all bad ones (first error's exit code).
pub fn decode(texts: &[String], source: &Resolved) -> Result<DecodeReport, Vec<CliError>> {
    let (good, bad): (Vec<_>, Vec<_>) = texts
        .iter()
        .map(|t| decode_one(t, source))
        .partition(Result::is_ok);
    if !bad.is_empty() {
        return Err(bad.into_iter().filter_map(Result::err).collect());
    }
    Ok(DecodeReport {
        layout: source.view(),
        ids: good.into_iter().filter_map(Result::ok).collect(),
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
        let report = decode(&[id.to_string()], &source).unwrap();
        let d = &report.ids[0];
        assert_eq!((d.tick, d.worker, d.sequence), (123_456_789, 517, 4000));
        assert_eq!(
            d.time,
            rfc3339(source.params.timebase.start_of(Tick(123_456_789)))
        );
    }

    #[test]
    fn ids_that_are_not_decimal_numbers_are_refused() {
        for text in ["", "abc", "-5", "1.5", "0x10", "99999999999999999999"] {
            assert!(
                matches!(parse_id(text), Err(CliError::NotAnId { .. })),
                "{text:?}"
            );
        }
        assert_eq!(parse_id(" 42 ").unwrap(), 42);
    }

    #[test]
    fn every_bad_id_is_reported_and_nothing_is_decoded() {
        let source = from_flags(&LayoutArgs::default()).unwrap();
        let errs = decode(&["1".into(), "x".into(), u64::MAX.to_string()], &source).unwrap_err();
        assert_eq!(errs.len(), 2);
        assert!(matches!(errs[0], CliError::NotAnId { .. }));
        assert!(matches!(errs[1], CliError::IdOutsideLayout { .. }));
    }
}
