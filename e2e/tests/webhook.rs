//! The injection webhook and the sidecar RoleBindings, against the real API server.
//!
//! The operator runs as a local process serving its webhook on 127.0.0.1; a
//! MutatingWebhookConfiguration points at it by `url` (in a cluster, by Service). The
//! operator creates its own CA and certificate and writes the `caBundle`; pods created
//! through the API then come back as the API server stored them.

mod operator_support;

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, Role, RoleBinding};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use kubeflake_e2e::{Cluster, TestNamespace};
use operator_support::*;
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);
const SIDECAR: &str = "kubeflake-sidecar";
/// The sidecar ClusterRole the operator binds here (the chart installs its own). It must
/// exist: the bindings name it as their owner.
const SIDECAR_ROLE: &str = "kubeflake-sidecar-e2e";

/// Creates [`SIDECAR_ROLE`] unless another test already did.
async fn ensure_sidecar_role(client: &kube::Client) -> Result<()> {
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": SIDECAR_ROLE},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"]}],
    }))?;
    match roles.create(&PostParams::default(), &role).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// One webhook entry pointing at the local operator; used twice in one configuration so
/// that the API server calls it twice for every pod (and re-invokes it).
fn webhook_entry(name: &str, port: u16, ns: &str) -> serde_json::Value {
    json!({
        "name": name,
        "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate-v1-pod")},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "objectSelector": {"matchExpressions": [{"key": "kubeflake.io/sequence", "operator": "Exists"}]},
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        "failurePolicy": "Fail",
        "timeoutSeconds": 10,
        "reinvocationPolicy": "IfNeeded",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    })
}

struct Setup {
    ns: TestNamespace,
    config_name: String,
    operator: Operator,
}

/// An operator with its webhook and a configuration that trusts it (caBundle written).
async fn setup(cluster: &Cluster, prefix: &str) -> Result<Setup> {
    setup_with(cluster, prefix, &[]).await
}

/// [`setup`] with extra operator arguments.
async fn setup_with(cluster: &Cluster, prefix: &str, extra: &[&str]) -> Result<Setup> {
    install_crd(cluster).await?;
    let ns = cluster.namespace(prefix).await?;
    ensure_sidecar_role(&ns.client).await?;
    let port = free_port();
    let config_name = format!("kubeflake-{}", ns.name);
    let configs: Api<MutatingWebhookConfiguration> = Api::all(ns.client.clone());
    let config: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": config_name},
        "webhooks": [
            webhook_entry("inject.kubeflake.io", port, &ns.name),
            webhook_entry("inject-again.kubeflake.io", port, &ns.name),
        ],
    }))?;
    configs.create(&PostParams::default(), &config).await?;
    let operator = Operator::start_with(
        cluster,
        &ns.name,
        prefix,
        &[
            "--webhook-addr",
            &format!("127.0.0.1:{port}"),
            "--webhook-namespace",
            &ns.name,
            "--webhook-config",
            &config_name,
            "--webhook-extra-san",
            "127.0.0.1",
            "--sidecar-image",
            "kubeflake-sidecar:e2e",
            "--sidecar-cluster-role",
            SIDECAR_ROLE,
        ]
        .iter()
        .chain(extra)
        .copied()
        .collect::<Vec<_>>(),
    )?;
    wait_for_ca_bundle(&configs, &config_name).await?;
    Ok(Setup {
        ns,
        config_name,
        operator,
    })
}

async fn wait_for_ca_bundle(configs: &Api<MutatingWebhookConfiguration>, name: &str) -> Result<()> {
    eventually(
        LIMIT,
        "the operator to write caBundle into both webhooks",
        || async {
            let c = configs.get(name).await?;
            Ok(c.webhooks
                .unwrap_or_default()
                .iter()
                .all(|w| {
                    w.client_config
                        .ca_bundle
                        .as_ref()
                        .is_some_and(|b| !b.0.is_empty())
                })
                .then_some(()))
        },
    )
    .await
}

fn pod(name: &str, labels: serde_json::Value, annotations: serde_json::Value) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"containers": [
            {"name": "app", "image": "example.invalid/app"},
            {"name": "worker", "image": "example.invalid/worker", "env": [{"name": "MODE", "value": "batch"}]},
        ]},
    }))?)
}

