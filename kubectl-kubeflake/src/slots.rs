//! `slots <sequence>`: who holds which worker slot, and who waits for one.
//!
//! Read-only: it lists the sequence's slot leases and its labelled pods once and joins them
//! by pod UID (the lease's `holderIdentity`). The join is done by a pure function
//! ([`build`]) so it can be tested without a cluster; the e2e test runs the whole command
//! against a real API server.
//!
//! One piece (over 400 lines): reading, joining and printing the one table belong to one
//! command; the join is pure and tested on its own.
//!
//! A Segment sequence has no slots: its sidecars claim blocks from one counter Lease. For
//! it the report says so, with zero slots and nobody waiting (so scripts reading `slots`
//! keep working), and shows the counter instead ([`build_segment`]); exit code 0.

use std::collections::HashMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};
use kubeflake_crds::segment_counter::{Counter, counter_name};
use kubeflake_crds::sequence::{IdSequence, Mode, SegmentParams, SequenceParams};
use kubeflake_crds::slot_lease::{SEQUENCE_LABEL, SlotLease, lease_name};
use kubeflake_crds::timebase::rfc3339;
use kubeflake_crds::{Slot, Tick};
use serde::Serialize;

use crate::cluster;
use crate::error::CliError;
use crate::output::{Report, age, fields, table};

/// The state of one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SlotStatus {
    /// A pod that exists holds it.
    Held,
    /// Its holder pod no longer exists; the operator will release it (fence kept).
    Orphaned,
    /// It has a lease but no holder.
    Free,
    /// Never used: no lease exists yet (listed only with `--all`).
    Unused,
}

/// One slot. Times are RFC 3339 UTC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotRow {
    pub slot: u32,
    pub lease: String,
    pub status: SlotStatus,
    pub holder_uid: Option<String>,
    pub holder_pod: Option<String>,
    /// The holder pod's `spec.nodeName`, when the pod exists and is scheduled.
    pub node: Option<String>,
    /// Highest tick any holder of the slot may have used (0: none yet).
    pub fence: u64,
    /// Start of the fence tick; null when the fence is 0.
    pub fence_time: Option<String>,
    /// The lease's `renewTime`: the holder's last renewal.
    pub renew_time: Option<String>,
    /// The lease's `acquireTime`: when the slot was last assigned.
    pub acquire_time: Option<String>,
    /// When the slot was last released, if ever.
    pub released_at: Option<String>,
    /// How many times the slot was assigned (`leaseTransitions`).
    pub transitions: i32,
}

/// A labelled pod that holds no slot and is not leaving.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitingPod {
    pub pod: String,
    pub uid: String,
    pub node: Option<String>,
    /// The pod's creation time: it has waited for a slot since then.
    pub created: Option<String>,
    /// Whole seconds from `created` to when the report was made (null without `created`).
    pub waiting_seconds: Option<i64>,
}

/// The counter of a Segment sequence, instead of slots.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SegmentView {
    /// The counter Lease, `<sequence>-segment-counter`.
    pub counter_lease: String,
    /// The first value not yet claimed (every value issued is below it), as the counter
    /// Lease says now; null while the Lease does not exist (or cannot be read as a counter).
    pub next: Option<u64>,
    /// Blocks claimed so far, from the counter Lease.
    pub blocks_claimed: Option<u64>,
    /// Claims per minute, as the operator last measured it (`status.segment`).
    pub claims_per_minute: Option<f64>,
    /// `spec.segment`, defaults filled in.
    pub start: u64,
    pub block_size: u64,
    pub max_block_size: u64,
    /// Labelled pods that are not leaving: they get values through their sidecars and
    /// never wait for a slot.
    pub pods: u64,
}

/// What `slots` prints.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotsReport {
    pub sequence: String,
    pub namespace: String,
    /// `Snowflake`, or `Segment` (then `capacity` is 0, `slots` and `waiting` are empty,
    /// and `segment` shows the counter).
    pub mode: Mode,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment: Option<SegmentView>,
    /// Slots in the layout: 2^workerBits.
    pub capacity: u64,
    /// Slots whose lease names a holder (held or orphaned).
    pub held: u64,
    pub slots: Vec<SlotRow>,
    pub waiting: Vec<WaitingPod>,
    /// Leases that could not be read as slot leases (they are skipped).
    pub warnings: Vec<String>,
    /// When the report was made (Unix ms), for the ages in the table.
    #[serde(skip)]
    pub now_unix_ms: i64,
}

