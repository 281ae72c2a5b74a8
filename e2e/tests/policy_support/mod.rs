//! Helpers for tests that run under kubeflake's Lease policy (docs/safety.md rule 14): the
//! API server's own tokens (`kubectl create token`, pod-bound where it matters), kubeconfig
//! files holding them, and the policy put in force for one test namespace.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use chrono::{DateTime, Utc};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use kubeflake_crds::layout::{Slot, Tick};
use kubeflake_crds::slot_lease::{Holder, Releaser};
use kubeflake_crds::{IdSequence, IdSequenceSpec, lease_policy, slot_lease};
use kubeflake_e2e::{Cluster, TestNamespace};

/// Writes a kubeconfig authenticated by `token` (nothing else: no client certificate) into
/// the cluster's directory and returns its path.
pub fn token_kubeconfig(cluster: &Cluster, name: &str, token: &str) -> Result<PathBuf> {
    let path: PathBuf = cluster.dir().join(format!("token-{name}.kubeconfig"));
    kubeflake_e2e::kubeconfig::write_token_kubeconfig(
        &path,
        cluster.server(),
        &cluster.pki().ca_cert,
        name,
        token,
        "default",
    )?;
    Ok(path)
}

/// A client from a kubeconfig file.
pub fn kubeconfig_client(path: &Path) -> Result<Client> {
    let kubeconfig = Kubeconfig::read_from(path)?;
    let config = futures::executor::block_on(Config::from_custom_kubeconfig(
        kubeconfig,
        &KubeConfigOptions::default(),
    ))?;
    Ok(Client::try_from(config)?)
}

/// A client authenticated by `token` (nothing else: no client certificate).
pub fn token_client(cluster: &Cluster, name: &str, token: &str) -> Result<Client> {
    kubeconfig_client(&token_kubeconfig(cluster, name, token)?)
}

/// `kubectl create token` for `account`, bound to `pod` when given (the pod must run as
/// `account`).
pub async fn token(
    cluster: &Cluster,
    ns: &str,
    account: &str,
    pod: Option<&Pod>,
) -> Result<String> {
    let mut args = vec!["create", "token", account, "-n", ns, "--duration=1h"];
    let (name, uid);
    if let Some(pod) = pod {
        name = pod.name_any();
        uid = pod.uid().context("a created pod has a uid")?;
        args.extend(["--bound-object-kind", "Pod", "--bound-object-name", &name]);
        args.extend(["--bound-object-uid", &uid]);
    }
    cluster.kubectl(&args).await?.ok()
}

pub async fn service_account(ns: &TestNamespace, name: &str) -> Result<()> {
    let api: Api<ServiceAccount> = Api::namespaced(ns.client.clone(), &ns.name);
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &account).await?;
    Ok(())
}

/// Every service account of the namespace may write every Lease there (RBAC's worst case).
pub async fn generous_rbac(ns: &TestNamespace) -> Result<()> {
    let api: Api<RoleBinding> = Api::namespaced(ns.client.clone(), &ns.name);
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some("everyone-edits".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: "edit".into(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Group".into(),
            name: format!("system:serviceaccounts:{}", ns.name),
            namespace: None,
        }]),
    };
    api.create(&PostParams::default(), &binding).await?;
    Ok(())
}

/// The name of the policy (and of its binding) [`enforce_policy`] creates for `ns`.
pub fn policy_name(ns: &str) -> String {
    format!("kubeflake-leases-{ns}")
}

/// Puts the policy in force for this namespace only (other tests share the cluster), with
/// the service account `operator` as the operator's account and `exempt_groups` exempt.
/// `outsider` is an account of the namespace that RBAC lets write Leases but the policy
/// refuses (for the check that it is in force); the operator's account removes the canary
/// Lease meanwhile, so this works with no exempt group at all.
pub async fn enforce_policy(
    cluster: &Cluster,
    ns: &str,
    operator: &str,
    exempt_groups: &[&str],
    outsider: &str,
) -> Result<()> {
    let client = cluster.client()?;
    let name = policy_name(ns);
    let user = format!("system:serviceaccount:{ns}:{operator}");
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    policies
        .create(
            &PostParams::default(),
            &lease_policy::policy(&name, &user, exempt_groups),
        )
        .await?;
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client);
    bindings
        .create(
            &PostParams::default(),
            &lease_policy::binding(&name, &name, Some(ns)),
        )
        .await?;
    wait_enforced(cluster, ns, operator, outsider).await
}

