//! The controller's one error type and the few API answers it tells apart.

use kubeflake_crds::sequence::SpecError;
use kubeflake_crds::slot_lease::SlotLeaseError;

/// Why a pass failed. Each message says what happened and, where it helps, what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("IdSequence has no namespace (the CRD is namespaced; this should not happen)")]
    NoNamespace,
    /// A Lease in a format this release does not understand says itself what to do (and
    /// must not be deleted): no advice is added to its message.
    #[error(
        "{0}{hint}",
        hint = if .0.is_format() { "" } else { "; fix or delete that Lease (its fence is needed to keep IDs unique)" }
    )]
    BadLease(#[from] SlotLeaseError),
    #[error("invalid spec: {0}")]
    InvalidSpec(#[from] SpecError),
    #[error(transparent)]
    Counter(#[from] kubeflake_crds::segment_counter::CounterError),
    /// A strict sequence's oracle Lease in a format this release does not understand: it
    /// is never written.
    #[error(transparent)]
    Oracle(#[from] kubeflake_crds::strict_oracle::OracleLeaseError),
    /// A held slot Lease of a joined sequence with its fence above its block's bound
    /// (docs/safety.md rule 17): the cap is not written; the message says what to do.
    #[error(transparent)]
    FenceAboveCap(kubeflake_crds::slot_lease::fence_cap::CapError),
}

impl Error {
    /// A bounded label for metrics: the `result` label of
    /// `kubeflake_operator_reconciles_total` (see [`crate::metrics::RESULT_LABELS`]).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::NoNamespace => "no_namespace",
            Error::BadLease(_) => "bad_lease",
            Error::InvalidSpec(_) => "invalid_spec",
            Error::Counter(_) => "bad_counter",
            Error::Oracle(_) => "bad_oracle",
            Error::FenceAboveCap(_) => "fence_above_cap",
        }
    }
}

/// A refused write because the object changed since it was read (409) means another
/// writer was first: read again and decide again (docs/safety.md rule 1). 404: not there.
pub(crate) use kubeflake_runtime::kube_error::{is_conflict, is_not_found};