fn ms_ago(now: i64, at: &Option<String>) -> String {
    at.as_deref()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| age((now - t.timestamp_millis()) / 1000))
        .unwrap_or_else(|| "-".to_string())
}

/// The table of a Segment sequence: what it is, and its counter.
fn segment_table(report: &SlotsReport, seg: &SegmentView) -> String {
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".to_string());
    let next = match seg.next {
        Some(n) => format!("{n} (every value issued so far is below it)"),
        None => format!(
            "- (no counter yet: the operator creates {} at start = {})",
            seg.counter_lease, seg.start
        ),
    };
    let block = if seg.max_block_size > seg.block_size {
        format!(
            "{} (adaptive, up to {})",
            seg.block_size, seg.max_block_size
        )
    } else {
        seg.block_size.to_string()
    };
    let pods = seg.pods;
    format!(
        "idsequence {}/{} is a Segment sequence: it has no worker slots; its sidecars claim \
         blocks of values from one counter.\n\n",
        report.namespace, report.sequence
    ) + &fields(&[
        ("COUNTER LEASE", seg.counter_lease.clone()),
        ("NEXT VALUE", next),
        (
            "BLOCKS CLAIMED",
            or_dash(seg.blocks_claimed.map(|n| n.to_string())),
        ),
        (
            "CLAIMS/MIN",
            or_dash(seg.claims_per_minute.map(|n| n.to_string())),
        ),
        ("BLOCK SIZE", block),
        (
            "PODS",
            format!(
                "{pods} labelled pod{} (none waits: segment pods need no slot)",
                if pods == 1 { "" } else { "s" }
            ),
        ),
    ])
}

impl Report for SlotsReport {
    fn table(&self) -> String {
        if let Some(seg) = &self.segment {
            return segment_table(self, seg);
        }
        let now = self.now_unix_ms;
        let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_string());
        let rows: Vec<Vec<String>> = self
            .slots
            .iter()
            .map(|s| {
                let renewed = match &s.renew_time {
                    Some(_) if s.holder_uid.is_some() => {
                        format!("{} ago", ms_ago(now, &s.renew_time))
                    }
                    _ => "-".to_string(),
                };
                let held_for = if s.holder_uid.is_some() {
                    ms_ago(now, &s.acquire_time)
                } else {
                    "-".to_string()
                };
                vec![
                    s.slot.to_string(),
                    format!("{:?}", s.status).to_lowercase(),
                    dash(&s.holder_pod),
                    dash(&s.node),
                    dash(&s.fence_time),
                    renewed,
                    held_for,
                ]
            })
            .collect();
        let waiting = self.waiting.len();
        let mut out = format!(
            "idsequence {}/{}: {} slots, {} held, {} pod{} waiting\n\n",
            self.namespace,
            self.sequence,
            self.capacity,
            self.held,
            waiting,
            if waiting == 1 { "" } else { "s" }
        );
        if rows.is_empty() {
            out.push_str("No slot has been used yet.\n");
        } else {
            out.push_str(&table(
                &[
                    "SLOT",
                    "STATUS",
                    "POD",
                    "NODE",
                    "FENCE",
                    "LAST RENEWAL",
                    "AGE",
                ],
                &rows,
            ));
        }
        if !self.waiting.is_empty() {
            let rows: Vec<Vec<String>> = self
                .waiting
                .iter()
                .map(|w| {
                    vec![
                        w.pod.clone(),
                        dash(&w.node),
                        dash(&w.created),
                        w.waiting_seconds.map_or_else(|| "-".to_string(), age),
                    ]
                })
                .collect();
            out.push_str("\nWaiting for a slot:\n");
            out.push_str(&table(&["POD", "NODE", "SINCE", "WAITING"], &rows));
        }
        out
    }
}

