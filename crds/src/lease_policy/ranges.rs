//! The Lease policy's check of a format 3 segment counter (docs/safety.md rule 22,
//! [`crate::segment_counter::range`]): once a counter has a limit, every writer but the
//! exempt groups keeps one, with `next` at or below it or inside the queued range, and a
//! queued range, if any, above it. A claimant changes only `next` and `claims` (the
//! checks of earlier releases, which stay as they were), so moving to the queued range is
//! raising `next` into it, and a claim past both ranges is refused.

use k8s_openapi::api::admissionregistration::v1::Validation;

use super::cel::in_range;
use super::validation;
use crate::segment_counter::{
    LIMIT, NEXT_ANNOTATION, QUEUED_LIMIT_ANNOTATION, QUEUED_START_ANNOTATION,
    RANGE_LIMIT_ANNOTATION,
};

/// CEL: annotation `a` of the new object, `''` when absent.
fn annotation(a: &str) -> String {
    format!("variables.newAnnotations[?'{a}'].orValue('')")
}

/// The validation that keeps every writer but the exempt groups within the ranges.
pub(super) fn within_ranges() -> Validation {
    let (next, limit) = (
        annotation(NEXT_ANNOTATION),
        annotation(RANGE_LIMIT_ANNOTATION),
    );
    let (qs, ql) = (
        annotation(QUEUED_START_ANNOTATION),
        annotation(QUEUED_LIMIT_ANNOTATION),
    );
    let no_queue = format!(
        "!('{QUEUED_START_ANNOTATION}' in variables.newAnnotations) \
         && !('{QUEUED_LIMIT_ANNOTATION}' in variables.newAnnotations)"
    );
    let queue_ok = format!(
        "{} && {} && uint({qs}) >= uint({limit}) && uint({ql}) > uint({qs})",
        in_range(&qs, LIMIT),
        in_range(&ql, LIMIT),
    );
    validation(
        format!(
            "!variables.isCounter || variables.isExempt || request.operation == 'DELETE' \
             || !('{RANGE_LIMIT_ANNOTATION}' in variables.oldAnnotations || '{RANGE_LIMIT_ANNOTATION}' in variables.newAnnotations) \
             || ({limit_ok} && {next_ok} \
             && (({no_queue} && uint({next}) <= uint({limit})) \
             || ({queue_ok} && (uint({next}) <= uint({limit}) \
             || (uint({next}) >= uint({qs}) && uint({next}) <= uint({ql}))))))",
            limit_ok = in_range(&limit, LIMIT),
            next_ok = in_range(&next, LIMIT),
        ),
        format!(
            "'segment counter Lease ' + request.name + ' hands out only the ranges of its ID \
             space its operator took from the hub (docs/safety.md rule 22): once it has \
             {RANGE_LIMIT_ANNOTATION}, every write keeps one, with {NEXT_ANNOTATION} at or below \
             it or inside the queued range ({QUEUED_START_ANNOTATION} to \
             {QUEUED_LIMIT_ANNOTATION}: both set, at or above the limit, not empty); this write \
             has next \"' + {next} + '\", limit \"' + {limit} + '\", queued \"' + {qs} + '\" to \"' \
             + {ql} + '\"'"
        ),
    )
}
