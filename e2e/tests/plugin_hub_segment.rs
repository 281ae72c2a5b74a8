//! `kubectl kubeflake hub recover` and `hub forget` on a Segment space, against a real API
//! server that is both the hub and the member cluster (docs/safety.md rule 22): the hub's
//! IdSpace as a backup left it (counter at 2^30, revision 40), and, in the member cluster,
//! the member's IdSpaceMembership with a range kept in its status and its sequence's
//! counter Lease in format 3 with a range queued, both above the hub's counter (ranges
//! taken after the backup). `recover` without member clusters is refused (exit 2, nothing
//! written); with the member cluster named it raises `spec.segment.next` above every value
//! the member holds, the revision and the member's generation 2^32 up, through the CRD's
//! rules (nothing goes down), `--dry-run` writing nothing, and again changes nothing of the
//! counter; `forget` removes the member's entry and leaves the counter. `hub init
//! --from-sequence` makes a Segment space from a Segment sequence and refuses a strict one.
//! Without the node.

mod operator_support;
mod plugin_support;

use std::path::PathBuf;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::ListParams;
use kube::api::{Patch, PatchParams, PostParams};
use kubeflake_crds::id_space::membership::SpaceRef;
use kubeflake_crds::id_space::registry::RECOVERY_REVISION_STEP;
use kubeflake_crds::id_space::{
    IdSpace, IdSpaceMembership, IdSpaceMembershipSpec, IdSpaceSpec, MemberRecord,
    SpaceCounterRecord, SpaceSequenceSpec,
};
use kubeflake_crds::segment_counter::range::{Queued, Ranged};
use kubeflake_crds::segment_counter::{COUNTER_FORMAT, Counter, new_counter};
use kubeflake_crds::sequence::Mode;
use kubeflake_crds::slot_lease::FORMAT_ANNOTATION;
use kubeflake_e2e::{Cluster, TestNamespace};
use operator_support::workspace_binary;
use plugin_support::{plugin, plugin_json};
use serde_json::json;

const SPACE: &str = "orders";
const G: u64 = 1 << 30;

async fn cluster() -> Result<&'static Cluster> {
    workspace_binary("kubectl-kubeflake");
    let cluster = Cluster::shared();
    let crds = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crds");
    for (file, name) in [
        ("idspace.yaml", "idspaces.kubeflake.io"),
        ("idspacemembership.yaml", "idspacememberships.kubeflake.io"),
    ] {
        let path = crds.join(file);
        cluster
            .kubectl(&["apply", "--server-side", "-f", &path.to_string_lossy()])
            .await?
            .ok()
            .with_context(|| format!("kubectl apply of crds/{file}"))?;
        cluster.wait_crd_established(name).await?;
    }
    Ok(cluster)
}

/// The hub's space as a backup holds it: prod (generation 12) and the counter at 2^30.
async fn restored_space(hub: &TestNamespace) -> Result<()> {
    let sequence = SpaceSequenceSpec {
        mode: Mode::Segment,
        ..SpaceSequenceSpec::default()
    };
    let mut spec = IdSpaceSpec::new(sequence, 1024);
    spec.registry.revision = 40;
    spec.registry.members = vec![MemberRecord {
        id: "uid-prod".into(),
        name: "prod".into(),
        datacenter_id: 0,
        generation: 12,
    }];
    spec.segment = Some(SpaceCounterRecord { next: G as i64 });
    Api::<IdSpace>::namespaced(hub.client.clone(), &hub.name)
        .create(&PostParams::default(), &IdSpace::new(SPACE, spec))
        .await?;
    Ok(())
}

