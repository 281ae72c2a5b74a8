//! Benchmark, ignored by default: what a steady Snowflake pass computes (its sequence's
//! Leases and Pods read from the indexed caches, silence, the plan) costs with its sequence
//! alone in the cache and with 19 other sequences of the same size beside it, side by side
//! in one run, in CPU time of the thread (so the machine's other load is not in the
//! figure); and, as the baseline, the same pass reading its objects by filtering the whole
//! cache, as the operator did before its caches were indexed by sequence. Never asserted; the figures and the command are in docs/scale.md:
//!
//! ```text
//! cargo test --release -p kubeflake-operator --test pass_cost -- --ignored --nocapture
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::Event;
use kubeflake_crds::Tick;
use kubeflake_crds::slot_lease::{
    FENCE_ANNOTATION, HOLDER_LABEL, HOLDER_POD_ANNOTATION, SEQUENCE_LABEL, SLOT_LABEL, SlotLease,
};
use kubeflake_operator::controller::silence::SilenceBook;
use kubeflake_operator::controller::snowflake::{observe, plan};
use kubeflake_operator::index::{Index, index};
use kubeflake_runtime::cpu::ThreadCpu;

const NAMESPACE: &str = "bench";
const PODS_PER_SEQUENCE: usize = 500;
const SLOTS: u64 = 1024;
/// Passes measured per layout and round.
const PASSES: usize = 200;
const ROUNDS: usize = 5;

fn pod(sequence: &str, i: usize) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.namespace = Some(NAMESPACE.into());
    pod.metadata.name = Some(format!("{sequence}-{i}"));
    pod.metadata.uid = Some(format!("{sequence}-uid-{i}"));
    pod.metadata.resource_version = Some(i.to_string());
    pod.metadata.labels = Some([(SEQUENCE_LABEL.to_string(), sequence.to_string())].into());
    pod
}

/// The slot Lease of slot `i`, held by pod `i` of `sequence`.
fn held_lease(sequence: &str, i: usize) -> Lease {
    let mut lease = Lease::default();
    lease.metadata.namespace = Some(NAMESPACE.into());
    lease.metadata.name = Some(format!("{sequence}-slot-{i}"));
    lease.metadata.resource_version = Some(i.to_string());
    let uid = format!("{sequence}-uid-{i}");
    lease.metadata.labels = Some(BTreeMap::from([
        (SEQUENCE_LABEL.to_string(), sequence.to_string()),
        (SLOT_LABEL.to_string(), i.to_string()),
        (HOLDER_LABEL.to_string(), uid.clone()),
    ]));
    lease.metadata.annotations = Some(BTreeMap::from([
        (FENCE_ANNOTATION.to_string(), "1000".to_string()),
        (HOLDER_POD_ANNOTATION.to_string(), format!("{sequence}-{i}")),
    ]));
    lease.spec = Some(LeaseSpec {
        holder_identity: Some(uid),
        lease_duration_seconds: Some(120),
        ..LeaseSpec::default()
    });
    lease
}

/// Caches holding `sequences` sequences of [`PODS_PER_SEQUENCE`] pods, each pod holding a
/// slot: a steady cluster.
fn caches(sequences: usize) -> (Index<Pod>, Index<Lease>) {
    let (pods, mut pod_writer) = index::<Pod>();
    let (leases, mut lease_writer) = index::<Lease>();
    for s in 0..sequences {
        let sequence = format!("seq-{s}");
        for i in 0..PODS_PER_SEQUENCE {
            pod_writer.apply_watcher_event(&Event::Apply(pod(&sequence, i)));
            lease_writer.apply_watcher_event(&Event::Apply(held_lease(&sequence, i)));
        }
    }
    (pods, leases)
}

/// How a pass finds its sequence's objects.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Read {
    /// Through the index by sequence (what the operator does).
    Index,
    /// By filtering the whole cache (what it did before the index), as a baseline.
    Scan,
}

fn scanned<K>(cache: &Index<K>) -> Vec<Arc<K>>
where
    K: kube::Resource<DynamicType = ()>
        + kube::runtime::reflector::Lookup<DynamicType = ()>
        + Clone
        + 'static,
{
    cache
        .store()
        .state()
        .into_iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(NAMESPACE))
        .filter(|o| {
            o.meta()
                .labels
                .as_ref()
                .and_then(|l| l.get(SEQUENCE_LABEL))
                .map(String::as_str)
                == Some("seq-0")
        })
        .collect()
}

/// CPU time of one steady pass over `seq-0`: what the pass computes before its writes.
fn one_pass(
    read: Read,
    pods: &Index<Pod>,
    leases: &Index<Lease>,
    silence: &SilenceBook,
) -> Duration {
    let cpu = ThreadCpu::start();
    let (observed_leases, observed_pods) = match read {
        Read::Index => (
            observe::leases(leases, NAMESPACE, "seq-0").expect("well-formed"),
            observe::pods(pods, NAMESPACE, "seq-0", false),
        ),
        Read::Scan => (
            scanned(leases)
                .into_iter()
                .map(|l| SlotLease::parse_shared(l).expect("well-formed"))
                .collect(),
            scanned(pods)
                .into_iter()
                .map(|p| plan::PodInfo {
                    name: p.metadata.name.clone().unwrap_or_default(),
                    uid: p.metadata.uid.clone().unwrap_or_default(),
                    created: None,
                    leaving: false,
                })
                .collect(),
        ),
    };
    let silent = silence.silent(
        NAMESPACE,
        "seq-0",
        &observed_leases,
        Duration::from_secs(120),
    );
    let plan = plan::plan(&plan::Observed {
        capacity: SLOTS,
        leases: &observed_leases,
        pods: &observed_pods,
        silent: &silent,
        now: Tick(0),
        assign: true,
        taken: &Default::default(),
        blocks: &kubeflake_operator::controller::id_spaces::blocks::Blocks::Lone,
    });
    assert!(plan.steps.is_empty(), "a steady sequence plans no write");
    cpu.elapsed().expect("Linux tells a thread's CPU time")
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
#[ignore = "a benchmark: run by hand with --ignored --nocapture, see the top of the file"]
fn a_steady_pass_costs_what_its_sequence_has_not_what_the_cluster_has() {
    let layouts = [1usize, 20];
    let built: Vec<(usize, Index<Pod>, Index<Lease>, SilenceBook)> = layouts
        .iter()
        .map(|&n| {
            let (pods, leases) = caches(n);
            (n, pods, leases, SilenceBook::default())
        })
        .collect();
    let mut samples: BTreeMap<(Read, usize), Vec<Duration>> = BTreeMap::new();
    // Rounds alternate the layouts and the reads, so drift in the machine's state hits all
    // of them alike.
    for _ in 0..ROUNDS {
        for read in [Read::Index, Read::Scan] {
            for (n, pods, leases, silence) in &built {
                for _ in 0..PASSES {
                    samples
                        .entry((read, *n))
                        .or_default()
                        .push(one_pass(read, pods, leases, silence));
                }
            }
        }
    }
    println!(
        "\n| reads | sequences in the cache ({PODS_PER_SEQUENCE} pods and Leases each) | passes | CPU per pass, median | p90 |\n|---|---:|---:|---:|---:|"
    );
    for ((read, n), v) in samples {
        let count = v.len();
        let mut sorted = v.clone();
        sorted.sort();
        let p90 = sorted[count * 9 / 10];
        println!(
            "| {read:?} | {n} | {count} | {:.1} µs | {:.1} µs |",
            median(v).as_secs_f64() * 1e6,
            p90.as_secs_f64() * 1e6
        );
    }
}