fn micro_time(
    t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>,
) -> Option<String> {
    t.as_ref()
        .and_then(|t| u64::try_from(t.0.as_millisecond()).ok())
        .map(rfc3339)
}

/// Whether a pod is going away or finished (the operator gives such pods no new slot).
fn leaving(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        || pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed")
}

/// Joins a sequence's slot leases with its pods.
pub fn build(
    sequence: &str,
    namespace: &str,
    params: &SequenceParams,
    leases: &[Lease],
    pods: &[Pod],
    all: bool,
    now_unix_ms: i64,
) -> SlotsReport {
    let by_uid: HashMap<&str, &Pod> = pods
        .iter()
        .filter_map(|p| Some((p.metadata.uid.as_deref()?, p)))
        .collect();
    let mut warnings = Vec::new();
    let mut rows: Vec<SlotRow> = Vec::new();
    for lease in leases {
        let parsed = match SlotLease::parse(lease) {
            Ok(p) => p,
            Err(e) => {
                warnings.push(e.to_string());
                continue;
            }
        };
        let spec = lease.spec.as_ref();
        let pod = parsed.holder.as_deref().and_then(|uid| by_uid.get(uid));
        let status = match (&parsed.holder, pod) {
            (Some(_), Some(_)) => SlotStatus::Held,
            (Some(_), None) => SlotStatus::Orphaned,
            (None, _) => SlotStatus::Free,
        };
        rows.push(SlotRow {
            slot: parsed.slot.0,
            lease: parsed.name.clone(),
            status,
            holder_pod: pod
                .and_then(|p| p.metadata.name.clone())
                .or_else(|| parsed.holder.as_ref().and(parsed.holder_pod.clone())),
            node: pod.and_then(|p| p.spec.as_ref()?.node_name.clone()),
            holder_uid: parsed.holder.clone(),
            fence: parsed.fence.0,
            fence_time: (parsed.fence > Tick(0))
                .then(|| rfc3339(params.timebase.start_of(parsed.fence))),
            renew_time: micro_time(&spec.and_then(|s| s.renew_time.clone())),
            acquire_time: micro_time(&spec.and_then(|s| s.acquire_time.clone())),
            released_at: parsed.released_at.clone(),
            transitions: parsed.transitions,
        });
    }
    if all {
        let used: std::collections::HashSet<u32> = rows.iter().map(|r| r.slot).collect();
        let capacity = params.layout.slot_count();
        for n in (0..capacity)
            .map(|n| n as u32)
            .filter(|n| !used.contains(n))
        {
            rows.push(SlotRow {
                slot: n,
                lease: lease_name(sequence, Slot(n)),
                status: SlotStatus::Unused,
                holder_uid: None,
                holder_pod: None,
                node: None,
                fence: 0,
                fence_time: None,
                renew_time: None,
                acquire_time: None,
                released_at: None,
                transitions: 0,
            });
        }
    }
    rows.sort_by_key(|r| r.slot);
    let holders: std::collections::HashSet<&str> = rows
        .iter()
        .filter_map(|r| r.holder_uid.as_deref())
        .collect();
    let mut waiting: Vec<WaitingPod> = pods
        .iter()
        .filter(|p| !leaving(p))
        .filter_map(|p| {
            let uid = p.metadata.uid.as_deref()?;
            let created_ms = p
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_millisecond());
            (!holders.contains(uid)).then(|| WaitingPod {
                pod: p.metadata.name.clone().unwrap_or_default(),
                uid: uid.to_string(),
                node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
                created: created_ms
                    .and_then(|ms| u64::try_from(ms).ok())
                    .map(rfc3339),
                waiting_seconds: created_ms.map(|ms| (now_unix_ms - ms).max(0) / 1000),
            })
        })
        .collect();
    waiting.sort_by(|a, b| (&a.created, &a.pod).cmp(&(&b.created, &b.pod)));
    SlotsReport {
        sequence: sequence.to_string(),
        namespace: namespace.to_string(),
        mode: Mode::Snowflake,
        segment: None,
        capacity: params.layout.slot_count(),
        held: rows.iter().filter(|r| r.holder_uid.is_some()).count() as u64,
        slots: rows,
        waiting,
        warnings,
        now_unix_ms,
    }
}