/// prod's records, taken after the backup: its counter claims in a range up to 3 * 2^30
/// with one queued up to 5 * 2^30, and a range up to 6 * 2^30 kept in its status.
async fn member_records(shop: &TestNamespace, hub: &str) -> Result<()> {
    let memberships: Api<IdSpaceMembership> = Api::namespaced(shop.client.clone(), &shop.name);
    let spec = IdSpaceMembershipSpec {
        sequence: "orders".into(),
        member_name: "prod".into(),
        space: SpaceRef {
            namespace: hub.into(),
            name: SPACE.into(),
        },
        hub_secret: "kubeflake-hub-orders".into(),
    };
    memberships
        .create(&PostParams::default(), &IdSpaceMembership::new(SPACE, spec))
        .await?;
    let status = json!({"status": {
        "memberId": "uid-prod", "generation": 500, "revisionSeen": 900,
        "segmentRange": {"start": 5 * G, "end": 6 * G},
    }});
    memberships
        .patch_status(SPACE, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    let mut lease = new_counter("orders", &shop.name, 0);
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(FORMAT_ANNOTATION.into(), COUNTER_FORMAT.to_string());
    let counter = Counter {
        next: 2 * G,
        claims: 40,
        format: COUNTER_FORMAT,
        resource_version: None,
        range: Some(Ranged {
            limit: 3 * G,
            queued: Some(Queued {
                start: 4 * G,
                limit: 5 * G,
            }),
        }),
    };
    let lease = counter.write_into(lease);
    ensure!(
        Counter::parse(&lease)?.range == counter.range,
        "the counter reads back"
    );
    Api::<Lease>::namespaced(shop.client.clone(), &shop.name)
        .create(&PostParams::default(), &lease)
        .await?;
    Ok(())
}

async fn stored(hub: &TestNamespace) -> Result<IdSpaceSpec> {
    Ok(Api::<IdSpace>::namespaced(hub.client.clone(), &hub.name)
        .get(SPACE)
        .await?
        .spec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule22_recover_raises_a_segment_spaces_counter_above_every_range_its_members_hold()
-> Result<()> {
    let cluster = cluster().await?;
    let hub = cluster.namespace("hub-seg").await?;
    let shop = cluster.namespace("shop-seg").await?;
    restored_space(&hub).await?;
    member_records(&shop, &hub.name).await?;
    let n = hub.name.as_str();
    let member = cluster.kubeconfig().to_string_lossy().to_string();
    let before = stored(&hub).await?;

    // Without the member clusters the hub cannot bound its counter: refused, nothing written.
    let bare = plugin(cluster, &["hub", "recover", SPACE, "-n", n]).await?;
    assert_eq!(bare.code, 2, "{}", bare.stderr);
    assert!(
        bare.stderr.contains("--member-kubeconfig"),
        "{}",
        bare.stderr
    );
    assert_eq!(stored(&hub).await?, before, "a refusal writes nothing");

    let args = [
        "hub",
        "recover",
        SPACE,
        "-n",
        n,
        "--member-kubeconfig",
        &member,
    ];
    let mut dry_args = args.to_vec();
    dry_args.push("--dry-run");
    let dry = plugin_json(cluster, &dry_args).await?;
    assert_eq!(dry["dryRun"], true);
    assert_eq!(dry["nextAfter"], 6 * G, "{dry}");
    assert_eq!(stored(&hub).await?, before, "--dry-run writes nothing");

    let done = plugin_json(cluster, &args).await?;
    assert_eq!(
        (done["nextBefore"].clone(), done["nextAfter"].clone()),
        (G.into(), (6 * G).into())
    );
    let after = stored(&hub).await?;
    let step = RECOVERY_REVISION_STEP as i64;
    assert_eq!(
        after.segment,
        Some(SpaceCounterRecord {
            next: (6 * G) as i64
        })
    );
    assert_eq!(after.registry.revision, 40 + step);
    assert_eq!(after.registry.members[0].generation, 12 + step);

    // Again: the counter stays (nothing lowered), the revision moves on.
    let again = plugin_json(cluster, &args).await?;
    assert_eq!(again["nextAfter"], 6 * G);
    let twice = stored(&hub).await?;
    assert_eq!(twice.segment, after.segment);
    assert_eq!(twice.registry.revision, 40 + 2 * step);

    // Members and blocks are a space of blocks' views: a Segment space is refused, named.
    let blocks = plugin(cluster, &["hub", "blocks", SPACE, "-n", n]).await?;
    assert_eq!(blocks.code, 1, "{}", blocks.stderr);
    assert!(blocks.stderr.contains("Segment mode"), "{}", blocks.stderr);

    // Forget: the entry goes, the counter stays; a second forget finds no member (exit 3).
    let forgot = plugin_json(cluster, &["hub", "forget", SPACE, "prod", "-n", n]).await?;
    assert_eq!(forgot["segment"], true);
    let gone = stored(&hub).await?;
    assert!(gone.registry.members.is_empty(), "{gone:?}");
    assert_eq!(gone.segment, after.segment);
    assert_eq!(gone.registry.revision, twice.registry.revision + 1);
    let unknown = plugin(cluster, &["hub", "forget", SPACE, "prod", "-n", n]).await?;
    assert_eq!(unknown.code, 3, "{}", unknown.stderr);
    // With prod forgotten, its cluster's membership is no longer required, but a named
    // cluster must still hold a membership of the space: here it does.
    let table = plugin(cluster, &args).await?;
    assert_eq!(table.code, 0, "{}", table.stderr);
    assert!(table.stdout.contains("segment.next"), "{}", table.stdout);
    Ok(())
}

/// Rule 22: `hub init --from-sequence` makes a Segment space (ranges of one counter, no
/// blocks) from a Segment sequence, idempotently; a strict sequence is refused (exit 2,
/// saying why) and nothing of it is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule22_init_makes_a_segment_space_from_a_segment_sequence_and_refuses_a_strict_one()
-> Result<()> {
    let cluster = cluster().await?;
    operator_support::install_crd(cluster).await?;
    let shop = cluster.namespace("shop-init").await?;
    operator_support::create_sequence(&shop, "orders", json!({"mode": "Segment"})).await?;
    operator_support::create_sequence(
        &shop,
        "ledger",
        json!({"mode": "Segment", "segment": {"strict": true}}),
    )
    .await?;
    let hub = cluster.namespace("hub-init").await?;
    let n = hub.name.as_str();
    let from = format!("{}/orders", shop.name);
    let args = ["hub", "init", SPACE, "-n", n, "--from-sequence", &from];
    let result = |report: &serde_json::Value| {
        report["objects"]
            .as_array()
            .and_then(|o| o.iter().find(|o| o["kind"] == "IdSpace"))
            .map(|o| o["result"].clone())
    };
    let made = plugin_json(cluster, &args).await?;
    assert_eq!(result(&made), Some(json!("created")), "{made}");
    let spec = stored(&hub).await?;
    assert_eq!(spec.sequence.mode, Mode::Segment);
    assert!(!spec.sequence.strict);
    let again = plugin_json(cluster, &args).await?;
    assert_eq!(result(&again), Some(json!("unchanged")), "{again}");

    let strict_from = format!("{}/ledger", shop.name);
    let strict = plugin(
        cluster,
        &[
            "hub",
            "init",
            "ledger",
            "-n",
            n,
            "--from-sequence",
            &strict_from,
        ],
    )
    .await?;
    assert_eq!(strict.code, 2, "{}", strict.stderr);
    assert!(
        strict.stderr.contains("cannot span clusters"),
        "{}",
        strict.stderr
    );
    let spaces = Api::<IdSpace>::namespaced(hub.client.clone(), n)
        .list(&ListParams::default())
        .await?;
    ensure!(
        spaces.items.len() == 1,
        "the refused init made nothing: {} spaces",
        spaces.items.len()
    );
    Ok(())
}