/// Creates a pod, retrying while the API server has not yet picked up the new caBundle
/// (its webhook configuration cache lags the write by a moment).
async fn create(ns: &TestNamespace, pod: &Pod) -> Result<Pod, kube::Error> {
    let api: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let mut tries = 0;
    loop {
        match api.create(&PostParams::default(), pod).await {
            Err(kube::Error::Api(s)) if s.message.contains("x509") && tries < 50 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => return other,
        }
    }
}

fn sidecars(pod: &Pod) -> usize {
    let spec = pod.spec.as_ref().expect("spec");
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .filter(|c| c.name == SIDECAR)
        .count()
}

fn url_env(pod: &Pod, container: usize) -> Option<String> {
    let c = &pod.spec.as_ref()?.containers[container];
    c.env
        .iter()
        .flatten()
        .find(|e| e.name == "KUBEFLAKE_URL")?
        .value
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_pod_gets_the_sidecar_exactly_once_and_others_are_untouched() -> Result<()> {
    let cluster = Cluster::shared();
    let s = setup(cluster, "wh-inject").await?;
    create_sequence(&s.ns, "orders", json!({})).await?;

    // Called twice (two webhook entries): still one sidecar.
    let injected = create(
        &s.ns,
        &pod(
            "labelled",
            json!({"kubeflake.io/sequence": "orders"}),
            json!({}),
        )?,
    )
    .await?;
    assert_eq!(
        sidecars(&injected),
        1,
        "exactly one sidecar: {:?}",
        injected.spec
    );
    let spec = injected.spec.as_ref().context("spec")?;
    let init = &spec.init_containers.as_ref().context("init containers")?[0];
    assert_eq!(init.name, SIDECAR);
    assert_eq!(
        init.restart_policy.as_deref(),
        Some("Always"),
        "a native sidecar"
    );
    assert_eq!(init.image.as_deref(), Some("kubeflake-sidecar:e2e"));
    assert!(
        spec.volumes
            .iter()
            .flatten()
            .any(|v| v.name == "kubeflake-state" && v.empty_dir.is_some())
    );
    assert_eq!(
        url_env(&injected, 0).as_deref(),
        Some("http://127.0.0.1:7070")
    );
    assert_eq!(
        url_env(&injected, 1).as_deref(),
        Some("http://127.0.0.1:7070")
    );
    assert!(injected.annotations().contains_key("kubeflake.io/injected"));
    assert_sidecar_as_stored(init, spec);
    // The first entry injected; the second (and any re-invocation) found the sidecar there.
    let metric = |outcome: &str| {
        s.operator.metric_with(
            "kubeflake_webhook_requests_total",
            &format!("outcome=\"{outcome}\""),
        )
    };
    assert_eq!(metric("injected"), 1.0, "one patch for the labelled pod");
    // Exactly once more: the second entry. The sidecar came with the service account
    // token mount, so the ServiceAccount plugin, run again after the webhooks, changed
    // nothing and the API server re-invoked neither entry (a second admission review per
    // labelled pod, before the sidecar carried that mount).
    assert_eq!(
        metric("skipped"),
        1.0,
        "the second webhook entry was called and skipped, and nothing was re-invoked"
    );

    let plain = create(&s.ns, &pod("unlabelled", json!({"app": "x"}), json!({}))?).await?;
    assert_eq!(sidecars(&plain), 0);
    assert!(
        plain
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .is_none_or(|i| i.is_empty())
    );
    assert_eq!(url_env(&plain, 0), None);

    let opted_out = create(
        &s.ns,
        &pod(
            "opted-out",
            json!({"kubeflake.io/sequence": "orders"}),
            json!({"kubeflake.io/inject": "false"}),
        )?,
    )
    .await?;
    assert_eq!(
        sidecars(&opted_out),
        0,
        "the opt-out annotation is honoured"
    );

    assert_eq!(metric("injected"), 1.0, "nothing else was patched");
    Ok(())
}

/// What the API server stored for the injected sidecar: its pod identity from the
/// downward API, its sequence, probes, resources, restricted security context and the
/// state volume (defaulting by the API server must not have dropped any of it).
fn assert_sidecar_as_stored(
    sidecar: &k8s_openapi::api::core::v1::Container,
    spec: &k8s_openapi::api::core::v1::PodSpec,
) {
    let env = sidecar.env.clone().unwrap_or_default();
    let field = |name: &str| {
        env.iter()
            .find(|e| e.name == name)
            .and_then(|e| e.value_from.as_ref()?.field_ref.as_ref())
            .map(|f| f.field_path.clone())
    };
    assert_eq!(field("POD_NAME").as_deref(), Some("metadata.name"));
    assert_eq!(
        field("POD_NAMESPACE").as_deref(),
        Some("metadata.namespace")
    );
    assert_eq!(field("POD_UID").as_deref(), Some("metadata.uid"));
    let sequence = env.iter().find(|e| e.name == "KUBEFLAKE_SEQUENCE");
    assert_eq!(
        sequence.and_then(|e| e.value.as_deref()),
        Some("orders"),
        "{env:?}"
    );
    for (what, probe, path) in [
        ("readiness", sidecar.readiness_probe.as_ref(), "/readyz"),
        ("liveness", sidecar.liveness_probe.as_ref(), "/healthz"),
    ] {
        let get = probe
            .and_then(|p| p.http_get.as_ref())
            .unwrap_or_else(|| panic!("a {what} probe: {sidecar:?}"));
        assert_eq!(get.path.as_deref(), Some(path), "{what} probe");
        assert_eq!(
            get.port,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(7071),
            "{what} probe port"
        );
    }
    let resources = sidecar.resources.clone().expect("resources");
    let quantity = |map: &Option<std::collections::BTreeMap<String, _>>, key: &str| {
        map.as_ref()
            .and_then(
                |m: &std::collections::BTreeMap<
                    String,
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity,
                >| m.get(key),
            )
            .map(|q| q.0.clone())
    };
    assert_eq!(quantity(&resources.requests, "cpu").as_deref(), Some("20m"));
    assert_eq!(
        quantity(&resources.requests, "memory").as_deref(),
        Some("16Mi")
    );
    assert_eq!(
        quantity(&resources.limits, "memory").as_deref(),
        Some("64Mi")
    );
    let sc = sidecar.security_context.clone().expect("securityContext");
    assert_eq!(sc.run_as_non_root, Some(true));
    assert!(sc.run_as_user.is_some_and(|u| u != 0), "non-root uid");
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.privileged, Some(false));
    assert_eq!(
        sc.capabilities.and_then(|c| c.drop),
        Some(vec!["ALL".to_string()])
    );
    assert_eq!(
        sc.seccomp_profile.map(|p| p.type_).as_deref(),
        Some("RuntimeDefault")
    );
    let volume = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "kubeflake-state")
        .expect("the state volume");
    assert!(volume.empty_dir.is_some(), "an emptyDir: {volume:?}");
    let mounts = sidecar.volume_mounts.clone().unwrap_or_default();
    assert!(
        mounts
            .iter()
            .any(|m| m.name == "kubeflake-state" && m.mount_path == "/var/run/kubeflake"),
        "the state volume is mounted: {mounts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_pod_is_admitted_where_the_restricted_pod_security_standard_is_enforced()
-> Result<()> {
    let cluster = Cluster::shared();
    let s = setup(cluster, "wh-restricted").await?;
    cluster
        .kubectl(&[
            "label",
            "namespace",
            &s.ns.name,
            "pod-security.kubernetes.io/enforce=restricted",
        ])
        .await?
        .ok()?;
    create_sequence(&s.ns, "orders", json!({})).await?;
    let restricted = json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
    });
    let compliant: Pod = serde_json::from_value(json!({
        "metadata": {"name": "restricted", "labels": {"kubeflake.io/sequence": "orders"}},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "app", "image": "example.invalid/app", "securityContext": restricted}],
        },
    }))?;
    let admitted = create(&s.ns, &compliant)
        .await
        .context("a restricted-compliant pod with the injected sidecar must be admitted")?;
    assert_eq!(sidecars(&admitted), 1, "admitted with the sidecar");
    // The namespace really enforces the standard: the same pod without its security
    // context is refused by Pod Security admission, not by us.
    let mut lax = compliant.clone();
    lax.metadata.name = Some("lax".into());
    if let Some(spec) = lax.spec.as_mut() {
        spec.security_context = None;
        spec.containers[0].security_context = None;
    }
    let refused = create(&s.ns, &lax)
        .await
        .expect_err("a non-compliant pod is refused");
    assert!(
        refused.to_string().contains("restricted"),
        "refused by the restricted standard: {refused}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_naming_a_missing_sequence_is_rejected_with_a_message_saying_so() -> Result<()> {
    let cluster = Cluster::shared();
    let s = setup(cluster, "wh-missing").await?;
    let err = create(
        &s.ns,
        &pod("lost", json!({"kubeflake.io/sequence": "nope"}), json!({}))?,
    )
    .await
    .expect_err("the pod must be rejected");
    let message = err.to_string();
    assert!(
        message.contains(r#"IdSequence "nope" not found in namespace"#)
            && message.contains("create it first"),
        "{message}"
    );
    // kubectl shows the same to a person.
    let manifest = serde_json::to_string(&pod(
        "lost2",
        json!({"kubeflake.io/sequence": "nope"}),
        json!({}),
    )?)?;
    let out = cluster
        .kubectl_with_stdin(&["create", "-n", &s.ns.name, "-f", "-"], Some(&manifest))
        .await?;
    assert!(!out.success());
    assert!(
        out.stderr.contains("not found in namespace"),
        "{}",
        out.stderr
    );
    Ok(())
}

/// The webhook reads a pod's sequence from its own watch of the IdSequences once the watch
/// has seen it (no GET per pod in a burst), and with a GET before that, so a pod created
/// right after its sequence is admitted. Server-side dry runs call the webhook without
/// storing a pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_finds_a_sequence_its_watch_has_seen_without_a_get_and_a_new_one_with_one()
-> Result<()> {
    let cluster = Cluster::shared();
    let s = setup(cluster, "wh-cache").await?;
    let lookups = |source: &str| {
        s.operator.metric_with(
            "kubeflake_webhook_sequence_lookups_total",
            &format!("source=\"{source}\""),
        )
    };
    let pods: Api<Pod> = Api::namespaced(s.ns.client.clone(), &s.ns.name);
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let labelled = pod("dry", json!({"kubeflake.io/sequence": "orders"}), json!({}))?;
    // Made and used at once: admitted whether or not the watch has it yet.
    create_sequence(&s.ns, "orders", json!({})).await?;
    let first = create(
        &s.ns,
        &pod(
            "first",
            json!({"kubeflake.io/sequence": "orders"}),
            json!({}),
        )?,
    )
    .await?;
    assert_eq!(sidecars(&first), 1);
    let before = (lookups("cache"), lookups("api"));
    assert_eq!(
        before.0 + before.1,
        1.0,
        "one lookup per injected pod: {before:?}"
    );
    // Once the watch has it, pods are admitted from the cache (bounded: 10 s).
    let mut from_cache = false;
    for _ in 0..40 {
        let (cache, api) = (lookups("cache"), lookups("api"));
        let made = pods.create(&dry_run, &labelled).await?;
        assert_eq!(sidecars(&made), 1);
        if lookups("cache") == cache + 1.0 && lookups("api") == api {
            from_cache = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        from_cache,
        "the webhook never found the sequence in its watch"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_keeps_its_certificate_in_a_secret_owned_by_the_configuration_and_restores_a_reset_ca_bundle()
-> Result<()> {
    let cluster = Cluster::shared();
    let s = setup(cluster, "wh-certs").await?;
    let secrets: Api<Secret> = Api::namespaced(s.ns.client.clone(), &s.ns.name);
    let secret = secrets.get("kubeflake-webhook-tls").await?;
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let data = secret.data.clone().unwrap_or_default();
    for key in ["tls.crt", "tls.key", "ca.crt"] {
        assert!(
            data.get(key).is_some_and(|v| !v.0.is_empty()),
            "Secret holds {key}"
        );
    }
    let owners = secret.owner_references();
    assert!(
        owners
            .iter()
            .any(|o| o.kind == "MutatingWebhookConfiguration" && o.name == s.config_name),
        "owned by the configuration, so deleting it deletes the Secret: {owners:?}"
    );

    // A `helm upgrade` re-applying the chart resets caBundle; the operator writes it back.
    let configs: Api<MutatingWebhookConfiguration> = Api::all(s.ns.client.clone());
    let mut config = configs.get(&s.config_name).await?;
    for hook in config.webhooks.iter_mut().flatten() {
        hook.client_config.ca_bundle = None;
    }
    configs
        .replace(&s.config_name, &PostParams::default(), &config)
        .await?;
    wait_for_ca_bundle(&configs, &s.config_name).await?;
    let restored = configs.get(&s.config_name).await?;
    let bundle = restored.webhooks.unwrap_or_default()[0]
        .client_config
        .ca_bundle
        .clone();
    assert_eq!(bundle.map(|b| b.0), data.get("ca.crt").map(|b| b.0.clone()));

    // Deleting the configuration garbage-collects the Secret (kube-controller-manager runs).
    configs
        .delete(&s.config_name, &DeleteParams::default())
        .await?;
    eventually(LIMIT, "the Secret to be garbage-collected", || async {
        Ok(secrets
            .get_opt("kubeflake-webhook-tls")
            .await?
            .is_none()
            .then_some(()))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_with_a_sequence_gets_the_sidecar_role_binding_and_loses_it_with_the_last_sequence()
-> Result<()> {
    let cluster = Cluster::shared();
    let s = setup(cluster, "wh-rbac").await?;
    let bindings: Api<RoleBinding> = Api::namespaced(s.ns.client.clone(), &s.ns.name);
    create_sequence(&s.ns, "first", json!({})).await?;
    create_sequence(&s.ns, "second", json!({})).await?;
    let binding = eventually(LIMIT, "the sidecar RoleBinding", || async {
        Ok(bindings.get_opt("kubeflake-sidecar").await?)
    })
    .await?;
    assert_eq!(
        (
            binding.role_ref.kind.as_str(),
            binding.role_ref.name.as_str()
        ),
        ("Role", "kubeflake-sidecar"),
        "the namespace's own Role, not the ClusterRole"
    );
    let roles: Api<Role> = Api::namespaced(s.ns.client.clone(), &s.ns.name);
    let role = roles.get("kubeflake-sidecar").await?;
    for object in [binding.owner_references(), role.owner_references()] {
        assert!(
            object.len() == 1 && object[0].kind == "ClusterRole" && object[0].name == SIDECAR_ROLE,
            "owned by the sidecar ClusterRole, so deleting it removes both: {object:?}"
        );
    }
    assert!(
        binding.subjects.unwrap_or_default().is_empty(),
        "no labelled pod yet: no account is bound"
    );
    // The two sequences may reach the operator in two passes: the Role is updated to name
    // the second's Leases too.
    let both_named = |role: Role| {
        let writes = role
            .rules
            .unwrap_or_default()
            .into_iter()
            .find(|r| r.verbs.iter().any(|v| v == "update"))
            .and_then(|r| r.resource_names)
            .unwrap_or_default();
        writes.contains(&"first-slot-0".to_string())
            && writes.contains(&"second-slot-0".to_string())
    };
    if !both_named(role) {
        eventually(
            LIMIT,
            "the Role to name both sequences' slot Leases",
            || async { Ok(both_named(roles.get("kubeflake-sidecar").await?).then_some(())) },
        )
        .await?;
    }

    let sequences: Api<kubeflake_crds::IdSequence> =
        Api::namespaced(s.ns.client.clone(), &s.ns.name);
    sequences.delete("first", &DeleteParams::default()).await?;
    eventually(LIMIT, "the first sequence to be gone", || async {
        Ok(sequences.get_opt("first").await?.is_none().then_some(()))
    })
    .await?;
    assert!(
        bindings.get_opt("kubeflake-sidecar").await?.is_some(),
        "still needed by the second"
    );
    sequences.delete("second", &DeleteParams::default()).await?;
    let roles: Api<Role> = Api::namespaced(s.ns.client.clone(), &s.ns.name);
    eventually(
        LIMIT,
        "the Role and RoleBinding to go with the last sequence",
        || async {
            let gone = bindings.get_opt("kubeflake-sidecar").await?.is_none()
                && roles.get_opt("kubeflake-sidecar").await?.is_none();
            Ok(gone.then_some(()))
        },
    )
    .await
}

/// `GET /readyz` on the operator's probe port: the status code and body (0 when refused).
fn readyz(port: u16) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    let _ = s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, out)
}

/// Waits for `/readyz` to answer 200; on time-out the error shows its last answer and the
/// operator's log.
async fn wait_ready(operator: &Operator, what: &str) -> Result<()> {
    eventually(LIMIT, what, || async {
        operator.process.check_running()?;
        Ok((readyz(operator.metrics_port).0 == 200).then_some(()))
    })
    .await
    .with_context(|| {
        format!(
            "/readyz answered {:?}; operator log:\n{}",
            readyz(operator.metrics_port).1,
            operator.process.log_tail(60)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_sigterm_the_webhook_is_still_served_while_readiness_says_shutting_down() -> Result<()>
{
    let cluster = Cluster::shared();
    // A drain far longer than this test needs: the checks below run inside it.
    let s = setup_with(cluster, "wh-drain", &["--shutdown-drain-seconds", "60"]).await?;
    create_sequence(&s.ns, "orders", json!({})).await?;
    let port = s.operator.metrics_port;
    wait_ready(&s.operator, "the operator to be ready").await?;
    let pid = s.operator.process.pid().context("the operator runs")?;
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    eventually(LIMIT, "readiness to report shutting down", || async {
        let (code, body) = readyz(port);
        Ok((code == 503 && body.contains("shutting down")).then_some(()))
    })
    .await?;
    // The API server may still call a terminating replica: it is answered, not refused.
    let injected = create(
        &s.ns,
        &pod(
            "during-drain",
            json!({"kubeflake.io/sequence": "orders"}),
            json!({}),
        )?,
    )
    .await
    .with_context(|| format!("operator log:\n{}", s.operator.process.log_tail(30)))?;
    assert_eq!(sidecars(&injected), 1, "injected during the drain");
    s.operator
        .process
        .check_running()
        .context("the operator still runs during its drain")?;
    // The drain is logged once the controller has stopped, which readiness does not wait
    // for (it says "shutting down" at the signal): under load that can come after the pod
    // above was injected.
    let log_path = s.operator.process.spec().log.clone();
    eventually(LIMIT, "the drain to be logged", || async {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        Ok(log.contains("draining").then_some(()))
    })
    .await
    .with_context(|| format!("operator log:\n{}", s.operator.process.log_tail(30)))?;
    s.operator
        .process
        .check_running()
        .context("the operator still runs while it drains")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_certificate_directory_as_cert_manager_mounts_it_the_webhook_injects() -> Result<()>
{
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("wh-cert-dir").await?;
    // What cert-manager would mount: tls.crt and tls.key, here a certificate for 127.0.0.1
    // signed by the test cluster's CA, which the configuration trusts (cert-manager's CA
    // injector would set caBundle; here it is set by hand).
    let pki = cluster.pki();
    let dir = tempfile::tempdir()?;
    std::fs::copy(&pki.serving_cert, dir.path().join("tls.crt"))?;
    std::fs::copy(&pki.serving_key, dir.path().join("tls.key"))?;
    let ca = std::fs::read(&pki.ca_cert)?;
    let port = free_port();
    let config_name = format!("kubeflake-{}", ns.name);
    let mut entry = webhook_entry("inject.kubeflake.io", port, &ns.name);
    entry["clientConfig"]["caBundle"] = json!(k8s_openapi::ByteString(ca));
    let config: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": config_name},
        "webhooks": [entry],
    }))?;
    let configs: Api<MutatingWebhookConfiguration> = Api::all(ns.client.clone());
    configs.create(&PostParams::default(), &config).await?;
    let dir_arg = dir.path().display().to_string();
    let operator = Operator::start_with(
        cluster,
        &ns.name,
        "cert-dir",
        &[
            "--webhook-addr",
            &format!("127.0.0.1:{port}"),
            "--webhook-cert-dir",
            &dir_arg,
            "--sidecar-image",
            "kubeflake-sidecar:e2e",
        ],
    )?;
    create_sequence(&ns, "orders", json!({})).await?;
    // Ready once the certificate from the directory is loaded.
    wait_ready(&operator, "the operator to load the certificate").await?;
    let injected = create(
        &ns,
        &pod(
            "labelled",
            json!({"kubeflake.io/sequence": "orders"}),
            json!({}),
        )?,
    )
    .await
    .with_context(|| format!("operator log:\n{}", operator.process.log_tail(30)))?;
    assert_eq!(
        sidecars(&injected),
        1,
        "injected over the mounted certificate"
    );
    let secrets: Api<Secret> = Api::namespaced(ns.client.clone(), &ns.name);
    assert!(
        secrets.get_opt("kubeflake-webhook-tls").await?.is_none(),
        "with a certificate directory the operator keeps no Secret of its own"
    );
    configs
        .delete(&config_name, &DeleteParams::default())
        .await?;
    Ok(())
}

/// A second mutating webhook, served over HTTPS from the test process with its own
/// self-signed certificate: it appends the container [`LATE`] to every pod it is sent
/// (once), as a service-mesh or log-shipping webhook would, and records for each call
/// whether kubeflake's sidecar was already in the pod it saw.
struct LateWebhook {
    port: u16,
    /// The certificate, PEM: the configuration's caBundle.
    cert_pem: String,
    /// One entry per call: was the sidecar already there?
    saw_sidecar: std::sync::Arc<std::sync::Mutex<Vec<bool>>>,
    server: tokio::task::JoinHandle<()>,
}

/// The container [`LateWebhook`] adds.
const LATE: &str = "late";

impl Drop for LateWebhook {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl LateWebhook {
    async fn start() -> Result<LateWebhook> {
        use std::net::{IpAddr, Ipv4Addr};
        use tokio_rustls::rustls;
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::default();
        params.subject_alt_names = vec![rcgen::SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST))];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.self_signed(&key)?;
        let key_der = rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der());
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key_der.into())?;
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let port = listener.local_addr()?.port();
        let saw_sidecar = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = saw_sidecar.clone();
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let seen = seen.clone();
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(stream).await {
                        // A connection the API server drops ends the task; the test sees
                        // the consequence in the pod.
                        let _ = serve_late(tls, seen).await;
                    }
                });
            }
        });
        Ok(LateWebhook {
            port,
            cert_pem: cert.pem(),
            saw_sidecar,
            server,
        })
    }

    /// Its configuration: one webhook for labelled pods in `ns`, never re-invoked. The
    /// name sorts after kubeflake's `kubeflake-<ns>`, and the API server calls mutating
    /// webhooks in the order of their configurations' names: this one runs after
    /// kubeflake's injection.
    fn config(&self, ns: &str) -> Result<MutatingWebhookConfiguration> {
        let mut entry = webhook_entry("late.e2e.kubeflake.io", self.port, ns);
        entry["clientConfig"] = json!({
            "url": format!("https://127.0.0.1:{}/mutate", self.port),
            "caBundle": k8s_openapi::ByteString(self.cert_pem.clone().into_bytes()),
        });
        entry["reinvocationPolicy"] = json!("Never");
        Ok(serde_json::from_value(json!({
            "metadata": {"name": format!("zz-late-container-{ns}")},
            "webhooks": [entry],
        }))?)
    }

    fn saw_sidecar(&self) -> Vec<bool> {
        self.saw_sidecar
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Answers the AdmissionReviews of one connection (HTTP/1.1 with keep-alive, bodies with
/// Content-Length, as the API server sends them) until the API server closes it.
async fn serve_late<S>(stream: S, seen: std::sync::Arc<std::sync::Mutex<Vec<bool>>>) -> Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::io::BufReader::new(stream);
    loop {
        let mut length = None;
        let mut line = String::new();
        loop {
            line.clear();
            if stream.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = Some(value.trim().parse::<usize>()?);
            }
        }
        let mut body = vec![0; length.context("a request without Content-Length")?];
        stream.read_exact(&mut body).await?;
        let review: serde_json::Value = serde_json::from_slice(&body)?;
        let pod = &review["request"]["object"];
        let has = |list: &str, name: &str| {
            pod["spec"][list]
                .as_array()
                .is_some_and(|l| l.iter().any(|c| c["name"] == name))
        };
        seen.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(has("initContainers", SIDECAR));
        let mut response = json!({"uid": review["request"]["uid"], "allowed": true});
        if !has("containers", LATE) {
            let patch = json!([{
                "op": "add",
                "path": "/spec/containers/-",
                "value": {"name": LATE, "image": "example.invalid/late"},
            }]);
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(k8s_openapi::ByteString(serde_json::to_vec(&patch)?));
        }
        let answer = serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": response,
        }))?;
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            answer.len()
        );
        let out = stream.get_mut();
        out.write_all(head.as_bytes()).await?;
        out.write_all(&answer).await?;
        out.flush().await?;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_added_by_a_later_webhook_gets_the_url_and_the_socket_on_reinvocation()
