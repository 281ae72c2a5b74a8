//! `plan --clusters N`: how one layout is shared by N clusters through a hub
//! (docs/design/2026-11-29-multicluster.md): the block size to give `hub init`, how many
//! blocks that makes, and how many slots each cluster can count on. Every candidate is
//! checked by the API crate's `Space::new` (a power of two, within the slot space, at
//! most 4,096 blocks), so a suggestion is one the hub accepts.
//!
//! A member holds blocks of its own datacenter ID only, so clusters are counted per
//! datacenter (spread evenly). Each wants a block in use and a spare, twice over so a
//! blue/green replacement fits beside it: four blocks per cluster. The largest block
//! size that gives that many is suggested; with room for only two, it warns that
//! blue/green does not fit; with less, that the layout cannot host N clusters.

use kubeflake_crds::id_space::space::{DEFAULT_RENEW_EVERY_SECS, DEFAULT_TOLERANCE_SECS};
use kubeflake_crds::id_space::{Space, SpaceSequence};
use kubeflake_crds::sequence::{Mode, SequenceParams};
use serde::Serialize;

/// Blocks per cluster wanted: one in use and a spare, for two fleets at once.
const WANTED_BLOCKS: u64 = 4;
/// Without blue/green: one in use and a spare.
const MINIMUM_BLOCKS: u64 = 2;
/// Members one IdSpace lists at most (the CRD's limit, crds/src/id_space/resource.rs).
const MAX_MEMBERS: u64 = 512;

/// The shared layout for `clusters` clusters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClustersPlan {
    pub clusters: u64,
    /// Clusters per datacenter ID (the most any datacenter gets when spread evenly).
    pub clusters_per_datacenter: u64,
    /// The `--block-slots` to give `hub init`; null when N clusters do not fit.
    pub block_slots: Option<u64>,
    /// Blocks in the space with that block size.
    pub blocks: Option<u64>,
    /// Slots each cluster can count on (its even share of its datacenter).
    pub slots_per_cluster: Option<u64>,
}

/// Plans `clusters` clusters on `params`' layout; the warnings say what does not fit.
pub fn plan(params: &SequenceParams, clusters: u64) -> (ClustersPlan, Vec<String>) {
    let layout = params.layout;
    let sequence = SpaceSequence {
        layout,
        timebase: params.timebase,
        mode: Mode::Snowflake,
        strict: false,
    };
    let slots = layout.slot_count();
    let datacenters = 1u64 << layout.datacenter_bits();
    let per_dc = clusters.div_ceil(datacenters).max(1);
    // Block sizes the hub accepts, largest first.
    let accepted = |b: u64| {
        Space::new(
            sequence,
            b as i64,
            DEFAULT_TOLERANCE_SECS as i64,
            DEFAULT_RENEW_EVERY_SECS as i64,
        )
        .ok()
    };
    let fits = |want: u64| {
        (0..=layout.worker_bits())
            .rev()
            .map(|bits| 1u64 << bits)
            .filter(|b| slots / b >= want * per_dc)
            .find_map(accepted)
    };
    let mut warnings = Vec::new();
    if clusters > MAX_MEMBERS {
        warnings.push(format!(
            "{clusters} clusters are more than the {MAX_MEMBERS} members one IdSpace lists: \
             use several spaces (one per group of sequences)"
        ));
    }
    let space = fits(WANTED_BLOCKS).or_else(|| {
        let two = fits(MINIMUM_BLOCKS);
        if two.is_some() {
            warnings.push(format!(
                "{clusters} clusters leave room for a block in use and a spare each, not for a \
                 blue/green replacement beside them (it needs twice that): use more workerBits \
                 or datacenterBits for more slots"
            ));
        }
        two
    });
    if space.is_none() {
        warnings.push(format!(
            "{clusters} clusters do not fit: {per_dc} per datacenter ID need {} blocks each \
             (a block in use and a spare), but a datacenter has {slots} slots; raise workerBits \
             or datacenterBits, or share the space among fewer clusters",
            MINIMUM_BLOCKS
        ));
    }
    let plan = ClustersPlan {
        clusters,
        clusters_per_datacenter: per_dc,
        block_slots: space.map(|s| s.block_slots()),
        blocks: space.map(|s| s.block_count()),
        slots_per_cluster: space.map(|_| slots / per_dc),
    };
    (plan, warnings)
}

/// The lines `plan`'s table adds.
pub fn fields(plan: &ClustersPlan) -> Vec<(&'static str, String)> {
    let mut out = vec![
        ("CLUSTERS", plan.clusters.to_string()),
        (
            "PER DATACENTER",
            format!("{} cluster(s)", plan.clusters_per_datacenter),
        ),
    ];
    if let (Some(b), Some(n), Some(s)) = (plan.block_slots, plan.blocks, plan.slots_per_cluster) {
        out.push((
            "BLOCK SLOTS",
            format!("{b} ({n} blocks; `kubectl kubeflake hub init <space> --block-slots {b}`)"),
        ));
        out.push(("SLOTS PER CLUSTER", format!("{s} (an even share)")));
    }
    out
}

#[cfg(test)]
mod tests {
    use kubeflake_crds::sequence::IdSequenceSpec;

    use super::*;

    fn params(json: serde_json::Value) -> SequenceParams {
        serde_json::from_value::<IdSequenceSpec>(json)
            .unwrap()
            .params()
            .unwrap()
    }

    #[test]
    fn three_clusters_on_the_default_layout_get_64_slot_blocks_four_each_and_more() {
        let (plan, warnings) = plan(&params(serde_json::json!({})), 3);
        assert!(warnings.is_empty(), "{warnings:?}");
        // 1024 slots: 3 clusters want 12 blocks; 64 slots give 16, 128 only 8.
        assert_eq!(plan.block_slots, Some(64));
        assert_eq!(plan.blocks, Some(16));
        assert_eq!(plan.slots_per_cluster, Some(341));
    }

    #[test]
    fn clusters_spread_over_datacenters_are_counted_per_datacenter() {
        let p = params(serde_json::json!({"layout": {"datacenterBits": 2, "workerBits": 8}}));
        let (plan, warnings) = plan(&p, 4);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(plan.clusters_per_datacenter, 1);
        assert_eq!(plan.block_slots, Some(64));
        assert_eq!(plan.blocks, Some(16));
    }

    #[test]
    fn too_many_clusters_for_blue_green_warn_and_too_many_for_a_spare_get_no_block_size() {
        let p = params(serde_json::json!({"layout": {"workerBits": 3, "sequenceBits": 19}}));
        // 8 slots: 2 clusters fit four blocks each, 3 only two each, 5 not at all.
        assert!(plan(&p, 2).1.is_empty());
        let (three, warnings) = plan(&p, 3);
        assert_eq!(three.block_slots, Some(1));
        assert!(warnings[0].contains("not for a blue/green"), "{warnings:?}");
        let (five, warnings) = plan(&p, 5);
        assert_eq!(five.block_slots, None);
        assert!(
            warnings[0].contains("5 clusters do not fit"),
            "{warnings:?}"
        );
    }

    #[test]
    fn clusters_must_be_at_least_one() {
        use clap::Parser;
        let err = crate::cli::Cli::try_parse_from(["kubectl-kubeflake", "plan", "--clusters", "0"])
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("'--clusters <N>': \"0\" is not a number of clusters: give 1 or more"),
            "{err}"
        );
    }
}
