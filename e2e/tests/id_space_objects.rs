//! The ID space's objects against a real API server (docs/design/2026-11-29-multicluster.md,
//! plan step 1): the generated `IdSpace` and `IdSpaceMembership` CRDs install; valid objects
//! are accepted; bad ones are refused by the API server itself with a message naming the
//! field to fix; and the hub's ValidatingAdmissionPolicy (crds/idspace-hub-policy.yaml, the
//! same spec built by `kubeflake_crds::id_space::hub_policy`) lets a member's ServiceAccount
//! make the registry transitions of `kubeflake_crds::id_space::registry`, for itself, and
//! refuses everything else. RBAC lets both members update the IdSpace: the refusals come
//! from the policy alone. Nothing here uses the operator (it does not read these objects
//! yet). Its own control plane, on free loopback ports.

mod policy_support;

use std::path::PathBuf;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use kubeflake_crds::id_space::hub_policy::{self, MEMBER_ACCOUNT_PREFIX};
use kubeflake_crds::id_space::{
    BlockRecord, IdSpace, IdSpaceMembership, IdSpaceMembershipSpec, IdSpaceSpec, JoinRequest,
    MemberId, MemberName, MemberRecord, Registry, RegistryRecord, SlotUse, SpaceSequenceSpec, join,
};
use kubeflake_crds::layout::{DatacenterId, Slot, Tick};
use kubeflake_e2e::{Cluster, TestNamespace};
use policy_support::{service_account, token, token_client};
use serde_json::json;
use tokio::sync::OnceCell;

const SPACE: &str = "orders";
/// A tick long after the epoch (about 11.6 days in), the members' "now".
const NOW: u64 = 1_000_000_000;

/// Installs both CRDs (the checked-in files) once per test binary.
async fn cluster() -> &'static Cluster {
    static INSTALLED: OnceCell<()> = OnceCell::const_new();
    let cluster = Cluster::shared();
    INSTALLED
        .get_or_try_init(|| async {
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
            anyhow::Ok(())
        })
        .await
        .expect("cannot install the ID space CRDs");
    cluster
}

fn spec() -> IdSpaceSpec {
    IdSpaceSpec::new(SpaceSequenceSpec::default(), 64)
}

fn space_object(name: &str, spec: IdSpaceSpec) -> IdSpace {
    IdSpace::new(name, spec)
}

/// The API server's message when it refused the request, or None if it accepted it.
fn refusal<T>(result: kube::Result<T>) -> Result<Option<String>> {
    match result {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(status)) => Ok(Some(status.message)),
        Err(e) => Err(e.into()),
    }
}

/// Asserts the request was refused with a message containing every one of `says`.
fn refused<T>(what: &str, result: kube::Result<T>, says: &[&str]) -> Result<()> {
    let message = refusal(result)?.with_context(|| format!("{what}: accepted, must be refused"))?;
    for text in says {
        ensure!(
            message.contains(text),
            "{what}: refused, but the message does not say {text:?}: {message}"
        );
    }
    Ok(())
}