-> Result<()> {
    let cluster = Cluster::shared();
    let s = setup(cluster, "wh-reinvoke").await?;
    create_sequence(&s.ns, "orders", json!({})).await?;
    let late = LateWebhook::start().await?;
    let configs: Api<MutatingWebhookConfiguration> = Api::all(s.ns.client.clone());
    let late_config = late.config(&s.ns.name)?;
    let late_name = late_config.name_any();
    configs.create(&PostParams::default(), &late_config).await?;

    // The API server's webhook cache picks the new configuration up a moment after the
    // write: until then a pod comes back without the late container, and is retried.
    let pods: Api<Pod> = Api::namespaced(s.ns.client.clone(), &s.ns.name);
    let mut attempt = 0;
    let created = eventually(LIMIT, "a pod that the later webhook changed", || {
        attempt += 1;
        let name = format!("reinvoked-{attempt}");
        let pods = pods.clone();
        let ns = &s.ns;
        async move {
            let labels = json!({"kubeflake.io/sequence": "orders"});
            let created = create(ns, &pod(&name, labels, json!({}))?).await?;
            let spec = created.spec.as_ref().context("spec")?;
            if spec.containers.iter().any(|c| c.name == LATE) {
                return Ok(Some(created));
            }
            pods.delete(&name, &DeleteParams::default()).await?;
            Ok(None)
        }
    })
    .await
    .with_context(|| format!("operator log:\n{}", s.operator.process.log_tail(30)))?;

    assert!(
        late.saw_sidecar().contains(&true),
        "the later webhook ran after kubeflake's injection (it saw the sidecar): {:?}",
        late.saw_sidecar()
    );
    assert_eq!(sidecars(&created), 1, "still one sidecar");
    let spec = created.spec.as_ref().context("spec")?;
    let names: Vec<_> = spec.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["app", "worker", LATE]);
    for (i, c) in spec.containers.iter().enumerate() {
        assert_eq!(
            url_env(&created, i).as_deref(),
            Some("http://127.0.0.1:7070"),
            "{}: {:?}",
            c.name,
            c.env
        );
        let env = c.env.as_deref().unwrap_or_default();
        assert_eq!(
            env.iter().filter(|e| e.name == "KUBEFLAKE_URL").count(),
            1,
            "{}: set once",
            c.name
        );
        let socket = env.iter().find(|e| e.name == "KUBEFLAKE_SOCKET");
        assert_eq!(
            socket.and_then(|e| e.value.as_deref()),
            Some("/var/run/kubeflake-socket/kubeflake.sock"),
            "{}",
            c.name
        );
        let mounts = c.volume_mounts.as_deref().unwrap_or_default();
        assert!(
            mounts.iter().any(|m| m.name == "kubeflake-socket"
                && m.mount_path == "/var/run/kubeflake-socket"
                && m.read_only == Some(true)),
            "{}: the socket volume, read-only: {mounts:?}",
            c.name
        );
    }
    let log = std::fs::read_to_string(&s.operator.process.spec().log).unwrap_or_default();
    assert!(
        log.contains("containers added after the injection"),
        "the operator's re-invocation patched the late container:\n{log}"
    );
    configs.delete(&late_name, &DeleteParams::default()).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_network_pod_is_refused_with_a_message_saying_what_to_do_instead() -> Result<()> {
    let cluster = Cluster::shared();
    let s = setup(cluster, "wh-hostnet").await?;
    create_sequence(&s.ns, "orders", json!({})).await?;
    let mut host = pod(
        "host-network",
        json!({"kubeflake.io/sequence": "orders"}),
        json!({}),
    )?;
    if let Some(spec) = host.spec.as_mut() {
        spec.host_network = Some(true);
    }
    let message = create(&s.ns, &host)
        .await
        .expect_err("a hostNetwork pod must be refused")
        .to_string();
    for what in [
        "hostNetwork: true",
        "Remove hostNetwork",
        "kubeflake.io/inject: \"false\"",
    ] {
        assert!(message.contains(what), "{what:?} not in: {message}");
    }
    // Opted out, it is created as written.
    host.metadata.annotations = Some([("kubeflake.io/inject".into(), "false".into())].into());
    let created = create(&s.ns, &host).await?;
    assert_eq!(sidecars(&created), 0);
    Ok(())
}
