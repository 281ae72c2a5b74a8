//! `kubectl kubeflake hub ...` against a real API server (the hub): `init` makes the space,
//! its namespace, the hub policy and the members' Role, idempotently, refusing bad flags
//! and changed parameters (exit 2); `add-member` prints a Secret whose kubeconfig gives
//! the member exactly the design's rights (its space read and joined under its own name
//! through the policy; delete, create, Secrets and other namespaces refused); `members` and `blocks`
//! show a registry stored in an IdSpace, table and json; `forget` refuses an unknown member
//! (exit 3, nothing written) and hands back a known member's blocks with each floor at its
//! bound, one compare-and-swap (`--dry-run` writes nothing); `recover` frees every block
//! above any bound a member can hold; an unknown space exits 3; `join` makes a sequence's
//! IdSpaceMembership once (again: unchanged; other values: exit 2; no sequence: exit 3).
//!
//! The IdSpace CRD is the generated one (crds/idspace.yaml), so every write the plugin
//! makes passes the CRD's own rules (a floor never goes down, revision counted up). The
//! plugin binary is found or built as in e2e/tests/plugin.rs.

mod operator_support;
mod plugin_support;

use std::path::PathBuf;

use anyhow::{Context, Result};
use kube::Api;
use kube::api::PostParams;
use kubeflake_crds::id_space::{
    BlockRecord, IdSpace, IdSpaceSpec, MemberRecord, RegistryRecord, SpaceSequenceSpec,
};
use kubeflake_crds::timebase::DEFAULT_EPOCH;
use kubeflake_crds::{TimeUnit, Timebase};
use kubeflake_e2e::{Cluster, TestNamespace};
use operator_support::workspace_binary;
use plugin_support::{plugin, plugin_json};

const SPACE: &str = "orders";
/// Upper bound for one plugin run (it talks to a local API server).
const MINUTE: u64 = 60_000;

async fn cluster() -> Result<&'static Cluster> {
    // Built (when stale) before any test takes the time, so that a build does not eat
    // into the bounds' distances the tests check.
    workspace_binary("kubectl-kubeflake");
    let cluster = Cluster::shared();
    let crd = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crds/idspace.yaml");
    cluster
        .kubectl(&["apply", "--server-side", "-f", &crd.to_string_lossy()])
        .await?
        .ok()
        .context("kubectl apply of crds/idspace.yaml")?;
    cluster
        .wait_crd_established("idspaces.kubeflake.io")
        .await?;
    Ok(cluster)
}

/// The current tick of the default timebase (1 ms ticks).
fn now_tick() -> u64 {
    let timebase = Timebase::parse(DEFAULT_EPOCH, TimeUnit::default()).expect("default epoch");
    let now = chrono::Utc::now().timestamp_millis() as u64;
    timebase.tick_at(now).expect("after the epoch").0
}

fn block(index: i64, term: i64, floor: u64, owner: Option<(&str, u64)>) -> BlockRecord {
    BlockRecord {
        index,
        term,
        floor: floor as i64,
        owner: owner.map(|(o, _)| o.to_string()),
        bound: owner.map(|(_, b)| b as i64),
    }
}

/// A space whose registry holds prod (blocks 0 and 2, bounds 43 min and 2 h ahead) and dr
/// (block 5, lapsed 5 minutes ago); block 1 is free. Returns the namespace and `now`.
async fn space(cluster: &Cluster) -> Result<(TestNamespace, u64)> {
    let ns = cluster.namespace("hub").await?;
    let now = now_tick();
    let member = |id: &str, name: &str| MemberRecord {
        id: id.into(),
        name: name.into(),
        datacenter_id: 0,
        generation: 3,
    };
    let mut spec = IdSpaceSpec::new(SpaceSequenceSpec::default(), 64);
    spec.registry = RegistryRecord {
        revision: 9,
        members: vec![member("uid-prod", "prod"), member("uid-dr", "dr")],
        blocks: vec![
            block(0, 1, 0, Some(("uid-prod", now + 43 * MINUTE))),
            block(1, 2, now - MINUTE, None),
            block(2, 1, 500, Some(("uid-prod", now + 120 * MINUTE))),
            block(5, 3, 900, Some(("uid-dr", now - 5 * MINUTE))),
        ],
    };
    Api::<IdSpace>::namespaced(ns.client.clone(), &ns.name)
        .create(&PostParams::default(), &IdSpace::new(SPACE, spec))
        .await?;
    Ok((ns, now))
}

async fn stored(ns: &TestNamespace) -> Result<RegistryRecord> {
    let space = Api::<IdSpace>::namespaced(ns.client.clone(), &ns.name)
        .get(SPACE)
        .await?;
    Ok(space.spec.registry)
}