/// A field, a change to it, and what the refusal must say.
type Change = (&'static str, fn(&mut IdSpaceSpec), &'static [&'static str]);

fn member(id: &str, name: &str, generation: i64) -> MemberRecord {
    MemberRecord {
        id: id.into(),
        name: name.into(),
        datacenter_id: 0,
        generation,
    }
}

#[tokio::test]
async fn a_valid_space_and_membership_are_accepted_and_listed() -> Result<()> {
    let cluster = cluster().await;
    let ns = cluster.namespace("idspace-valid").await?;
    let spaces: Api<IdSpace> = Api::namespaced(ns.client.clone(), &ns.name);
    let mut minimal = spec();
    minimal.registry.members = vec![member("cluster-a", "prod", 1)];
    spaces
        .create(&PostParams::default(), &space_object(SPACE, minimal))
        .await?;
    let memberships: Api<IdSpaceMembership> = Api::namespaced(ns.client.clone(), &ns.name);
    let membership = IdSpaceMembership::new(
        SPACE,
        serde_json::from_value::<IdSpaceMembershipSpec>(json!({
            "sequence": "orders", "memberName": "prod", "hubSecret": "kubeflake-hub-orders",
            "space": {"namespace": "kubeflake-space-orders", "name": "orders"}
        }))?,
    );
    memberships
        .create(&PostParams::default(), &membership)
        .await?;
    let listed = cluster
        .kubectl(&["get", "idspace", "-n", &ns.name])
        .await?
        .ok()?;
    ensure!(
        listed.contains("BLOCK SLOTS") && listed.contains("64"),
        "{listed}"
    );
    Ok(())
}

#[tokio::test]
async fn bad_parameters_and_registry_records_are_refused_naming_the_field() -> Result<()> {
    let cluster = cluster().await;
    let ns = cluster.namespace("idspace-bad").await?;
    let spaces: Api<IdSpace> = Api::namespaced(ns.client.clone(), &ns.name);
    let create = |spec: IdSpaceSpec| {
        let spaces = spaces.clone();
        async move {
            spaces
                .create(&PostParams::default(), &space_object("bad", spec))
                .await
        }
    };
    let mut s = spec();
    s.block_slots = 48;
    refused(
        "blockSlots 48",
        create(s).await,
        &["spec.blockSlots", "power of two"],
    )?;
    let mut s = spec();
    s.block_slots = 2048;
    refused(
        "blockSlots 2048",
        create(s).await,
        &["spec.blockSlots", "larger than the slot space"],
    )?;
    let mut s = spec();
    s.sequence.layout.datacenter_bits = 10;
    s.sequence.layout.timestamp_bits = 31;
    s.block_slots = 128;
    refused(
        "8192 blocks",
        create(s).await,
        &["spec.blockSlots", "more than the 4096"],
    )?;
    let mut s = spec();
    s.tolerance_seconds = 59;
    s.renew_every_seconds = 10;
    refused(
        "tolerance 59 s",
        create(s).await,
        &["spec.toleranceSeconds", "60"],
    )?;
    let mut s = spec();
    s.renew_every_seconds = 2000;
    refused(
        "renewal 2000 s",
        create(s).await,
        &["spec.renewEverySeconds", "half of toleranceSeconds"],
    )?;
    let mut s = spec();
    s.sequence.strict = true;
    refused(
        "strict",
        create(s).await,
        &["spec.sequence.strict", "cannot span clusters"],
    )?;
    let mut s = spec();
    s.registry.members = vec![
        member("cluster-a", "prod", 1),
        member("cluster-a", "dev", 1),
    ];
    refused(
        "one identity twice",
        create(s).await,
        &["spec.registry.members", "Duplicate value"],
    )?;
    let mut s = spec();
    s.registry.members = vec![
        member("cluster-a", "prod", 1),
        member("cluster-b", "prod", 1),
    ];
    refused(
        "one name twice",
        create(s).await,
        &["spec.registry.members", "share one name"],
    )?;

    // Immutable once made; a floor never goes down.
    let mut good = spec();
    good.registry.members = vec![member("cluster-a", "prod", 1)];
    good.registry.blocks = serde_json::from_value(json!([{"index": 3, "term": 1, "floor": 500}]))?;
    let made = spaces
        .create(&PostParams::default(), &space_object("good", good))
        .await?;
    let changes: [Change; 5] = [
        (
            "epoch",
            |s| s.sequence.epoch = "2024-01-01T00:00:00Z".into(),
            &["spec.sequence", "sequence is immutable"],
        ),
        (
            "blockSlots",
            |s| s.block_slots = 32,
            &["spec.blockSlots", "blockSlots is immutable"],
        ),
        (
            "toleranceSeconds",
            |s| s.tolerance_seconds = 7200,
            &["spec.toleranceSeconds", "immutable"],
        ),
        (
            "renewEverySeconds",
            |s| s.renew_every_seconds = 600,
            &["spec.renewEverySeconds", "immutable"],
        ),
        (
            "floor",
            |s| s.registry.blocks[0].floor = 100,
            &["spec.registry.blocks[0].floor", "may not go down"],
        ),
    ];
    for (field, change, says) in changes {
        let mut changed = made.clone();
        change(&mut changed.spec);
        refused(
            field,
            spaces
                .replace("good", &PostParams::default(), &changed)
                .await,
            says,
        )?;
    }
    Ok(())
}

#[tokio::test]
async fn the_members_copy_keeps_its_cluster_and_idspace_uid() -> Result<()> {
    let cluster = cluster().await;
    let ns = cluster.namespace("idspace-copy").await?;
    let memberships: Api<IdSpaceMembership> = Api::namespaced(ns.client.clone(), &ns.name);
    let membership = IdSpaceMembership::new(
        SPACE,
        serde_json::from_value::<IdSpaceMembershipSpec>(json!({
            "sequence": "orders", "memberName": "prod", "hubSecret": "kubeflake-hub-orders",
            "space": {"namespace": "kubeflake-space-orders", "name": "orders"}
        }))?,
    );
    memberships
        .create(&PostParams::default(), &membership)
        .await?;
    let status = |member: &str, uid: &str| {
        Patch::Merge(json!({"status": {"memberId": member, "idSpaceUid": uid}}))
    };
    let params = PatchParams::default();
    memberships
        .patch_status(SPACE, &params, &status("cluster-a", "uid-1"))
        .await?;
    refused(
        "another cluster adopting the copy",
        memberships
            .patch_status(SPACE, &params, &status("cluster-b", "uid-1"))
            .await,
        &["status.memberId", "write-once"],
    )?;
    refused(
        "a re-created IdSpace's UID",
        memberships
            .patch_status(SPACE, &params, &status("cluster-a", "uid-2"))
            .await,
        &["status.idSpaceUid", "hub recover"],
    )?;
    refused(
        "another member name",
        memberships
            .patch(
                SPACE,
                &params,
                &Patch::Merge(json!({"spec": {"memberName": "dev"}})),
            )
            .await,
        &["spec.memberName", "immutable"],
    )?;
    Ok(())
}

/// The hub: the policy bound to this namespace, two member accounts RBAC lets update
/// IdSpaces, and a space both have joined.
struct Hub {
    ns: TestNamespace,
    prod: Client,
    dev: Client,
    space: kubeflake_crds::id_space::Space,
}

fn id(name: &str) -> MemberId {
    MemberId::new(&format!("cluster-{name}")).expect("a valid cluster ID")
}

/// A space whose registry already lists `listed` blocks (free, floor 1), in a layout of 4,096
/// one-slot blocks (12 worker bits): how big a registry the policy's CEL budget admits.
fn spec_with_blocks(listed: i64) -> IdSpaceSpec {
    if listed == 0 {
        return spec();
    }
    let mut s = spec();
    s.sequence.layout.worker_bits = 12;
    s.sequence.layout.timestamp_bits = 39;
    s.block_slots = 1;
    s.registry.blocks = (0..listed)
        .map(|index| BlockRecord {
            index,
            term: 0,
            floor: 1,
            owner: None,
            bound: None,
        })
        .collect();
    s
}

async fn hub(cluster: &'static Cluster, listed_blocks: i64) -> Result<Hub> {
    hub_with(cluster, spec_with_blocks(listed_blocks)).await
}

/// [`hub`] with the space made from `made`.
async fn hub_with(cluster: &'static Cluster, made: IdSpaceSpec) -> Result<Hub> {
    let ns = cluster.namespace("idspace-hub").await?;
    let n = ns.name.clone();
    let admin = cluster.client()?;
    let policy = format!("{}-{n}", hub_policy::POLICY_NAME);
    Api::<ValidatingAdmissionPolicy>::all(admin.clone())
        .create(&PostParams::default(), &hub_policy::policy(&policy))
        .await?;
    Api::<ValidatingAdmissionPolicyBinding>::all(admin)
        .create(
            &PostParams::default(),
            &hub_policy::binding(&policy, &policy, Some(&n)),
        )
        .await?;
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "kubeflake-member"},
        "rules": [{"apiGroups": ["kubeflake.io"], "resources": ["idspaces"],
                   "verbs": ["get", "list", "watch", "update", "create", "delete"]}],
    }))?;
    Api::<Role>::namespaced(ns.client.clone(), &n)
        .create(&PostParams::default(), &role)
        .await?;
    let mut subjects = Vec::new();
    for name in ["prod", "dev"] {
        let account = format!("{MEMBER_ACCOUNT_PREFIX}{name}");
        service_account(&ns, &account).await?;
        subjects.push(Subject {
            kind: "ServiceAccount".into(),
            name: account,
            namespace: Some(n.clone()),
            ..Default::default()
        });
    }
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some("kubeflake-member".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: "kubeflake-member".into(),
        },
        subjects: Some(subjects),
    };
    Api::<RoleBinding>::namespaced(ns.client.clone(), &n)
        .create(&PostParams::default(), &binding)
        .await?;
    let client_of = |name: &'static str| {
        let n = n.clone();
        async move {
            let account = format!("{MEMBER_ACCOUNT_PREFIX}{name}");
            let t = token(cluster, &n, &account, None).await?;
            token_client(cluster, &format!("{n}-{name}"), &t)
        }
    };
    // The administrator makes the space (`hub init`); the members join themselves. A
    // Segment space has no blocks (`space()` refuses it): its hub keeps the default space,
    // used only to read its empty registry.
    let space = made.space().or_else(|_| spec().space())?;
    Api::<IdSpace>::namespaced(ns.client.clone(), &n)
        .create(&PostParams::default(), &space_object(SPACE, made))
        .await?;
    Ok(Hub {
        prod: client_of("prod").await?,
        dev: client_of("dev").await?,
        ns,
        space,
    })
}

