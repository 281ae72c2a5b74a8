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
mod tests;
