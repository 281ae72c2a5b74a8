//! Issue 55, docs/safety.md rule 22: what the controller's Segment pass does to a counter
//! in format 3 (its values come in ranges its membership took from the hub): it never
//! raises `next` to `spec.segment.start` (that could leave the ranges), and pods injected
//! by 0.1.0, which know no ranges, are not its claimants; nor is any pod when no
//! membership of this cluster recorded the ranges (a counter restored from another
//! cluster).

use super::id_space::{THIS, id_spaces, membership};
use super::*;
use kubeflake_crds::segment_counter::range::{Queued, Ranged};
use kubeflake_crds::segment_counter::{CLAIMANTS_ANNOTATION, Counter, new_counter};

const COUNTER: &str = "/apis/coordination.k8s.io/v1/namespaces/shop/leases/orders-segment-counter";

/// A non-strict Segment sequence with `spec.segment.start` 1000.
fn segment() -> IdSequence {
    let spec = IdSequenceSpec {
        mode: Mode::Segment,
        segment: Some(SegmentSpec {
            start: 1000,
            ..Default::default()
        }),
        ..Default::default()
    };
    sequence(spec, true, false)
}

/// The counter at `next` (below `start`), ranged or not, listing `claimants`.
fn counter(next: u64, range: Option<Ranged>, claimants: &str) -> Lease {
    let c = Counter {
        next,
        claims: 4,
        format: if range.is_some() { 3 } else { 1 },
        resource_version: Some("5".into()),
        range,
    };
    let mut lease = c.write_into(new_counter(SEQ, NS, next));
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(CLAIMANTS_ANNOTATION.into(), claimants.into());
    lease
}

fn ranged() -> Option<Ranged> {
    Some(Ranged {
        limit: 600,
        queued: Some(Queued {
            start: 5000,
            limit: 6000,
        }),
    })
}

/// The memberships of a cluster that joined the sequence: one, made by this cluster.
fn ours() -> Arc<crate::controller::id_spaces::IdSpaces> {
    id_spaces(vec![membership(THIS, Some(&[]))]).0
}

fn injected(name: &str, version: &str) -> Pod {
    let mut p = pod(name);
    p.metadata.annotations = Some(
        [(
            kubeflake_crds::contract::INJECTED_ANNOTATION.to_string(),
            version.to_string(),
        )]
        .into(),
    );
    p
}

#[tokio::test]
async fn rule22_a_ranged_counter_is_never_raised_to_start() {
    // A lone counter below start is raised (a replace of the counter)...
    let seq = segment();
    let api = FakeApi::new()
        .expect(
            Method::GET,
            COUNTER,
            200,
            json!(counter(500, None, "uid-a")),
        )
        .expect(
            Method::PUT,
            COUNTER,
            200,
            json!(counter(1000, None, "uid-a")),
        )
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![pod("a")], vec![]);
    reconcile(Arc::new(seq.clone()), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    assert_eq!(lease_writes(&api), vec![format!("PUT {COUNTER}")]);

    // ...a ranged one is not written at all: its next stays inside its ranges.
    let api = FakeApi::new()
        .expect(
            Method::GET,
            COUNTER,
            200,
            json!(counter(500, ranged(), "uid-a")),
        )
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture_with(&api, vec![pod("a")], vec![], Some(ours()));
    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    assert_eq!(lease_writes(&api), Vec::<String>::new());
}

#[tokio::test]
async fn rule22_a_pod_injected_by_0_1_is_no_claimant_of_a_ranged_counter() {
    let seq = segment();
    let pods = || vec![injected("old", "0.1.0"), injected("new", "0.2.0")];
    // A lone counter lists both (as before).
    let api = FakeApi::new()
        .expect(
            Method::GET,
            COUNTER,
            200,
            json!(counter(1000, None, "uid-new,uid-old")),
        )
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, pods(), vec![]);
    reconcile(Arc::new(seq.clone()), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();

    // A ranged one: the 0.1.0 pod is taken off, by a patch on the version read.
    let api = FakeApi::new()
        .expect(
            Method::GET,
            COUNTER,
            200,
            json!(counter(500, ranged(), "uid-new,uid-old")),
        )
        .expect(
            Method::PATCH,
            COUNTER,
            200,
            json!(counter(500, ranged(), "uid-new")),
        )
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture_with(&api, pods(), vec![], Some(ours()));
    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    let patch = &api.requests(&Method::PATCH, COUNTER)[0].body;
    assert_eq!(
        patch["metadata"]["annotations"][CLAIMANTS_ANNOTATION], "uid-new",
        "{patch:#}"
    );
    assert_eq!(patch["metadata"]["resourceVersion"], "5");
}

#[tokio::test]
async fn rule22_a_ranged_counter_no_membership_of_this_cluster_recorded_gets_no_claimants() {
    let seq = segment();
    let cases = [
        (
            "a membership made by another cluster (restored)",
            vec![membership("cluster-b", Some(&[]))],
        ),
        ("no membership", vec![]),
        (
            "a membership not recorded yet",
            vec![membership(THIS, None)],
        ),
    ];
    for (case, memberships) in cases {
        let api = FakeApi::new()
            .expect(
                Method::GET,
                COUNTER,
                200,
                json!(counter(500, ranged(), "uid-a")),
            )
            .expect(
                Method::PATCH,
                COUNTER,
                200,
                json!(counter(500, ranged(), "")),
            )
            .expect(Method::PATCH, STATUS, 200, echo(&seq));
        let spaces = id_spaces(memberships).0;
        let f = fixture_with(&api, vec![pod("a")], vec![], Some(spaces));
        reconcile(Arc::new(seq.clone()), f.ctx.clone())
            .await
            .expect("a pass");
        api.verify();
        let patch = &api.requests(&Method::PATCH, COUNTER)[0].body;
        assert_eq!(
            patch["metadata"]["annotations"][CLAIMANTS_ANNOTATION], "",
            "{case}: {patch:#}"
        );
    }
}