/// The report for a Segment sequence: no slots, nobody waiting, and its counter
/// (`counter` is its Lease, if it exists).
pub fn build_segment(
    seq: &IdSequence,
    namespace: &str,
    params: &SegmentParams,
    counter: Option<&Lease>,
    pods: &[Pod],
    now_unix_ms: i64,
) -> SlotsReport {
    let sequence = seq.metadata.name.clone().unwrap_or_default();
    let mut warnings = Vec::new();
    let parsed = counter.and_then(|lease| match Counter::parse(lease) {
        Ok(c) => Some(c),
        Err(e) => {
            warnings.push(e.to_string());
            None
        }
    });
    let claims_per_minute = seq
        .status
        .as_ref()
        .and_then(|s| s.segment.as_ref())
        .and_then(|s| s.claims_per_minute);
    SlotsReport {
        namespace: namespace.to_string(),
        mode: Mode::Segment,
        segment: Some(SegmentView {
            counter_lease: counter_name(&sequence),
            next: parsed.as_ref().map(|c| c.next),
            blocks_claimed: parsed.as_ref().map(|c| c.claims),
            claims_per_minute,
            start: params.start,
            block_size: params.block_size,
            max_block_size: params.max_block_size,
            pods: pods.iter().filter(|p| !leaving(p)).count() as u64,
        }),
        sequence,
        capacity: 0,
        held: 0,
        slots: Vec::new(),
        waiting: Vec::new(),
        warnings,
        now_unix_ms,
    }
}

