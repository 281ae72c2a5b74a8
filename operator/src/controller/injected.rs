//! Which release injected a pod's sidecar, for the protocol changes an older sidecar would
//! break. A pod keeps the sidecar it was injected with until it is re-created, so during an
//! upgrade pods of 0.1.0 run beside this release's (docs/install.md, "Upgrades and version
//! skew"). What 0.1.0 sidecars cannot do safely, the operator keeps from them:
//! - a strict sequence's claimants leave them out (`segment`: they write one value per
//!   compare-and-set and do not read the counter's format; docs/safety.md rule 13);
//! - a Snowflake sequence with a key form (shard bits, bit reversal, a rotating sequence
//!   start; docs/layouts.md) gets no slot for them (`snowflake`): they ignore the spec
//!   fields they do not know and would issue time-ordered IDs, other numbers than the
//!   sequence's other pods issue, which could equal theirs (docs/safety.md rule 3).

use k8s_openapi::api::core::v1::Pod;

/// The release of the webhook that injected `pod` (`kubeflake.io/injected`) is older than
/// 0.2.0. Pods without the annotation were not injected by a webhook: they count as current
/// (their sidecar is whatever their owner runs). An unreadable version counts as old: such
/// pods are kept away rather than risk a duplicate or a misorder.
pub fn before_0_2(pod: &Pod) -> bool {
    kubeflake_crds::contract::injected_before_0_2(
        pod.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(kubeflake_crds::contract::INJECTED_ANNOTATION))
            .map(String::as_str),
    )
}

#[cfg(test)]
mod tests {
    use super::before_0_2;
    use k8s_openapi::api::core::v1::Pod;

    pub(crate) fn injected(version: Option<&str>) -> Pod {
        let mut pod = Pod::default();
        if let Some(v) = version {
            pod.metadata.annotations = Some(
                [(
                    kubeflake_crds::contract::INJECTED_ANNOTATION.to_string(),
                    v.to_string(),
                )]
                .into(),
            );
        }
        pod
    }

    #[test]
    fn rule15_pods_injected_by_0_1_or_an_unreadable_release_count_as_old() {
        assert!(before_0_2(&injected(Some("0.1.0"))));
        assert!(before_0_2(&injected(Some("garbled"))));
        for current in ["0.2.0", "0.3.1", "1.0.0", "0.2.0-rc.1"] {
            assert!(!before_0_2(&injected(Some(current))), "{current}");
        }
        assert!(!before_0_2(&injected(None)));
    }
}