impl Hub {
    /// `name` joins through its own account (join.rs), having used `used` slots before.
    async fn join(&self, name: &str, used: Vec<SlotUse>) -> Result<()> {
        let (read, registry) = self.read().await?;
        let request = JoinRequest {
            id: id(name),
            name: MemberName::new(name)?,
            sequence: *self.space.sequence(),
            datacenter: DatacenterId(0),
            used,
            now: Tick(NOW),
        };
        let joined = join(&self.space, &registry, &request)?.registry;
        let client = if name == "prod" {
            &self.prod
        } else {
            &self.dev
        };
        self.write(client, &read, joined.to_record())
            .await
            .with_context(|| format!("{name} joins"))?;
        Ok(())
    }

    async fn read(&self) -> Result<(IdSpace, Registry)> {
        let object = Api::<IdSpace>::namespaced(self.ns.client.clone(), &self.ns.name)
            .get(SPACE)
            .await?;
        let registry = object.spec.registry(&self.space)?;
        Ok((object, registry))
    }

    /// `as_member` writes `record` over `read` (a compare-and-swap on its resourceVersion).
    async fn write(
        &self,
        as_member: &Client,
        read: &IdSpace,
        record: RegistryRecord,
    ) -> kube::Result<IdSpace> {
        let mut next = read.clone();
        next.spec.registry = record;
        Api::<IdSpace>::namespaced(as_member.clone(), &self.ns.name)
            .replace(SPACE, &PostParams::default(), &next)
            .await
    }
}

