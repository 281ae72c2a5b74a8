//! The Helm chart (`charts/kubeflake`) against the real API server: lint, the values
//! schema, server-side validation of every rendered object, install, upgrade and a clean
//! uninstall. There is no kubelet: `helm install` runs without `--wait` and `helm test`
//! (its pod needs a node) is only rendered and validated, never run.

mod chart_support;
mod operator_support;

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result};
use chart_support::*;
use kubeflake_e2e::Cluster;
use operator_support::{create_sequence, eventually};

const LIMIT: Duration = Duration::from_secs(60);

/// Value sets every check runs with: the defaults and each optional part switched on.
const VALUE_SETS: &[(&str, &[&str])] = &[
    ("defaults", &[]),
    (
        "cert-manager, ServiceMonitor and PodMonitor",
        &[
            "webhook.certManager.enabled=true",
            "metrics.serviceMonitor.enabled=true",
            "metrics.podMonitor.enabled=true",
        ],
    ),
    (
        "one watched namespace, no webhook, no flow control, no PDB",
        &[
            "operator.watchNamespace=apps",
            "webhook.enabled=false",
            "flowControl.enabled=false",
            "operator.podDisruptionBudget.enabled=false",
        ],
    ),
    (
        "flow control for listed namespaces, extra SANs and exclusions",
        &[
            "flowControl.namespaces={apps,shop}",
            "webhook.extraSANs={kubeflake.example.com}",
            "webhook.excludeNamespaces={monitoring}",
            "webhook.failurePolicy=Ignore",
        ],
    ),
];

#[tokio::test]
async fn helm_lint_is_clean_with_every_value_set() -> Result<()> {
    let cluster = Cluster::shared();
    for (name, values) in VALUE_SETS {
        let mut args = vec!["lint", "--strict", CHART];
        let sets = set_args(values);
        args.extend(sets.iter().map(String::as_str));
        let out = helm(cluster, &args).await?;
        let text = format!("{}{}", out.stdout, out.stderr);
        assert!(out.success(), "helm lint with {name} failed:\n{text}");
        assert!(
            !text.contains("[WARNING]") && !text.contains("[ERROR]"),
            "helm lint with {name} is not clean:\n{text}"
        );
    }
    Ok(())
}

/// `helm template r <chart>` for the test cluster's Kubernetes version, plus `extra`.
async fn template(cluster: &Cluster, extra: &[&str]) -> Result<kubeflake_e2e::CommandOutput> {
    let mut args = vec!["template", "r", CHART, "--kube-version", KUBE_VERSION];
    args.extend_from_slice(extra);
    helm(cluster, &args).await
}