fn stored_block(registry: &RegistryRecord, index: i64) -> Option<&BlockRecord> {
    registry.blocks.iter().find(|b| b.index == index)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_and_blocks_show_the_registry_stored_on_the_hub() -> Result<()> {
    let cluster = cluster().await?;
    let (ns, now) = space(cluster).await?;
    let n = ns.name.as_str();

    let members = plugin_json(cluster, &["hub", "members", SPACE, "-n", n]).await?;
    assert_eq!(members["revision"], 9);
    let rows = members["members"].as_array().context("members")?;
    let prod = rows.iter().find(|m| m["name"] == "prod").context("prod")?;
    assert_eq!(prod["id"], "uid-prod");
    assert_eq!(prod["generation"], 3);
    assert_eq!(prod["blocks"], serde_json::json!([0, 2]));
    assert_eq!(prod["nearestBound"]["tick"], now + 43 * MINUTE);
    let in_seconds = prod["nearestBound"]["inSeconds"]
        .as_i64()
        .context("inSeconds")?;
    assert!((42 * 60..=43 * 60).contains(&in_seconds), "{in_seconds}");
    let dr = rows.iter().find(|m| m["name"] == "dr").context("dr")?;
    assert!(dr["nearestBound"]["inSeconds"].as_i64() < Some(0));

    let table = plugin(cluster, &["hub", "members", SPACE, "-n", n]).await?;
    assert_eq!(table.code, 0, "{}", table.stderr);
    assert!(table.stdout.starts_with("NAME"), "{}", table.stdout);
    assert!(table.stdout.contains("(in 4"), "{}", table.stdout);
    assert!(table.stdout.contains("m ago)"), "{}", table.stdout);

    let blocks = plugin_json(cluster, &["hub", "blocks", SPACE, "-n", n]).await?;
    let rows = blocks["blocks"].as_array().context("blocks")?;
    let summary: Vec<(u64, &str, bool)> = rows
        .iter()
        .map(|b| {
            (
                b["index"].as_u64().unwrap_or(99),
                b["status"].as_str().unwrap_or("?"),
                b["lapsed"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (0, "held", false),
            (1, "free", false),
            (2, "held", false),
            (5, "lapsed", true)
        ]
    );
    assert_eq!(rows[3]["firstSlot"], 320);
    assert_eq!(rows[3]["lastSlot"], 383);
    assert_eq!(rows[3]["ownerName"], "dr");
    assert_eq!(rows[2]["bound"]["tick"], now + 120 * MINUTE);
    let all = plugin_json(cluster, &["hub", "blocks", SPACE, "-n", n, "--all"]).await?;
    assert_eq!(all["blocks"].as_array().map(Vec::len), Some(16));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule18_forget_refuses_an_unknown_member_and_hands_back_a_known_ones_blocks_at_their_bounds()
-> Result<()> {
    let cluster = cluster().await?;
    let (ns, now) = space(cluster).await?;
    let n = ns.name.as_str();
    let before = stored(&ns).await?;

    let unknown = plugin(cluster, &["hub", "forget", SPACE, "staging", "-n", n]).await?;
    assert_eq!(unknown.code, 3, "{}", unknown.stderr);
    assert!(
        unknown.stderr.contains(&format!(
            "\"staging\" is not a member of idspace {n}/{SPACE} (by name or cluster ID); its \
             members are: dr, prod"
        )),
        "{}",
        unknown.stderr
    );
    assert_eq!(
        stored(&ns).await?,
        before,
        "an unknown member changes nothing"
    );

    let dry = plugin_json(
        cluster,
        &["hub", "forget", SPACE, "prod", "-n", n, "--dry-run"],
    )
    .await?;
    assert_eq!(dry["dryRun"], true);
    assert_eq!(dry["handedBack"].as_array().map(Vec::len), Some(2));
    assert_eq!(stored(&ns).await?, before, "--dry-run writes nothing");

    let done = plugin_json(cluster, &["hub", "forget", SPACE, "prod", "-n", n]).await?;
    assert_eq!(done["member"], "prod");
    assert_eq!(
        (
            done["revisionBefore"].clone(),
            done["revisionAfter"].clone()
        ),
        (9.into(), 10.into())
    );
    let after = stored(&ns).await?;
    assert_eq!(after.revision, 10);
    assert!(after.members.iter().all(|m| m.name != "prod"), "{after:?}");
    for (index, bound) in [(0, now + 43 * MINUTE), (2, now + 120 * MINUTE)] {
        let b = stored_block(&after, index).context("block listed")?;
        assert_eq!(
            (b.owner.as_deref(), b.bound, b.floor),
            (None, None, bound as i64),
            "block {index} must be free with its floor at its bound"
        );
    }
    assert_eq!(
        stored_block(&after, 5),
        stored_block(&before, 5),
        "dr's block is untouched"
    );

    let again = plugin(cluster, &["hub", "forget", SPACE, "prod", "-n", n]).await?;
    assert_eq!(
        again.code, 3,
        "a forgotten member is unknown: {}",
        again.stderr
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule21_recover_frees_every_block_above_any_bound_a_member_can_hold() -> Result<()> {
    let cluster = cluster().await?;
    let (ns, now) = space(cluster).await?;
    let n = ns.name.as_str();
    let report = plugin_json(cluster, &["hub", "recover", SPACE, "-n", n]).await?;
    assert_eq!(report["freed"], serde_json::json!([0, 2, 5]));
    let after = stored(&ns).await?;
    // tolerance 3600 s + renewal 300 s + the default skew 60 s, in 1 ms ticks.
    let lowest = (now + (3600 + 300 + 60) * 1000) as i64;
    assert_eq!(after.blocks.len(), 16, "every block is listed: {after:?}");
    for b in &after.blocks {
        assert!(
            b.owner.is_none() && b.floor >= lowest,
            "{b:?} (lowest {lowest})"
        );
    }
    assert_eq!(after.members.len(), 2, "memberships are kept");
    // Above any revision a member saw after the backup, or members would keep answering
    // HubWentBack and never claim again.
    let step = kubeflake_crds::id_space::registry::RECOVERY_REVISION_STEP as i64;
    assert_eq!(after.revision, 9 + step, "{after:?}");
    assert_eq!(report["revisionAfter"], serde_json::json!(9 + step));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_space_exits_3_naming_it() -> Result<()> {
    let cluster = cluster().await?;
    let ns = cluster.namespace("hub-empty").await?;
    let r = plugin(cluster, &["hub", "blocks", "nope", "-n", &ns.name]).await?;
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr
            .contains(&format!("idspace nope not found in namespace {}", ns.name)),
        "{}",
        r.stderr
    );
    Ok(())
}

/// A member kubeconfig's client (what the member's operator would build from its Secret).
async fn member_client(kubeconfig: &str) -> Result<kube::Client> {
    let file = kube::config::Kubeconfig::from_yaml(kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await?;
    Ok(kube::Client::try_from(config)?)
}

fn forbidden<T: std::fmt::Debug>(result: kube::Result<T>) -> bool {
    matches!(result, Err(kube::Error::Api(s)) if s.code == 403)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_and_add_member_make_the_hub_and_a_member_credential_with_the_designs_rights()
-> Result<()> {
    let cluster = cluster().await?;
    // A namespace init makes itself.
    let n = format!("hub-init-{}", now_tick() % 1_000_000_007);
    let n = n.as_str();
    let init = plugin_json(
        cluster,
        &["hub", "init", SPACE, "-n", n, "--block-slots", "32"],
    )
    .await?;
    let results: Vec<(String, String)> = init["objects"]
        .as_array()
        .context("objects")?
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap_or("?").into(),
                o["result"].as_str().unwrap_or("?").into(),
            )
        })
        .collect();
    assert!(
        results.contains(&("Namespace".into(), "created".into())),
        "{results:?}"
    );
    assert!(
        results.contains(&("IdSpace".into(), "created".into())),
        "{results:?}"
    );
    let again = plugin_json(
        cluster,
        &["hub", "init", SPACE, "-n", n, "--block-slots", "32"],
    )
    .await?;
    assert!(
        again["objects"]
            .as_array()
            .context("objects")?
            .iter()
            .any(|o| o["kind"] == "IdSpace" && o["result"] == "unchanged"),
        "init is idempotent: {again}"
    );
    let differs = plugin(cluster, &["hub", "init", SPACE, "-n", n]).await?;
    assert_eq!(differs.code, 2, "{}", differs.stderr);
    assert!(
        differs
            .stderr
            .contains("exists with other parameters (blockSlots is 32, not 64)"),
        "{}",
        differs.stderr
    );
    let bad = plugin(
        cluster,
        &["hub", "init", "other", "-n", n, "--block-slots", "48"],
    )
    .await?;
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("--block-slots") && bad.stderr.contains("power of two"),
        "{}",
        bad.stderr
    );
    let bad_name = plugin(cluster, &["hub", "add-member", SPACE, "Prod_EU", "-n", n]).await?;
    assert_eq!(bad_name.code, 2, "{}", bad_name.stderr);
    assert!(
        bad_name
            .stderr
            .contains("MEMBER: member name \"Prod_EU\" is not a DNS label"),
        "{}",
        bad_name.stderr
    );
    let no_space = plugin(cluster, &["hub", "add-member", "nope", "prod", "-n", n]).await?;
    assert_eq!(no_space.code, 3, "{}", no_space.stderr);

    let secret = plugin_json(cluster, &["hub", "add-member", SPACE, "prod", "-n", n]).await?;
    assert_eq!(secret["kind"], "Secret");
    assert_eq!(secret["metadata"]["name"], format!("kubeflake-hub-{SPACE}"));
    assert_eq!(secret["metadata"]["namespace"], "kubeflake-system");
    let kubeconfig = secret["stringData"]["kubeconfig"]
        .as_str()
        .context("kubeconfig")?;
    let member = member_client(kubeconfig).await?;

    // An operator's read works; everything else the design leaves out is refused.
    let spaces = Api::<IdSpace>::namespaced(member.clone(), n);
    let mut space = spaces
        .get(SPACE)
        .await
        .context("the member reads its space")?;
    assert!(
        forbidden(spaces.delete(SPACE, &Default::default()).await),
        "no delete"
    );
    let other = IdSpace::new("other", space.spec.clone());
    assert!(
        forbidden(spaces.create(&PostParams::default(), &other).await),
        "no create"
    );
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(member.clone(), n);
    assert!(
        forbidden(secrets.list(&Default::default()).await),
        "no secrets"
    );
    let elsewhere = Api::<IdSpace>::namespaced(member.clone(), "default");
    assert!(forbidden(elsewhere.get(SPACE).await), "no other namespace");

    // The policy init applied holds the account add-member made: a join under another
    // name is refused, a join under its own name admitted.
    let join = |name: &str| MemberRecord {
        id: format!("uid-{name}"),
        name: name.into(),
        datacenter_id: 0,
        generation: 1,
    };
    space.spec.registry.revision += 1;
    space.spec.registry.members.push(join("dr"));
    let refused = spaces.replace(SPACE, &PostParams::default(), &space).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422),
        "{refused:?}"
    );
    space.spec.registry.members = vec![join("prod")];
    spaces
        .replace(SPACE, &PostParams::default(), &space)
        .await
        .context("a join under the member's own name")?;

    // Run again, add-member rotates the token; the objects stay as they were.
    let again = plugin(cluster, &["hub", "add-member", SPACE, "prod", "-n", n]).await?;
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(again.stdout.contains("kind: Secret"), "{}", again.stdout);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_makes_the_membership_of_a_sequence_once_and_names_an_unknown_sequence() -> Result<()>
{
    let cluster = cluster().await?;
    operator_support::install_crd(cluster).await?;
    let crd = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crds/idspacemembership.yaml");
    cluster
        .kubectl(&["apply", "--server-side", "-f", &crd.to_string_lossy()])
        .await?
        .ok()
        .context("kubectl apply of crds/idspacemembership.yaml")?;
    cluster
        .wait_crd_established("idspacememberships.kubeflake.io")
        .await?;
    let ns = cluster.namespace("member").await?;
    let n = ns.name.as_str();
    operator_support::create_sequence(&ns, "orders", serde_json::json!({})).await?;
    let args = [
        "hub",
        "join",
        SPACE,
        "prod",
        "--sequence",
        "orders",
        "--space-namespace",
        "hub-ns",
        "-n",
        n,
    ];
    let made = plugin_json(cluster, &args).await?;
    assert_eq!(made["result"], "created");
    let stored =
        Api::<kubeflake_crds::id_space::IdSpaceMembership>::namespaced(ns.client.clone(), n)
            .get("orders")
            .await?;
    assert_eq!(stored.spec.member_name, "prod");
    assert_eq!(stored.spec.hub_secret, format!("kubeflake-hub-{SPACE}"));
    assert_eq!(
        (
            stored.spec.space.namespace.as_str(),
            stored.spec.space.name.as_str()
        ),
        ("hub-ns", SPACE)
    );
    let again = plugin_json(cluster, &args).await?;
    assert_eq!(again["result"], "unchanged");
    let mut other = args.to_vec();
    other[3] = "dr"; // the member name
    let differs = plugin(cluster, &other).await?;
    assert_eq!(differs.code, 2, "{}", differs.stderr);
    assert!(
        differs.stderr.contains("exists with other values"),
        "{}",
        differs.stderr
    );
    let mut missing = args.to_vec();
    missing[5] = "nope"; // the sequence
    let r = plugin(cluster, &missing).await?;
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains("idsequence nope not found"),
        "{}",
        r.stderr
    );
    Ok(())
}