/// The API server compiles a new policy in the background: wait (bounded) until a write
/// the policy refuses (the revision not counted up) is refused.
async fn wait_enforced(hub: &Hub) -> Result<()> {
    for _ in 0..150 {
        let (read, registry) = hub.read().await?;
        match hub.write(&hub.prod, &read, registry.to_record()).await {
            Err(kube::Error::Api(e)) if e.message.contains("ValidatingAdmissionPolicy") => {
                return Ok(());
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
            Ok(_) => {}
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    anyhow::bail!("the hub policy was not in force after 30 s")
}

/// The API server type-checks the policy's expressions against the IdSpace schema and
/// reports what does not fit (a misspelt field would otherwise fail only at run time).
async fn no_type_warnings(hub: &Hub) -> Result<()> {
    let name = format!("{}-{}", hub_policy::POLICY_NAME, hub.ns.name);
    let api = Api::<ValidatingAdmissionPolicy>::all(hub.ns.client.clone());
    for _ in 0..100 {
        let checked = api.get(&name).await?.status.and_then(|s| s.type_checking);
        if let Some(checked) = checked {
            let warnings = checked.expression_warnings.unwrap_or_default();
            ensure!(
                warnings.is_empty(),
                "the hub policy's type check: {warnings:?}"
            );
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    anyhow::bail!("the API server did not type-check the hub policy within 20 s")
}

#[tokio::test]
async fn the_hub_policy_lets_members_make_only_the_registry_transitions_for_themselves()
-> Result<()> {
    let cluster = cluster().await;
    let hub = hub(cluster, 0).await?;
    wait_enforced(&hub).await?;
    no_type_warnings(&hub).await?;
    let (prod, dev) = (id("prod"), id("dev"));

    // Legal: each joins through its own account; a join under another's name is refused.
    let (read, registry) = hub.read().await?;
    let request = JoinRequest {
        id: dev.clone(),
        name: MemberName::new("prod")?,
        sequence: *hub.space.sequence(),
        datacenter: DatacenterId(0),
        used: vec![],
        now: Tick(NOW),
    };
    let as_prod = join(&hub.space, &registry, &request)?.registry;
    refused(
        "dev joins under prod's name",
        hub.write(&hub.dev, &read, as_prod.to_record()).await,
        &["only its own entry of spec.registry.members"],
    )?;
    hub.join("prod", vec![]).await?;
    // A new entry starts at the new revision (here 2), never at 1: a copy of an entry this
    // cluster had before a `hub forget` must never match it (rule 21).
    let (read, registry) = hub.read().await?;
    let own = JoinRequest {
        name: MemberName::new("dev")?,
        ..request
    };
    let mut at_one = join(&hub.space, &registry, &own)?.registry.to_record();
    for m in at_one.members.iter_mut().filter(|m| m.name == "dev") {
        m.generation = 1;
    }
    ensure!(at_one.revision > 1, "{at_one:?}");
    refused(
        "dev joins at generation 1",
        hub.write(&hub.dev, &read, at_one).await,
        &["the new spec.registry.revision as its generation"],
    )?;
    // dev ran as a lone cluster before: a pod holds slot 70 (block 1, now its claim) and
    // slot 130 (block 2) was used up to a fence, which becomes that free block's floor.
    let used = |slot, ago, held| SlotUse {
        slot: Slot(slot),
        fence: Tick(NOW - ago),
        held,
    };
    hub.join("dev", vec![used(70, 10, true), used(130, 5, false)])
        .await?;
    let (_, registry) = hub.read().await?;
    ensure!(
        registry.view_of(&dev)?.grants.len() == 1,
        "dev's held slot became its claim"
    );

    // Legal: prod claims a block and renews it (registry.rs claim, renew).
    let (read, registry) = hub.read().await?;
    let (claimed, grant) = registry.claim(&hub.space, &prod, Tick(NOW))?;
    hub.write(&hub.prod, &read, claimed.to_record())
        .await
        .context("prod's claim")?;
    let (read, registry) = hub.read().await?;
    let (renewed, _) =
        registry.renew(&hub.space, &prod, grant.block, grant.term, Tick(NOW + 1000))?;
    hub.write(&hub.prod, &read, renewed.to_record())
        .await
        .context("prod's renewal")?;

    // Illegal, each on what was just read.
    let (read, registry) = hub.read().await?;
    let index = grant.block.get() as i64;
    let block_of = |r: &mut RegistryRecord| {
        r.blocks
            .iter()
            .position(|b| b.index == index)
            .expect("prod's block is listed")
    };
    let mut taken = registry.to_record();
    let b = block_of(&mut taken);
    taken.revision += 1;
    taken.blocks[b].owner = Some(dev.to_string());
    taken.blocks[b].term += 1;
    refused(
        "dev takes prod's held block",
        hub.write(&hub.dev, &read, taken).await,
        &[
            "ValidatingAdmissionPolicy",
            "member dev",
            "only by a hand-over",
        ],
    )?;
    let mut not_counted = registry.to_record();
    let b = block_of(&mut not_counted);
    not_counted.blocks[b].bound = not_counted.blocks[b].bound.map(|x| x + 1);
    refused(
        "a renewal without counting the revision",
        hub.write(&hub.prod, &read, not_counted).await,
        &["spec.registry.revision up by exactly 1"],
    )?;
    let mut others = registry.to_record();
    others.revision += 1;
    for m in &mut others.members {
        if m.name == "dev" {
            m.generation += 1;
        }
    }
    refused(
        "prod changes dev's entry",
        hub.write(&hub.prod, &read, others).await,
        &["only its own entry of spec.registry.members"],
    )?;
    let mut no_floor = registry.to_record();
    let b = block_of(&mut no_floor);
    no_floor.revision += 1;
    no_floor.blocks[b].owner = None;
    no_floor.blocks[b].bound = None;
    refused(
        "prod releases without raising the floor to the bound",
        hub.write(&hub.prod, &read, no_floor).await,
        &[
            "only by a hand-over",
            "floor raised to at least the old bound",
        ],
    )?;

    // Legal: dev reclaims prod's block once its bound passed (by dev's clock), and then
    // dropping that block's entry, which would reset its floor, is refused.
    let (read, registry) = hub.read().await?;
    let held = registry.view_of(&prod)?.grants[0];
    let reclaimed = registry.reclaim(held.block, Tick(held.bound.0 + 1))?;
    hub.write(&hub.dev, &read, reclaimed.to_record())
        .await
        .context("dev's reclaim")?;
    let (read, registry) = hub.read().await?;
    let mut dropped = registry.to_record();
    dropped.revision += 1;
    dropped.blocks.retain(|b| b.index != index);
    refused(
        "dropping a free block's entry",
        hub.write(&hub.prod, &read, dropped).await,
        &["no entry of spec.registry.blocks may be removed"],
    )?;

    // Legal: prod leaves (registry.rs forget of itself); it may not delete the space.
    let (read, registry) = hub.read().await?;
    hub.write(&hub.prod, &read, registry.forget(&prod)?.to_record())
        .await
        .context("prod leaves")?;
    refused(
        "a member deletes the space",
        Api::<IdSpace>::namespaced(hub.dev.clone(), &hub.ns.name)
            .delete(SPACE, &Default::default())
            .await,
        &["may only update IdSpace"],
    )?;
    let (_, registry) = hub.read().await?;
    ensure!(registry.member(&prod).is_none() && registry.member(&dev).is_some());
    ensure!(read.name_any() == SPACE);
    Ok(())
}

#[tokio::test]
async fn a_member_write_in_a_space_listing_all_4096_blocks_is_within_the_policys_budget()
-> Result<()> {
    // Pairwise checks ran out of the API server's CEL budget from about 500 listed blocks
    // (the policy then refuses every member write); keyed lookups must not.
    let cluster = cluster().await;
    let hub = hub(cluster, 4096).await?;
    wait_enforced(&hub).await?;
    hub.join("prod", vec![]).await?;
    let (read, registry) = hub.read().await?;
    let (claimed, _) = registry.claim(&hub.space, &id("prod"), Tick(NOW))?;
    hub.write(&hub.prod, &read, claimed.to_record())
        .await
        .context("a claim in a full registry")?;
    Ok(())
}

/// docs/safety.md rule 22: in a Segment space a member takes a range of the space's values by
/// raising `spec.segment.next` (`segment_range::take`, one compare-and-swap with the
/// registry's revision counted up), at most `MAX_RANGE` values per write, so one member
/// cannot use up the space for the others; nobody, the administrator included, lowers the
/// counter or removes it (which would start it again at 0).
#[tokio::test]
async fn rule22_a_member_raises_the_segment_counter_by_at_most_one_range_and_nobody_removes_it()
-> Result<()> {
    use kubeflake_crds::id_space::resource::SpaceCounterRecord;
    use kubeflake_crds::id_space::segment_range::{MAX_RANGE, take};
    use kubeflake_crds::sequence::Mode;
    let cluster = cluster().await;
    let mut made = spec();
    made.sequence.mode = Mode::Segment;
    made.segment = Some(SpaceCounterRecord { next: 0 });
    let hub = hub_with(cluster, made).await?;
    wait_enforced(&hub).await?;
    let spaces = Api::<IdSpace>::namespaced(hub.ns.client.clone(), &hub.ns.name);
    // `as_member` writes the space's counter `next`, or none, over what it reads now.
    let write_counter = |as_member: Client, next: Option<i64>| {
        let ns = hub.ns.name.clone();
        let spaces = spaces.clone();
        async move {
            let mut space = spaces.get(SPACE).await?;
            space.spec.registry.revision += 1;
            space.spec.segment = next.map(|next| SpaceCounterRecord { next });
            Api::<IdSpace>::namespaced(as_member, &ns)
                .replace(SPACE, &PostParams::default(), &space)
                .await
        }
    };
    let counter = |space: &IdSpace| space.spec.segment.clone().unwrap_or_default();

    let (taken, range) = take(&counter(&spaces.get(SPACE).await?), MAX_RANGE)?;
    ensure!(range == (0..MAX_RANGE), "{range:?}");
    let written = write_counter(hub.prod.clone(), Some(taken.next))
        .await
        .context("prod takes a whole range")?;
    ensure!(counter(&written).next == taken.next, "{written:?}");
    let too_far = i64::try_from(2 * MAX_RANGE + 1)?;
    refused(
        "prod takes more than one range at once",
        write_counter(hub.prod.clone(), Some(too_far)).await,
        &["at most", "one range"],
    )?;
    refused(
        "prod lowers the counter",
        write_counter(hub.prod.clone(), Some(1)).await,
        &["segment.next may not go down"],
    )?;
    for (who, client) in [
        ("prod", hub.prod.clone()),
        ("the administrator", hub.ns.client.clone()),
    ] {
        refused(
            &format!("{who} removes the counter"),
            write_counter(client, None).await,
            &["segment may not be removed"],
        )?;
    }
    let (taken, range) = take(&counter(&spaces.get(SPACE).await?), 1000)?;
    ensure!(
        range.start == MAX_RANGE,
        "the next range starts above the last: {range:?}"
    );
    write_counter(hub.prod.clone(), Some(taken.next))
        .await
        .context("prod takes the next range")?;
    Ok(())
}