#[tokio::test]
async fn values_schema_rejects_unknown_keys_and_wrong_types_naming_them() -> Result<()> {
    let cluster = Cluster::shared();
    // (case, --set or --set-string argument, what the message must say)
    let cases: &[(&str, &str, &str, &[&str])] = &[
        (
            "an exempt group with a quote (it would end the CEL string in the Lease policy)",
            "--set",
            "leasePolicy.exemptGroups[0]=ops\"admins",
            &["/leasePolicy/exemptGroups/0", "does not match pattern"],
        ),
        (
            "a misspelt key",
            "--set",
            "operator.replcas=3",
            &["/operator", "'replcas' not allowed"],
        ),
        (
            "an unknown top-level key",
            "--set",
            "replicas=3",
            &["'replicas' not allowed"],
        ),
        (
            "an unknown nested key",
            "--set",
            "webhook.certManager.enabeld=true",
            &["/webhook/certManager", "'enabeld' not allowed"],
        ),
        (
            "a string for an integer",
            "--set-string",
            "webhook.timeoutSeconds=five",
            &["/webhook/timeoutSeconds", "want integer"],
        ),
        (
            "a timeout above the API limit",
            "--set",
            "webhook.timeoutSeconds=31",
            &["/webhook/timeoutSeconds", "30"],
        ),
        (
            "an unknown failure policy",
            "--set",
            "webhook.failurePolicy=Sometimes",
            &["/webhook/failurePolicy", "Fail", "Ignore"],
        ),
        (
            "a quantity that is not one",
            "--set",
            "sidecar.resources.limits.cpu=lots",
            &["/sidecar/resources/limits/cpu"],
        ),
        (
            "a port out of range",
            "--set",
            "sidecar.port=70000",
            &["/sidecar/port"],
        ),
        (
            "a number for a boolean switch",
            "--set",
            "webhook.enabled=1",
            &["/webhook/enabled", "want boolean"],
        ),
    ];
    for (case, flag, value, expected) in cases {
        let out = template(cluster, &[flag, value]).await?;
        assert!(!out.success(), "{case} ({value}) was accepted");
        for needle in *expected {
            assert!(
                out.stderr.contains(needle),
                "{case} ({value}): the error does not say {needle:?}:\n{}",
                out.stderr
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_service_monitor_without_the_metrics_service_is_refused_with_the_reason() -> Result<()> {
    let cluster = Cluster::shared();
    let out = template(
        cluster,
        &[
            "--set",
            "metrics.serviceMonitor.enabled=true",
            "--set",
            "metrics.service.enabled=false",
        ],
    )
    .await?;
    assert!(!out.success(), "rendered: {}", out.stdout);
    assert!(
        out.stderr
            .contains("metrics.serviceMonitor.enabled needs metrics.service.enabled"),
        "{}",
        out.stderr
    );
    Ok(())
}

/// The rendered objects of `kind`, as YAML documents.
fn rendered_of_kind(yaml: &str, kind: &str) -> Vec<String> {
    yaml.split("\n---")
        .filter(|doc| doc.lines().any(|l| l == format!("kind: {kind}")))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn the_operator_budget_never_blocks_a_drain_and_lets_unhealthy_replicas_go() -> Result<()> {
    let cluster = Cluster::shared();
    let default = template(cluster, &[]).await?;
    assert!(default.success(), "{}", default.stderr);
    let budgets = rendered_of_kind(&default.stdout, "PodDisruptionBudget");
    assert_eq!(budgets.len(), 1, "two replicas keep one: {budgets:?}");
    assert!(
        budgets[0].contains("unhealthyPodEvictionPolicy: AlwaysAllow"),
        "a replica that never became ready must not stall a drain: {}",
        budgets[0]
    );
    // One replica with minAvailable 1 would block every drain: no budget at all.
    let single = template(cluster, &["--set", "operator.replicas=1"]).await?;
    assert!(single.success(), "{}", single.stderr);
    assert!(
        rendered_of_kind(&single.stdout, "PodDisruptionBudget").is_empty(),
        "{}",
        single.stdout
    );
    let three = template(
        cluster,
        &[
            "--set",
            "operator.replicas=3,operator.podDisruptionBudget.minAvailable=2",
        ],
    )
    .await?;
    assert_eq!(
        rendered_of_kind(&three.stdout, "PodDisruptionBudget").len(),
        1
    );
    Ok(())
}

#[tokio::test]
async fn the_helm_test_pod_mounts_no_service_account_token_it_never_uses() -> Result<()> {
    let out = template(Cluster::shared(), &[]).await?;
    assert!(out.success(), "{}", out.stderr);
    let pods = rendered_of_kind(&out.stdout, "Pod");
    assert_eq!(pods.len(), 1, "the helm test pod: {pods:?}");
    assert!(
        pods[0].contains("automountServiceAccountToken: false"),
        "{}",
        pods[0]
    );
    Ok(())
}

/// A CRD that accepts any object of a kind, so the server can validate the metadata of
/// objects whose real CRDs (cert-manager, Prometheus operator) are not installed here.
fn open_crd(group: &str, kind: &str, plural: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    })
}

async fn install_open_crds(cluster: &Cluster) -> Result<()> {
    for (group, kind, plural) in [
        ("cert-manager.io", "Issuer", "issuers"),
        ("cert-manager.io", "Certificate", "certificates"),
        ("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
        ("monitoring.coreos.com", "PodMonitor", "podmonitors"),
    ] {
        let crd = open_crd(group, kind, plural).to_string();
        cluster
            .kubectl_with_stdin(&["apply", "--server-side", "-f", "-"], Some(&crd))
            .await?
            .ok()?;
        cluster
            .wait_crd_established(&format!("{plural}.{group}"))
            .await?;
    }
    Ok(())
}

/// `kind/name` of every object in a multi-document YAML stream.
fn rendered_objects(yaml: &str) -> Vec<String> {
    let mut objects = Vec::new();
    for doc in yaml.split("\n---") {
        let field = |key: &str, indent: &str| {
            doc.lines()
                .find_map(|l| l.strip_prefix(&format!("{indent}{key}: ")))
                .map(|v| v.trim().trim_matches('"').to_owned())
        };
        if let (Some(kind), Some(name)) = (field("kind", ""), field("name", "  ")) {
            objects.push(format!("{kind}/{name}"));
        }
    }
    objects
}

#[tokio::test]
async fn every_rendered_object_passes_server_side_dry_run_under_restricted_pod_security()
-> Result<()> {
    let cluster = Cluster::shared();
    install_open_crds(cluster).await?;
    let ns = cluster.namespace("helm-dry-run").await?;
    // The restricted Pod Security Standard: enforced on the helm-test pod, and a warning
    // for the Deployment's pod template (the API server checks templates only to warn).
    cluster
        .kubectl(&[
            "label",
            "namespace",
            &ns.name,
            "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/warn=restricted",
        ])
        .await?
        .ok()?;
    for (name, values) in VALUE_SETS {
        let release = format!("dry{}", name.len());
        let mut args = vec![
            "template",
            &release,
            CHART,
            "--namespace",
            &ns.name,
            "--kube-version",
            KUBE_VERSION,
            "--include-crds",
        ];
        let sets = set_args(values);
        args.extend(sets.iter().map(String::as_str));
        let rendered = helm(cluster, &args).await?.ok()?;
        let objects = rendered_objects(&rendered);
        assert!(objects.len() >= 8, "{name}: only {objects:?}");
        let dry_run = || {
            cluster.kubectl_with_stdin(&["apply", "--dry-run=server", "-f", "-"], Some(&rendered))
        };
        let mut out = dry_run().await?;
        // Another test of this binary may create the CRD (helm install) between apply's
        // read and its dry-run create: then the CRD exists and a second dry run patches it.
        if !out.success() && out.stderr.contains("(AlreadyExists)") {
            out = dry_run().await?;
        }
        assert!(
            out.success(),
            "{name}: the API server rejected the chart:\n{}",
            out.stderr
        );
        assert!(
            !out.stderr.contains("PodSecurity"),
            "{name}: a pod would violate the restricted standard:\n{}",
            out.stderr
        );
        let accepted = out
            .stdout
            .lines()
            .filter(|l| l.contains("(server dry run)"))
            .count();
        assert_eq!(
            accepted,
            objects.len(),
            "{name}: every object is validated\n{}\n{objects:?}",
            out.stdout
        );
    }
    Ok(())
}

/// `resource.group/name` of every object carrying the release's instance label, in every
/// listable resource type, namespaced (all namespaces) and cluster-scoped.
async fn objects_of_release(cluster: &Cluster, release: &str) -> Result<BTreeSet<String>> {
    let types = cluster
        .kubectl(&["api-resources", "--verbs=list", "-o", "name"])
        .await?
        .ok()?;
    let types: Vec<&str> = types
        .lines()
        .filter(|t| !t.is_empty() && *t != "componentstatuses")
        .collect();
    let out = cluster
        .kubectl(&[
            "get",
            &types.join(","),
            "--all-namespaces",
            "-l",
            &format!("app.kubernetes.io/instance={release}"),
            "-o",
            "name",
        ])
        .await?
        .ok()
        .context("listing every resource type")?;
    Ok(out
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

/// Whether an object left in a namespace after `helm uninstall` is the user's, not the
/// release's: IdSequences and what they own (slot and counter Leases, removed with the
/// sequence through its finalizer), the user's pods, Events (they expire by themselves),
/// and what Kubernetes puts in every namespace.
fn is_user_data(object: &serde_json::Value) -> bool {
    let kind = object["kind"].as_str().unwrap_or_default();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let owned_by_sequence = object["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|o| o.iter().any(|r| r["kind"] == "IdSequence"));
    match kind {
        "IdSequence" | "Event" | "Pod" => true,
        "Lease" => owned_by_sequence,
        "ServiceAccount" => name == "default",
        "ConfigMap" => name == "kube-root-ca.crt",
        _ => false,
    }
}

/// `Kind/name` of every object in `namespace` (every listable namespaced type) that is
/// not user data.
async fn not_user_data(cluster: &Cluster, namespace: &str) -> Result<BTreeSet<String>> {
    let types = cluster
        .kubectl(&[
            "api-resources",
            "--verbs=list",
            "--namespaced",
            "-o",
            "name",
        ])
        .await?
        .ok()?;
    let types: Vec<&str> = types.lines().filter(|t| !t.is_empty()).collect();
    let out = cluster
        .kubectl(&["get", &types.join(","), "-n", namespace, "-o", "json"])
        .await?
        .ok()
        .context("listing every namespaced type")?;
    let list: serde_json::Value = serde_json::from_str(&out)?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| !is_user_data(o))
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_creates_every_templated_object_and_uninstall_leaves_only_the_crd() -> Result<()> {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("helm-install").await?;
    let app = cluster.namespace("helm-install-app").await?;
    let release = "life";
    // The app namespace is not injected: nothing serves the webhook's Service here.
    let exclude = format!("webhook.excludeNamespaces={{{}}}", app.name);
    let notes = install(cluster, release, &ns.name, &[&exclude]).await?;
    assert!(
        notes.contains("Check the operator (2 replicas, one leader)"),
        "NOTES.txt tells the replica count from the values:\n{notes}"
    );

    let manifest = helm(cluster, &["get", "manifest", release, "-n", &ns.name])
        .await?
        .ok()?;
    let expected = rendered_objects(&manifest);
    let found = objects_of_release(cluster, release).await?;
    for object in &expected {
        let (kind, name) = object.split_once('/').context("kind/name")?;
        let kind = kind.to_lowercase();
        let present = found.iter().any(|f| {
            f.split_once('/').is_some_and(|(resource, n)| {
                n == name && (resource == kind || resource.starts_with(&format!("{kind}.")))
            })
        });
        assert!(
            present,
            "{object} from the manifest is not in the cluster: {found:?}"
        );
    }
    cluster
        .kubectl(&["get", "crd", "idsequences.kubeflake.io"])
        .await?
        .ok()
        .context("helm installs the CRD from the chart's crds/")?;
    // Both FlowSchemas point at a priority level that exists (the sidecars' own, and the
    // built-in one the operator's requests go to): the API server marks them not dangling.
    for schema in ["sidecars", "operator"] {
        let name = format!("{}-{schema}", fullname(release));
        eventually(
            LIMIT,
            "the FlowSchema's Dangling condition to be False",
            || async {
                let status = cluster
                    .kubectl(&[
                        "get",
                        "flowschema",
                        &name,
                        "-o",
                        "jsonpath={.status.conditions[?(@.type==\"Dangling\")].status}",
                    ])
                    .await?
                    .ok()?;
                Ok((status == "False").then_some(()))
            },
        )
        .await
        .with_context(|| format!("FlowSchema {name}"))?;
    }

    // The operator as the Deployment runs it (leader election on, under the chart's RBAC)
    // makes what it makes at run time: it leads through the chart's Lease, writes its
    // webhook Secret, binds the sidecar role in the app namespace.
    let operator = ChartOperator::start(cluster, &ns.name, release).await?;
    let leader_lease = format!("{}-leader", fullname(release));
    let get = |what: &'static str, name: String, namespace: String, path: &'static str| async move {
        cluster
            .kubectl(&[
                "get",
                what,
                &name,
                "-n",
                &namespace,
                "--ignore-not-found",
                "-o",
                &format!("jsonpath={path}"),
            ])
            .await?
            .ok()
    };
    eventually(
        LIMIT,
        "the operator to lead through the chart's Lease",
        || async {
            operator.process.check_running()?;
            let holder = get(
                "lease",
                leader_lease.clone(),
                ns.name.clone(),
                "{.spec.holderIdentity}",
            )
            .await?;
            Ok((holder == format!("{}-0", fullname(release))).then_some(()))
        },
    )
    .await
    .with_context(|| format!("operator log:\n{}", operator.log()))?;
    // No pods: another test's release in this cluster (failurePolicy Fail, unreachable
    // Service) would refuse labelled pods in any namespace it does not exclude.
    create_sequence(&app, "orders", serde_json::json!({})).await?;
    let secret = format!("{}-webhook-tls", fullname(release));
    eventually(
        LIMIT,
        "the sidecar RoleBinding and the webhook Secret",
        || async {
            operator.process.check_running()?;
            let binding = get(
                "rolebinding",
                "kubeflake-sidecar".into(),
                app.name.clone(),
                "{.metadata.ownerReferences[0].kind}",
            )
            .await?;
            let tls = get(
                "secret",
                secret.clone(),
                ns.name.clone(),
                "{.metadata.name}",
            )
            .await?;
            Ok((binding == "ClusterRole" && !tls.is_empty()).then_some(()))
        },
    )
    .await
    .with_context(|| format!("operator log:\n{}", operator.log()))?;

    helm(cluster, &["uninstall", release, "-n", &ns.name])
        .await?
        .ok()?;
    // Endpoints and EndpointSlices copy the Services' labels, and the operator's RoleBinding
    // and Secret are owned by cluster-scoped objects of the release: the garbage collector
    // removes them shortly after. The operator keeps running meanwhile, as its pods do
    // while they terminate; it must not write anything back.
    let clean = || async {
        let mut left: BTreeSet<String> = objects_of_release(cluster, release).await?;
        for namespace in [&ns.name, &app.name] {
            left.extend(
                not_user_data(cluster, namespace)
                    .await?
                    .into_iter()
                    .map(|o| format!("{namespace}: {o}")),
            );
        }
        anyhow::Ok(left)
    };
    let left = eventually(LIMIT, "every object of the release to be gone", || async {
        let left = clean().await?;
        Ok(left.is_empty().then_some(left))
    })
    .await;
    let left = match left {
        Ok(_) => BTreeSet::new(),
        Err(_) => clean().await?,
    };
    assert!(
        left.is_empty(),
        "left behind after helm uninstall: {left:?}\noperator log:\n{}",
        operator.log()
    );
    drop(operator);
    let left = clean().await?;
    assert!(
        left.is_empty(),
        "written back by the operator after helm uninstall: {left:?}"
    );
    cluster
        .kubectl(&["get", "crd", "idsequences.kubeflake.io"])
        .await?
        .ok()
        .context("the CRD (and so every IdSequence) survives helm uninstall")?;
    let sequences = cluster
        .kubectl(&["get", "idsequences", "-n", &app.name, "-o", "name"])
        .await?
        .ok()?;
    assert_eq!(
        sequences.trim(),
        "idsequence.kubeflake.io/orders",
        "user data stays"
    );
    Ok(())
}

#[tokio::test]
async fn helm_upgrade_keeps_the_ca_bundle_the_operator_patched_in() -> Result<()> {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("helm-upgrade").await?;
    let release = "upg";
    install(cluster, release, &ns.name, &[]).await?;
    let config = fullname(release);
    // What the operator does with self-managed certificates.
    let bundle = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==";
    let patch = serde_json::json!([
        {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle}
    ])
    .to_string();
    cluster
        .kubectl(&[
            "patch",
            "mutatingwebhookconfiguration",
            &config,
            "--type=json",
            "-p",
            &patch,
        ])
        .await?
        .ok()?;
    let mut args = vec!["upgrade", release, CHART, "--namespace", &ns.name];
    let sets = set_args(&["webhook.timeoutSeconds=7"]);
    args.extend(sets.iter().map(String::as_str));
    helm(cluster, &args).await?.ok()?;
    let read = |path: &'static str| {
        let config = config.clone();
        async move {
            cluster
                .kubectl(&[
                    "get",
                    "mutatingwebhookconfiguration",
                    &config,
                    "-o",
                    &format!("jsonpath={path}"),
                ])
                .await?
                .ok()
        }
    };
    assert_eq!(
        read("{.webhooks[0].timeoutSeconds}").await?,
        "7",
        "the upgrade applied"
    );
    assert_eq!(
        read("{.webhooks[0].clientConfig.caBundle}").await?,
        bundle,
        "helm upgrade must not wipe the operator's caBundle"
    );
    helm(cluster, &["uninstall", release, "-n", &ns.name])
        .await?
        .ok()?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_self_managed_webhook_secret_goes_with_the_release() -> Result<()> {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("helm-secret").await?;
    let release = "tls";
    install(cluster, release, &ns.name, &[]).await?;
    let secret = format!("{}-webhook-tls", fullname(release));
    let config = fullname(release);
    // The operator as the Deployment would run it, under the chart's RBAC.
    let operator = ChartOperator::start(cluster, &ns.name, release).await?;
    let get = |what: &'static str, name: String, path: &'static str| {
        let ns = ns.name.clone();
        async move {
            cluster
                .kubectl(&[
                    "get",
                    what,
                    &name,
                    "-n",
                    &ns,
                    "--ignore-not-found",
                    "-o",
                    &format!("jsonpath={path}"),
                ])
                .await?
                .ok()
        }
    };
    eventually(
        LIMIT,
        "the operator's CA in caBundle and its Secret",
        || async {
            operator.process.check_running()?;
            let bundle = get(
                "mutatingwebhookconfiguration",
                config.clone(),
                "{.webhooks[0].clientConfig.caBundle}",
            )
            .await?;
            let owner = get(
                "secret",
                secret.clone(),
                "{.metadata.ownerReferences[0].kind}",
            )
            .await?;
            Ok((!bundle.is_empty() && !owner.is_empty()).then_some(()))
        },
    )
    .await
    .with_context(|| format!("operator log:\n{}", operator.log()))?;
    let owner = get(
        "secret",
        secret.clone(),
        "{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}",
    )
    .await?;
    assert_eq!(
        owner,
        format!("MutatingWebhookConfiguration/{config}"),
        "the Secret is owned by the webhook configuration"
    );

    // helm uninstall deletes the Deployment; its pods stop a little later.
    helm(cluster, &["uninstall", release, "-n", &ns.name])
        .await?
        .ok()?;
    drop(operator);
    eventually(
        LIMIT,
        "the garbage collector to remove the webhook Secret",
        || async {
            Ok(get("secret", secret.clone(), "{.metadata.name}")
                .await?
                .is_empty()
                .then_some(()))
        },
    )
    .await?;
    Ok(())
}

/// A well-formed image digest for the tests (not an image anyone built).
const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

#[tokio::test]
async fn an_image_digest_pins_the_operator_and_sidecar_images_and_the_tag_is_ignored() -> Result<()>
{
    let cluster = Cluster::shared();
    let operator_digest = format!("operator.image.digest={DIGEST}");
    let sidecar_digest = format!("sidecar.image.digest={DIGEST}");
    let sets = set_args(&[
        "operator.image.repository=registry.example/kubeflake/operator",
        "operator.image.tag=ignored",
        &operator_digest,
        "sidecar.image.repository=registry.example/kubeflake/sidecar",
        "sidecar.image.tag=ignored",
        &sidecar_digest,
    ]);
    let args: Vec<&str> = sets.iter().map(String::as_str).collect();
    let pinned = template(cluster, &args).await?;
    assert!(pinned.success(), "{}", pinned.stderr);
    let operator = format!("image: registry.example/kubeflake/operator@{DIGEST}");
    let sidecar = format!("registry.example/kubeflake/sidecar@{DIGEST}");
    let deployment = rendered_of_kind(&pinned.stdout, "Deployment").concat();
    assert!(deployment.contains(&operator), "{deployment}");
    assert!(
        deployment.contains(&format!("--sidecar-image={sidecar}")),
        "the webhook injects the pinned sidecar: {deployment}"
    );
    let test_pod = rendered_of_kind(&pinned.stdout, "Pod").concat();
    assert!(
        test_pod.contains(&format!("image: {sidecar}")),
        "{test_pod}"
    );
    assert!(
        !pinned.stdout.contains("ignored"),
        "a digest wins over the tag: {}",
        pinned.stdout
    );

    // Without a digest: repository:tag, as before.
    let tagged = template(cluster, &["--set", "operator.image.tag=1.2.3"]).await?;
    assert!(tagged.success(), "{}", tagged.stderr);
    assert!(
        tagged.stdout.contains("image: kubeflake/operator:1.2.3"),
        "{}",
        tagged.stdout
    );
    assert!(!tagged.stdout.contains('@'), "no digest by default");

    for (key, bad) in [
        ("operator", "sha256:abc"),
        ("operator", "latest"),
        (
            "sidecar",
            "SHA256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ),
        ("sidecar", "md5:0123456789abcdef0123456789abcdef"),
    ] {
        let value = format!("{key}.image.digest={bad}");
        let out = template(cluster, &["--set", &value]).await?;
        assert!(!out.success(), "{value} was accepted");
        assert!(
            out.stderr.contains(&format!("/{key}/image/digest")) && out.stderr.contains("sha256"),
            "{value}: the error names the key and the format:\n{}",
            out.stderr
        );
    }
    Ok(())
}

/// The chart's NetworkPolicy rendered with `values` (a values file), as the API server
/// stores it (`kubectl apply --dry-run=server -o json` in namespace `ns`).
async fn network_policy(
    cluster: &Cluster,
    ns: &str,
    values: &str,
) -> Result<Option<serde_json::Value>> {
    let rendered = helm_with_stdin(
        cluster,
        &[
            "template",
            "np",
            CHART,
            "--namespace",
            ns,
            "--kube-version",
            KUBE_VERSION,
            "-f",
            "-",
        ],
        Some(values),
    )
    .await?
    .ok()?;
    let policies = rendered_of_kind(&rendered, "NetworkPolicy");
    let Some(policy) = policies.first() else {
        return Ok(None);
    };
    assert_eq!(policies.len(), 1, "one policy, for the operator pods");
    let stored = cluster
        .kubectl_with_stdin(
            &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
            Some(policy),
        )
        .await?
        .ok()
        .context("the API server accepts the NetworkPolicy")?;
    Ok(Some(serde_json::from_str(&stored)?))
}

/// `(port, from)` of each ingress rule: the named port, and the peers (None: anyone).
fn ingress_rules(policy: &serde_json::Value) -> Vec<(String, Option<serde_json::Value>)> {
    policy["spec"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|rule| {
            let ports = rule["ports"].as_array().cloned().unwrap_or_default();
            assert_eq!(ports.len(), 1, "one port per rule: {rule}");
            let port = ports[0]["port"].as_str().unwrap_or_default().to_owned();
            (port, rule.get("from").cloned())
        })
        .collect()
}

#[tokio::test]
async fn the_network_policy_is_off_by_default_and_lets_in_only_the_webhook_and_metrics_ports()
-> Result<()> {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("helm-netpol").await?;
    assert!(
        network_policy(cluster, &ns.name, "{}").await?.is_none(),
        "off by default"
    );

    let open = network_policy(cluster, &ns.name, "networkPolicy: {enabled: true}")
        .await?
        .context("rendered when enabled")?;
    assert_eq!(
        open["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"], "operator",
        "{open}"
    );
    assert_eq!(
        open["spec"]["policyTypes"],
        serde_json::json!(["Ingress"]),
        "egress is left alone by default"
    );
    assert_eq!(
        ingress_rules(&open),
        [("webhook".to_owned(), None), ("metrics".to_owned(), None)],
        "the webhook port from anywhere (the API server's address is not known), metrics \
         from anywhere by default, nothing else"
    );

    let narrowed = network_policy(
        cluster,
        &ns.name,
        r#"
networkPolicy:
  enabled: true
  metricsFrom:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}
  egress:
    - to: [{ipBlock: {cidr: 10.0.0.1/32}}]
      ports: [{port: 6443, protocol: TCP}]
"#,
    )
    .await?
    .context("rendered")?;
    let rules = ingress_rules(&narrowed);
    assert_eq!(rules.len(), 2, "{narrowed}");
    assert_eq!(rules[0], ("webhook".to_owned(), None));
    let (port, from) = &rules[1];
    assert_eq!(port, "metrics");
    let from = from.clone().context("metrics narrowed to metricsFrom")?;
    assert_eq!(
        from[0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "monitoring"
    );
    assert_eq!(
        from[1]["podSelector"]["matchLabels"]["app.kubernetes.io/component"], "test",
        "the chart's helm test pod still reaches /readyz and /metrics: {from}"
    );
    assert_eq!(
        narrowed["spec"]["policyTypes"],
        serde_json::json!(["Ingress", "Egress"])
    );
    assert_eq!(
        narrowed["spec"]["egress"][0]["to"][0]["ipBlock"]["cidr"],
        "10.0.0.1/32"
    );

    let no_webhook = network_policy(
        cluster,
        &ns.name,
        "{networkPolicy: {enabled: true}, webhook: {enabled: false}}",
    )
    .await?
    .context("rendered")?;
    assert_eq!(
        ingress_rules(&no_webhook),
        [("metrics".to_owned(), None)],
        "no webhook, no webhook port"
    );

    // A misspelt peer fails the install instead of opening the port to everyone.
    let typo = helm_with_stdin(
        cluster,
        &[
            "template",
            "np",
            CHART,
            "--kube-version",
            KUBE_VERSION,
            "-f",
            "-",
        ],
        Some("networkPolicy: {enabled: true, metricsFrom: [{namespaceSelectr: {}}]}"),
    )
    .await?;
    assert!(!typo.success(), "accepted: {}", typo.stdout);
    assert!(
        typo.stderr.contains("/networkPolicy/metricsFrom/0")
            && typo.stderr.contains("namespaceSelectr"),
        "{}",
        typo.stderr
    );
    Ok(())
}

/// Issue 54, finding 7: the sidecars' FlowSchema no longer takes every namespace's Lease
/// traffic (other operators' leader election included) by default. With
/// `flowControl.namespaces` empty (the default) it names only the release namespace, where
/// no sidecar runs, and the operator gets the flag and the right (`get`, `update`, that one
/// FlowSchema by name) to keep it to the namespaces that have an IdSequence
/// (`operator/src/controller/flow_schema.rs`); a list given by hand, `["*"]` included, is rendered as
/// given, and the operator neither gets the flag nor the right.
#[tokio::test]
async fn the_sidecar_flow_schema_names_only_sequence_namespaces_unless_a_list_is_given()
-> Result<()> {
    let cluster = Cluster::shared();
    let render = |extra: &'static [&'static str]| async move {
        let mut args = vec!["--namespace", "kubeflake-system"];
        args.extend_from_slice(extra);
        let out = template(cluster, &args).await?;
        anyhow::ensure!(out.success(), "{}", out.stderr);
        let schema = rendered_of_kind(&out.stdout, "FlowSchema")
            .into_iter()
            .find(|d| d.contains("name: r-kubeflake-sidecars"))
            .context("the sidecars' FlowSchema")?;
        let deployment = rendered_of_kind(&out.stdout, "Deployment").concat();
        let cluster_role = rendered_of_kind(&out.stdout, "ClusterRole")
            .into_iter()
            .find(|d| d.contains("name: r-kubeflake-operator"))
            .context("the operator's ClusterRole")?;
        anyhow::Ok((schema, deployment, cluster_role))
    };
    let (schema, deployment, cluster_role) = render(&[]).await?;
    let namespaces = "namespaces:\n            - kubeflake-system";
    assert_eq!(
        schema.matches(namespaces).count(),
        2,
        "both rules name only the release namespace until the operator's first pass: {schema}"
    );
    assert!(!schema.contains("'*'"), "{schema}");
    assert!(
        deployment.contains("- --sidecar-flow-schema=r-kubeflake-sidecars\n"),
        "{deployment}"
    );
    assert!(
        cluster_role.contains(
            "resources: [\"flowschemas\"]\n    verbs: [\"get\", \"update\"]\n    resourceNames: [\"r-kubeflake-sidecars\"]"
        ),
        "{cluster_role}"
    );

    for given in [
        &["--set", "flowControl.namespaces={*}"][..],
        &["--set", "flowControl.namespaces={apps,shop}"][..],
    ] {
        let (schema, deployment, cluster_role) = render(given).await?;
        let listed = if given[1].ends_with("{*}") {
            "namespaces:\n            - '*'"
        } else {
            "namespaces:\n            - apps\n            - shop"
        };
        assert_eq!(schema.matches(listed).count(), 2, "{given:?}: {schema}");
        assert!(!deployment.contains("--sidecar-flow-schema"), "{given:?}");
        assert!(!cluster_role.contains("flowschemas"), "{given:?}");
    }
    Ok(())
}
