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

/// Rule 22, a member's etcd restored from an older snapshot: until the membership task has
/// compared this cluster's copy with the hub, since the operator started or its watch last
/// listed from scratch, the counter may be a restored copy below values already claimed.
/// A new pod's sidecar holds no block above it and would claim them again, so only the
/// pods the counter already lists stay its claimants; new pods are listed once a contact
/// compared the copy the API server has now.
mod new_claimants_wait_for_a_contact {
    use super::*;
    use crate::controller::id_spaces::IdSpaces;
    use crate::hub::checks::HubChecks;
    use kube::runtime::{reflector, watcher};
    use kubeflake_crds::id_space::{IdSpaceMembership, MemberId};

    const MEMBERSHIP: &str =
        "/apis/kubeflake.io/v1alpha1/namespaces/shop/idspacememberships/orders-in-space";

    /// The membership of this cluster with its copy at `generation`.
    fn copy_at(generation: i64) -> IdSpaceMembership {
        let mut m = membership(THIS, Some(&[]));
        m.status.as_mut().expect("a copy").generation = generation;
        m
    }

    /// The cache holds the copy at generation 5; `checks` says what was compared.
    fn spaces(checks: &Arc<HubChecks>) -> Arc<IdSpaces> {
        let (store, mut writer) = reflector::store::<IdSpaceMembership>();
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(copy_at(5)));
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let this = MemberId::new(THIS).expect("a member ID");
        Arc::new(IdSpaces::of_cluster(store, this).with_hub_checks(Some(checks.clone())))
    }

    /// One pass over pods `a` (listed) and `b` (new), the API server holding the copy at
    /// `read`: the claimants written, if any.
    async fn claimants_after_a_pass(
        checks: &Arc<HubChecks>,
        read: i64,
        listed: bool,
    ) -> Option<String> {
        let seq = segment();
        let api = FakeApi::new()
            .expect(
                Method::GET,
                COUNTER,
                200,
                json!(counter(500, ranged(), "uid-a")),
            )
            .expect(Method::GET, MEMBERSHIP, 200, json!(copy_at(read)));
        let api = if listed {
            api.expect(
                Method::PATCH,
                COUNTER,
                200,
                json!(counter(500, ranged(), "uid-a,uid-b")),
            )
        } else {
            api
        };
        let api = api.expect(Method::PATCH, STATUS, 200, echo(&seq));
        let f = fixture_with(&api, vec![pod("a"), pod("b")], vec![], Some(spaces(checks)));
        reconcile(Arc::new(seq), f.ctx.clone())
            .await
            .expect("a pass");
        api.verify();
        api.requests(&Method::PATCH, COUNTER)
            .first()
            .map(|r| r.body["metadata"]["annotations"][CLAIMANTS_ANNOTATION].to_string())
    }

    #[tokio::test]
    async fn rule22_after_a_start_a_ranged_counter_lists_no_new_claimant_until_a_contact_compared_its_copy()
     {
        let checks = Arc::new(HubChecks::default());
        checks.listing();
        // Nothing compared since the start: pod b waits, pod a stays listed (no write).
        assert_eq!(claimants_after_a_pass(&checks, 5, false).await, None);
        // A contact compared the copy at 5: pod b is listed.
        checks.compared(NS, "orders-in-space", checks.epoch(), 5);
        assert_eq!(
            claimants_after_a_pass(&checks, 5, true).await.as_deref(),
            Some("\"uid-a,uid-b\"")
        );
    }

    #[tokio::test]
    async fn rule22_a_relist_or_a_restored_copy_older_than_the_one_compared_holds_new_claimants_back()
     {
        let checks = Arc::new(HubChecks::default());
        checks.listing();
        checks.compared(NS, "orders-in-space", checks.epoch(), 5);
        // The API server answers an older copy (its etcd restored): pod b waits.
        assert_eq!(claimants_after_a_pass(&checks, 3, false).await, None);
        // The watch listed from scratch (an API server restart): pod b waits for a contact.
        checks.listing();
        assert_eq!(claimants_after_a_pass(&checks, 5, false).await, None);
    }
}
