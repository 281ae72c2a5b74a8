//! The sequence's settings, written on a slot Lease when the operator assigns it
//! ([`SEQUENCE_SPEC_ANNOTATION`]), so that the sidecar starting on that assignment needs no
//! read of its IdSequence: one API request and one new TLS connection less per pod, at the
//! moment a burst of pods makes every request wait its turn (docs/benchmarks.md, "Pod
//! start-up").
//!
//! The note is tied to the assignment it was written with: it records the Lease's
//! `spec.leaseTransitions` of that assignment, and a reader takes it only while the Lease
//! still counts that many. An operator that does not write the note (a release before this
//! one, during an upgrade or after a rollback) leaves an older note in place when it
//! assigns the slot again; the count then differs and the sidecar reads the IdSequence, as
//! it always did. Only the operator may write it: the API server refuses a holder's renewal
//! or release that changes any annotation but the fence and the release marks
//! ([`crate::lease_policy`]).
//!
//! The fields that say what an ID is (mode, layout, time unit, epoch, datacenter) are
//! immutable in an IdSequence, and a sequence's Leases are deleted before the sequence is
//! (its finalizer), so a note never describes another sequence of the same name. The
//! settings that may change (the lease duration, the clock's maximum drift) are as they were
//! at the assignment, as they are for the whole of a holding when read from the sequence.

use k8s_openapi::api::coordination::v1::Lease;
use serde::{Deserialize, Serialize};

use super::lease_format;
use crate::IdSequenceSpec;

/// Annotation on a slot lease: `{"leaseTransitions": N, "spec": {...}}`, the IdSequence's
/// spec as the operator read it when it made assignment N (see the module's documentation).
pub const SEQUENCE_SPEC_ANNOTATION: &str = "kubeflake.io/sequence-spec";

/// The annotation's value.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Note<S> {
    lease_transitions: i32,
    spec: S,
}

/// The annotation's text for assignment `transitions` of a sequence with `spec`; `None` if
/// the spec cannot be written as JSON (it always can: plain fields, no maps), in which case
/// the Lease carries no note and its sidecar reads the sequence.
pub(super) fn note(spec: &IdSequenceSpec, transitions: i32) -> Option<String> {
    serde_json::to_string(&Note {
        lease_transitions: transitions,
        spec,
    })
    .ok()
}

/// Why a slot Lease's [`SEQUENCE_SPEC_ANNOTATION`] was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "slot lease {name} has a {SEQUENCE_SPEC_ANNOTATION} annotation that is not an IdSequence \
     spec note ({problem}); the sequence is read from the API server instead"
)]
pub struct BadSequenceSpecNote {
    pub name: String,
    pub problem: String,
}

/// The sequence's spec as written on `lease` for its current assignment: `None` when the
/// Lease has no note, or one written for an earlier assignment, or the Lease is in a
/// format this release does not read (its parse refuses the whole Lease); the reader then
/// asks the API server for the sequence, as before this note existed.
pub fn assigned_sequence_spec(
    lease: &Lease,
) -> Result<Option<IdSequenceSpec>, BadSequenceSpecNote> {
    if lease_format(lease).is_err() {
        return Ok(None);
    }
    let Some(text) = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SEQUENCE_SPEC_ANNOTATION))
    else {
        return Ok(None);
    };
    let note: Note<IdSequenceSpec> =
        serde_json::from_str(text).map_err(|e| BadSequenceSpecNote {
            name: lease.metadata.name.clone().unwrap_or_default(),
            problem: e.to_string(),
        })?;
    let current = lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0);
    Ok((note.lease_transitions == current).then_some(note.spec))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn spec() -> IdSequenceSpec {
        serde_json::from_value(serde_json::json!({
            "layout": {"datacenterBits": 2, "workerBits": 8},
            "epoch": "2025-01-01T00:00:00Z",
            "datacenterId": 1,
            "lease": {"durationSeconds": 30},
            "clock": {"maxDriftMillis": 500},
        }))
        .expect("a valid spec")
    }

    fn lease(note: Option<String>, transitions: i32) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("orders-slot-3".into()),
                annotations: note
                    .map(|n| BTreeMap::from([(SEQUENCE_SPEC_ANNOTATION.to_string(), n)])),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                lease_transitions: Some(transitions),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn the_note_of_the_current_assignment_gives_back_the_spec_it_was_written_from() {
        let read = assigned_sequence_spec(&lease(note(&spec(), 4), 4)).unwrap();
        assert_eq!(read, Some(spec()));
        assert_eq!(
            read.unwrap().params().unwrap(),
            spec().params().unwrap(),
            "the sidecar's settings from the note are the sequence's own"
        );
    }

    #[test]
    fn a_note_of_an_earlier_assignment_is_not_used() {
        // Assignment 4 wrote the note; an operator that writes none made assignment 5.
        assert_eq!(
            assigned_sequence_spec(&lease(note(&spec(), 4), 5)),
            Ok(None)
        );
    }

    #[test]
    fn a_lease_in_a_newer_format_says_nothing_here() {
        let mut newer = lease(note(&spec(), 4), 4);
        newer
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(super::super::FORMAT_ANNOTATION.to_string(), "2".into());
        assert_eq!(assigned_sequence_spec(&newer), Ok(None));
    }

    #[test]
    fn a_lease_without_a_note_says_nothing() {
        assert_eq!(assigned_sequence_spec(&lease(None, 1)), Ok(None));
    }

    #[test]
    fn an_unreadable_note_is_an_error_naming_the_lease_and_the_annotation() {
        let err = assigned_sequence_spec(&lease(Some("{not json".into()), 1)).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("orders-slot-3"), "{text}");
        assert!(text.contains(SEQUENCE_SPEC_ANNOTATION), "{text}");
        assert!(text.contains("read from the API server instead"), "{text}");
    }
}