/// Reads the sequence, its leases (or its counter) and its pods, and builds the report.
pub async fn fetch(
    args: &crate::cli::SlotsArgs,
    now_unix_ms: i64,
) -> Result<SlotsReport, CliError> {
    let (client, namespace): (Client, String) = cluster::connect(&args.cluster).await?;
    let name = &args.sequence;
    let seq = cluster::get_sequence(&client, &namespace, name).await?;
    let selector = ListParams::default().labels(&format!("{SEQUENCE_LABEL}={name}"));
    let api_error = |what: &str| {
        let what = format!("{what} of idsequence {name} in namespace {namespace}");
        move |source| CliError::Api { what, source }
    };
    let leases = Api::<Lease>::namespaced(client.clone(), &namespace);
    let pods = Api::<Pod>::namespaced(client, &namespace)
        .list(&selector)
        .await
        .map_err(api_error("list the pods"))?;
    if seq.spec.mode == Mode::Segment {
        let params = seq
            .spec
            .segment
            .clone()
            .unwrap_or_default()
            .params()
            .map_err(|reason| CliError::BadSequenceInCluster {
                name: format!("{namespace}/{name}"),
                reason,
            })?;
        let counter = leases
            .get_opt(&counter_name(name))
            .await
            .map_err(api_error("read the counter lease"))?;
        return Ok(build_segment(
            &seq,
            &namespace,
            &params,
            counter.as_ref(),
            &pods.items,
            now_unix_ms,
        ));
    }
    let params = cluster::snowflake_params(&seq, &namespace, name)?;
    let leases = leases
        .list(&selector)
        .await
        .map_err(api_error("list the slot leases"))?;
    Ok(build(
        name,
        &namespace,
        &params,
        &leases.items,
        &pods.items,
        args.all,
        now_unix_ms,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
    use kubeflake_crds::sequence::IdSequenceSpec;
    use kubeflake_crds::slot_lease::{FENCE_ANNOTATION, HOLDER_POD_ANNOTATION, lease_labels};
    use std::collections::BTreeMap;

    fn params(worker_bits: i32) -> SequenceParams {
        let mut spec = IdSequenceSpec::default();
        spec.layout.worker_bits = worker_bits;
        spec.layout.sequence_bits = 22 - worker_bits;
        spec.params().unwrap()
    }

    fn pod(name: &str, uid: &str, node: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(uid.into()),
                creation_timestamp: Some(Time(
                    k8s_openapi::jiff::Timestamp::from_millisecond(1_767_225_600_000).unwrap(),
                )),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(str::to_string),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn lease(slot: u32, holder: Option<(&str, &str)>, fence: u64) -> Lease {
        let mut annotations = BTreeMap::from([(FENCE_ANNOTATION.to_string(), fence.to_string())]);
        if let Some((_, name)) = holder {
            annotations.insert(HOLDER_POD_ANNOTATION.to_string(), name.to_string());
        }
        let renew =
            MicroTime(k8s_openapi::jiff::Timestamp::from_millisecond(1_767_225_660_000).unwrap());
        Lease {
            metadata: ObjectMeta {
                name: Some(lease_name("orders", Slot(slot))),
                labels: Some(lease_labels("orders", Slot(slot), holder.map(|h| h.0))),
                annotations: Some(annotations),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(|h| h.0.to_string()),
                renew_time: Some(renew.clone()),
                acquire_time: Some(renew),
                lease_transitions: Some(1),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn holders_are_joined_to_their_pods_and_nodes_and_pods_without_a_slot_wait() {
        let p = params(2);
        let pods = [
            pod("app-0", "u0", Some("node-a")),
            pod("app-1", "u1", None),
            pod("app-2", "u2", None),
        ];
        let leases = [
            lease(1, Some(("u0", "app-0")), 500),
            lease(0, Some(("u1", "app-1")), 0),
            lease(2, Some(("gone", "old-pod")), 7),
            lease(3, None, 9),
        ];
        let r = build(
            "orders",
            "shop",
            &p,
            &leases,
            &pods,
            false,
            1_767_225_700_000,
        );
        assert_eq!(r.capacity, 4);
        assert_eq!(r.held, 3);
        let by_slot: Vec<(u32, SlotStatus, Option<&str>, Option<&str>)> = r
            .slots
            .iter()
            .map(|s| (s.slot, s.status, s.holder_pod.as_deref(), s.node.as_deref()))
            .collect();
        assert_eq!(
            by_slot,
            vec![
                (0, SlotStatus::Held, Some("app-1"), None),
                (1, SlotStatus::Held, Some("app-0"), Some("node-a")),
                (2, SlotStatus::Orphaned, Some("old-pod"), None),
                (3, SlotStatus::Free, None, None),
            ]
        );
        assert_eq!(
            r.slots[1].fence_time,
            Some(rfc3339(p.timebase.start_of(Tick(500))))
        );
        assert_eq!(r.slots[0].fence_time, None, "fence 0 has no time");
        let waiting: Vec<&str> = r.waiting.iter().map(|w| w.pod.as_str()).collect();
        assert_eq!(waiting, vec!["app-2"]);
        let text = r.table();
        assert!(text.contains("4 slots, 3 held, 1 pod waiting"), "{text}");
        assert!(text.contains("Waiting for a slot:"), "{text}");
    }

    #[test]
    fn waiting_pods_are_listed_oldest_first_with_when_they_started_waiting_and_for_how_long() {
        let p = params(1);
        let created_at = |name: &str, uid: &str, ms: i64| {
            let mut pod = pod(name, uid, Some("node-b"));
            pod.metadata.creation_timestamp = Some(Time(
                k8s_openapi::jiff::Timestamp::from_millisecond(ms).unwrap(),
            ));
            pod
        };
        let t0 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
        let pods = [
            pod("app-0", "u0", Some("node-a")),
            pod("app-1", "u1", Some("node-a")),
            created_at("app-3", "u3", t0 + 240_000),
            created_at("app-2", "u2", t0),
        ];
        let leases = [
            lease(0, Some(("u0", "app-0")), 0),
            lease(1, Some(("u1", "app-1")), 0),
        ];
        let now = t0 + 300_000;
        let r = build("orders", "shop", &p, &leases, &pods, false, now);
        let waiting: Vec<(&str, Option<&str>, Option<i64>)> = r
            .waiting
            .iter()
            .map(|w| (w.pod.as_str(), w.created.as_deref(), w.waiting_seconds))
            .collect();
        assert_eq!(
            waiting,
            vec![
                ("app-2", Some("2026-01-01T00:00:00.000Z"), Some(300)),
                ("app-3", Some("2026-01-01T00:04:00.000Z"), Some(60)),
            ]
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["waiting"][0]["waitingSeconds"], 300, "{json}");

        let text = r.table();
        assert!(text.contains("2 slots, 2 held, 2 pods waiting"), "{text}");
        let section = text
            .split("Waiting for a slot:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("no waiting section in:\n{text}"));
        let rows: Vec<Vec<&str>> = section
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows,
            vec![
                vec!["POD", "NODE", "SINCE", "WAITING"],
                vec!["app-2", "node-b", "2026-01-01T00:00:00.000Z", "5m"],
                vec!["app-3", "node-b", "2026-01-01T00:04:00.000Z", "60s"],
            ]
        );
    }

    #[test]
    fn a_waiting_pod_created_after_the_report_by_its_clock_has_waited_zero_seconds() {
        let r = build(
            "orders",
            "shop",
            &params(1),
            &[],
            &[pod("app-0", "u0", None)],
            false,
            1_767_225_600_000 - 5_000,
        );
        assert_eq!(r.waiting[0].waiting_seconds, Some(0));
    }

    #[test]
    fn leaving_pods_do_not_wait_and_all_lists_unused_slots() {
        let p = params(2);
        let mut done = pod("done", "u9", None);
        done.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        let r = build("orders", "shop", &p, &[lease(2, None, 0)], &[done], true, 0);
        assert!(r.waiting.is_empty());
        let statuses: Vec<SlotStatus> = r.slots.iter().map(|s| s.status).collect();
        assert_eq!(
            statuses,
            vec![
                SlotStatus::Unused,
                SlotStatus::Unused,
                SlotStatus::Free,
                SlotStatus::Unused
            ]
        );
    }

    #[test]
    fn a_garbled_lease_is_skipped_with_a_warning() {
        let mut bad = lease(1, None, 0);
        bad.metadata.labels = Some(BTreeMap::new());
        let r = build("orders", "shop", &params(2), &[bad], &[], false, 0);
        assert!(r.slots.is_empty());
        assert_eq!(r.warnings.len(), 1);
    }

    #[test]
    fn a_segment_sequence_has_no_slots_nobody_waits_and_the_counter_is_shown() {
        let seq: IdSequence = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSequence",
            "metadata": {"name": "invoices"},
            "spec": {"mode": "Segment", "segment": {"blockSize": 500, "maxBlockSize": 8000}},
            "status": {"segment": {"next": 4001, "claimsPerMinute": 2.5}},
        }))
        .unwrap();
        let params = seq.spec.segment_params().unwrap().unwrap();
        let mut counter = kubeflake_crds::segment_counter::new_counter("invoices", "shop", 1);
        counter = Counter {
            next: 5001,
            claims: 10,
            resource_version: None,
        }
        .write_into(counter);
        let pods = [pod("app-0", "u0", None), pod("app-1", "u1", None)];
        let r = build_segment(&seq, "shop", &params, Some(&counter), &pods, 0);
        assert_eq!((r.mode, r.capacity, r.held), (Mode::Segment, 0, 0));
        assert!(r.slots.is_empty() && r.waiting.is_empty(), "{r:?}");
        let seg = r.segment.clone().unwrap();
        assert_eq!(seg.counter_lease, "invoices-segment-counter");
        assert_eq!(
            (seg.next, seg.blocks_claimed),
            (Some(5001), Some(10)),
            "the live counter, not the status"
        );
        assert_eq!(seg.claims_per_minute, Some(2.5));
        assert_eq!(
            (seg.block_size, seg.max_block_size, seg.pods),
            (500, 8000, 2)
        );
        let text = r.table();
        assert!(
            text.starts_with(
                "idsequence shop/invoices is a Segment sequence: it has no worker slots"
            ),
            "{text}"
        );
        assert!(text.contains("NEXT VALUE       5001"), "{text}");
        assert!(text.contains("500 (adaptive, up to 8000)"), "{text}");
        assert!(!text.contains("Waiting for a slot"), "{text}");

        let missing = build_segment(&seq, "shop", &params, None, &pods, 0);
        assert_eq!(missing.segment.unwrap().next, None);
        assert!(missing.warnings.is_empty());
        counter.metadata.annotations = None;
        let garbled = build_segment(&seq, "shop", &params, Some(&counter), &pods, 0);
        assert_eq!(garbled.warnings.len(), 1, "{:?}", garbled.warnings);
    }

    /// An object release 0.1.0 left in the API server (`crds/tests/fixtures`, serialised
    /// by that release's own code), read as the plugin reads it from the cluster.
    fn released_fixture<T: serde::de::DeserializeOwned>(name: &str) -> T {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../crds/tests/fixtures")
            .join(name);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!(
                "{} does not read as this release's type: {e}",
                path.display()
            )
        })
    }

    #[test]
    fn the_slots_a_0_1_0_operator_and_sidecar_wrote_render_with_holder_node_and_fence() {
        use chrono::TimeZone;
        let seq: IdSequence = released_fixture("idsequence-0.1.0.json");
        let params = seq.spec.params().unwrap();
        let held: Lease = released_fixture("slot-lease-0.1.0.json");
        let pods = [pod(
            "app-0",
            "0b6f1c3e-2a9d-4e85-b7c0-6d1e4f2a9b37",
            Some("node-a"),
        )];
        let now = chrono::Utc
            .with_ymd_and_hms(2026, 11, 24, 8, 1, 0)
            .unwrap()
            .timestamp_millis();
        let r = build("orders", "shop", &params, &[held], &pods, false, now);
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        assert_eq!((r.capacity, r.held), (1024, 1));
        let row = &r.slots[0];
        assert_eq!(
            (
                row.slot,
                row.status,
                row.holder_pod.as_deref(),
                row.node.as_deref()
            ),
            (2, SlotStatus::Held, Some("app-0"), Some("node-a"))
        );
        assert_eq!((row.fence, row.transitions), (59_817_760_000, 1));
        assert_eq!(
            row.fence_time.as_deref(),
            Some("2026-11-24T08:02:40.000Z"),
            "the renewal at 08:00:40 raised the fence one lease duration ahead"
        );
        assert_eq!(row.renew_time.as_deref(), Some("2026-11-24T08:00:40.000Z"));
        let text = r.table();
        assert!(
            text.starts_with("idsequence shop/orders: 1024 slots, 1 held, 0 pods waiting"),
            "{text}"
        );
        assert!(text.contains("2026-11-24T08:02:40.000Z"), "{text}");

        let released: Lease = released_fixture("slot-lease-released-0.1.0.json");
        let r = build("orders", "shop", &params, &[released], &[], false, now);
        let row = &r.slots[0];
        assert_eq!(
            (row.status, row.holder_pod.as_deref()),
            (SlotStatus::Free, None)
        );
        assert_eq!(
            row.released_at.as_deref(),
            Some("2026-11-24T08:00:41.000000Z")
        );
        assert!(r.waiting.is_empty() && r.warnings.is_empty(), "{r:?}");
    }

    #[test]
    fn a_segment_sequence_and_counter_0_1_0_wrote_render_with_its_counter_and_claim_rate() {
        let seq: IdSequence = released_fixture("idsequence-segment-0.1.0.json");
        let params = seq.spec.segment_params().unwrap().unwrap();
        let counter: Lease = released_fixture("segment-counter-0.1.0.json");
        let r = build_segment(&seq, "shop", &params, Some(&counter), &[], 0);
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        let seg = r.segment.clone().unwrap();
        assert_eq!(
            (seg.next, seg.blocks_claimed, seg.claims_per_minute),
            (Some(5001), Some(10), Some(2.5))
        );
        assert_eq!((seg.block_size, seg.max_block_size), (500, 8000));
        let text = r.table();
        assert!(text.contains("NEXT VALUE       5001"), "{text}");
        assert!(text.contains("2.5"), "{text}");
    }
}