/// The API server compiles a new policy and binding in the background: wait (bounded) until
/// a write the policy refuses is refused, `operator` removing the canary lease meanwhile.
pub async fn wait_enforced(
    cluster: &Cluster,
    ns: &str,
    operator: &str,
    outsider: &str,
) -> Result<()> {
    let nobody = token_client(
        cluster,
        &format!("{ns}-canary"),
        &token(cluster, ns, outsider, None).await?,
    )?;
    let cleaner = token_client(
        cluster,
        &format!("{ns}-canary-cleaner"),
        &token(cluster, ns, operator, None).await?,
    )?;
    let mut seq = IdSequence::new("policy-canary", Default::default());
    seq.metadata.namespace = Some(ns.into());
    let mut canary = slot_lease::vacant(&seq, Slot(999));
    canary.metadata.owner_references = None;
    canary.metadata.name = Some("canary".into());
    for _ in 0..150 {
        match leases(&nobody, ns)
            .create(&PostParams::default(), &canary)
            .await
        {
            Err(kube::Error::Api(e))
                if e.code == 403 && e.message.contains("ValidatingAdmissionPolicy") =>
            {
                return Ok(());
            }
            // Refused by something else, RBAC most likely: the outsider must be allowed
            // to write Leases for this check to see the policy.
            Err(kube::Error::Api(e)) if e.code == 403 => {
                bail!(
                    "the canary write was refused, but not by the policy: {}",
                    e.message
                )
            }
            Ok(_) => {
                leases(&cleaner, ns)
                    .delete("canary", &DeleteParams::default())
                    .await?;
            }
            Err(e) => return Err(e.into()),
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    bail!("the lease policy was not in force after 30 s")
}

pub fn leases(client: &Client, ns: &str) -> Api<Lease> {
    Api::namespaced(client.clone(), ns)
}

/// The holder pod's UID that `held` names.
fn holder_of(held: &Lease) -> Result<String> {
    slot_lease::SlotLease::parse(held)?
        .holder
        .context("the slot lease names no holder")
}

/// The spec of the sequence these tests' slot leases belong to: 15 s leases, the rest
/// defaults (what the operator notes on a Lease it assigns).
pub fn lease_spec() -> IdSequenceSpec {
    let mut spec = IdSequenceSpec::default();
    spec.lease.duration_seconds = 15;
    spec
}

/// A forgery: `held` written as held by `to`, what another pod taking the slot (or its
/// holder handing it over) would send. The protocol's `assign` refuses a held slot, so the
/// slot is freed in memory first; the version stays the one read, so only the Lease
/// policy stands in the way.
pub fn forged_takeover(held: &Lease, to: Holder<'_>, now: DateTime<Utc>) -> Result<Lease> {
    let from = holder_of(held)?;
    let freed = slot_lease::release(held, Releaser::Operator { holder: &from }, now)?;
    Ok(slot_lease::assign(&freed, to, &lease_spec(), now)?)
}

/// A forgery: `held` released with its fence lowered to `high_water` as its holder would
/// do it (the protocol lets only the holder release so), to be sent with another token.
pub fn forged_release(held: &Lease, high_water: Tick, now: DateTime<Utc>) -> Result<Lease> {
    let uid = holder_of(held)?;
    let by = Releaser::Holder {
        uid: &uid,
        high_water,
    };
    Ok(slot_lease::release(held, by, now)?)
}

/// The refusal must be the policy's (403 Forbidden) and say what is allowed instead.
pub fn refused<T>(result: Result<T, kube::Error>, what: &str, allowed_instead: &str) -> Result<()> {
    match result {
        Ok(_) => bail!("{what}: the API server accepted it"),
        Err(kube::Error::Api(e))
            if e.code == 403 && e.message.contains("ValidatingAdmissionPolicy") =>
        {
            ensure!(
                e.message.contains(allowed_instead),
                "{what}: refused, but the message does not say {allowed_instead:?}: {}",
                e.message
            );
            Ok(())
        }
        Err(e) => bail!("{what}: failed otherwise than by the policy: {e}"),
    }
}

/// How many requests ValidatingAdmissionPolicies refused since this API server started
/// (`apiserver_admission_controller_admission_duration_seconds_count` of the
/// `ValidatingAdmissionPolicy` plugin, rejected; restarts reset it). Per-policy counts
/// (`apiserver_validating_admission_policy_check_total`) are not exposed by this API
/// server, so this counts every policy's refusals: use it in a cluster whose only policy
/// is the one of interest.
pub async fn policy_denials(client: &Client) -> Result<f64> {
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new())?)
        .await?;
    Ok(text
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_admission_controller_admission_duration_seconds_count{")
        })
        .filter(|l| {
            l.contains("name=\"ValidatingAdmissionPolicy\"") && l.contains("rejected=\"true\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}
