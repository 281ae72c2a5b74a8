//! kubeflake installed like a product (docs/install.md, "Into a registry"): the release
//! that `scripts/release.sh` cuts, its OCI archives pushed with `crane push` to an OCI
//! registry on the node's bridge, and the PACKAGED chart `kubeflake-<v>.tgz` (images
//! pinned by digest) installed with only the registry's repositories set. The images are
//! not in the node's containerd under those names: the kubelet pulls them with the
//! default pull policy, as in a user's cluster.
//!
//! The release is signed (a throw-away cosign key pair); its image signatures are attached
//! in the registry and `cosign verify` passes for its images there and refuses an image it
//! did not sign (docs/install.md, "Verifying a release").
//!
//! In CI the release reuses the binaries the image build made (scripts/lib/images.sh), so
//! it only builds the images, SBOMs and chart from them.

mod chart_support;
mod node_support;
mod operator_support;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use kubeflake_e2e::Cluster;
use kubeflake_e2e::bin_dir::{repo_file, script_output_dir_with_env};
use kubeflake_e2e::registry::{Registry, registry_host, remove_node_images};
use kubeflake_e2e::signing::{Cosign, PASSWORD, Verdict};
use node_support::*;
use operator_support::{create_sequence, eventually};
use tokio::sync::OnceCell;

fn cluster() -> &'static Cluster {
    Cluster::shared_with_node()
}

/// The release this binary cut, pushed to the node's registry and installed.
struct Installed {
    /// `<registry>/kubeflake/<name>@<digest>` of operator, sidecar, example-app.
    operator: String,
    sidecar: String,
    example_app: String,
    /// The release's public key (`cosign.pub` of the release directory).
    public_key: PathBuf,
    cosign: Cosign,
    /// Kept running for the binary's life.
    registry: Registry,
}

/// The registry's repository of an image of the release.
fn repository(name: &str) -> String {
    format!("{}/kubeflake/{name}", registry_host())
}

/// `<name> <digest>` lines of the release's images.txt, as (name, digest).
fn release_digests(out: &Path) -> Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(out.join("images.txt"))?;
    text.lines()
        .map(|line| {
            let (name, digest) = line
                .split_once(' ')
                .with_context(|| format!("images.txt: {line:?}"))?;
            Ok((name.to_owned(), digest.to_owned()))
        })
        .collect()
}

/// The one file of `dir` whose name starts with `prefix` and ends with `suffix`.
fn release_file(dir: &Path, prefix: &str, suffix: &str) -> Result<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with(prefix) && name.ends_with(suffix) {
            found.push(dir.join(name));
        }
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        _ => bail!("{}: not one {prefix}*{suffix}: {found:?}", dir.display()),
    }
}

/// The chart's repositories pointed at the node's registry; nothing else set (the digests
/// are the packaged chart's, the pull policy its default).
fn registry_values() -> Vec<String> {
    vec![
        format!("operator.image.repository={}", repository("operator")),
        format!("sidecar.image.repository={}", repository("sidecar")),
    ]
}

/// Cuts the release, starts the registry, pushes the images, removes every image of the
/// registry's name from the node, and installs the packaged chart with `--wait` (once).
async fn installed() -> Result<&'static Installed> {
    static INSTALLED: OnceCell<Installed> = OnceCell::const_new();
    INSTALLED.get_or_try_init(install).await
}

async fn install() -> Result<Installed> {
    let cluster = cluster();
    let out_dir = cluster.dir().join("release");
    let out_arg = out_dir.to_string_lossy().into_owned();
    let release = repo_file("scripts/release.sh");
    // The release is signed with a throw-away key pair (the project's key, in a real
    // release), as docs/install.md's "Releases" shows.
    let cosign = tokio::task::spawn_blocking(Cosign::build).await??;
    let key = cosign.key_pair(&cluster.dir().join("release-key"))?;
    let private = key.private.clone();
    let out = tokio::task::spawn_blocking(move || {
        script_output_dir_with_env(
            &release,
            &["--allow-dirty", "--out", &out_arg],
            &[
                ("KUBEFLAKE_COSIGN_KEY", private.as_os_str()),
                ("COSIGN_PASSWORD", PASSWORD.as_ref()),
            ],
        )
    })
    .await??;
    assert_eq!(
        std::fs::read(out.join("cosign.pub"))?,
        std::fs::read(&key.public)?,
        "the release ships the public key of the key it was signed with"
    );
    let dir = cluster.dir().to_path_buf();
    let registry = tokio::task::spawn_blocking(move || Registry::start(&dir)).await??;
    let removed = remove_node_images(&registry_host())?;
    assert!(removed.is_empty(), "a fresh node has none: {removed:?}");

    let mut pinned = std::collections::BTreeMap::new();
    for (name, digest) in release_digests(&out)? {
        let archive = release_file(&out, &format!("kubeflake-{name}-"), ".oci.tar")?;
        let pushed = registry.push_archive(
            &archive,
            cluster.dir(),
            &format!("kubeflake/{name}"),
            "release",
        )?;
        assert_eq!(
            pushed, digest,
            "crane push keeps {name}'s manifest: the registry's digest is the release's"
        );
        let manifest = release_file(&out, &format!("kubeflake-{name}-"), ".manifest.json")?;
        assert!(
            registry.manifest(&format!("kubeflake/{name}"), &digest)? == std::fs::read(&manifest)?,
            "the registry serves {name}'s manifest byte for byte as the release's {}",
            manifest.display()
        );
        // The image signature the release made offline, attached in the registry and
        // verified there with the release's public key: the commands docs/install.md
        // gives a user before `helm install`.
        let reference = format!("{}@{digest}", repository(&name));
        let payload = release_file(&out, &format!("kubeflake-{name}-"), ".cosign-payload.json")?;
        let signature = release_file(
            &out,
            &format!("kubeflake-{name}-"),
            ".cosign-payload.json.sig",
        )?;
        cosign.attach(&payload, &signature, &reference)?;
        assert_eq!(
            cosign.verify(&out.join("cosign.pub"), &reference)?,
            Verdict::Verified,
            "cosign verify passes for the release's {name} image in the registry"
        );
        pinned.insert(name.clone(), reference);
    }
    let chart = release_file(&out, "kubeflake-", ".tgz")?;
    helm_wait(
        cluster,
        "install",
        RELEASE,
        &chart.to_string_lossy(),
        RELEASE_NAMESPACE,
        &registry_values(),
    )
    .await?;
    let image = |name: &str| {
        pinned
            .get(name)
            .cloned()
            .with_context(|| format!("images.txt has no {name}"))
    };
    Ok(Installed {
        operator: image("operator")?,
        sidecar: image("sidecar")?,
        example_app: image("example-app")?,
        public_key: out.join("cosign.pub"),
        cosign,
        registry,
    })
}

/// The messages of the events with reason `reason`, of `namespace` or (None) of all.
async fn event_messages(
    cluster: &Cluster,
    namespace: Option<&str>,
    reason: &str,
) -> Result<Vec<String>> {
    let scope = match namespace {
        Some(ns) => vec!["-n", ns],
        None => vec!["--all-namespaces"],
    };
    let mut args = vec!["get", "events"];
    args.extend(scope);
    args.extend(["-o", "json"]);
    let out = cluster.kubectl(&args).await?.ok()?;
    let events: serde_json::Value = serde_json::from_str(&out)?;
    Ok(events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reason"] == reason)
        .filter_map(|e| e["message"].as_str().map(str::to_owned))
        .collect())
}

/// Whether the kubelet reported pulling `image` (not finding it present), in any pod.
async fn pulled(cluster: &Cluster, image: &str) -> Result<bool> {
    let needle = format!("Successfully pulled image \"{image}\"");
    let messages = event_messages(cluster, None, "Pulled").await?;
    Ok(messages.iter().any(|m| m.contains(&needle)))
}

#[tokio::test]
async fn the_packaged_chart_installs_with_images_the_kubelet_pulls_from_a_registry_and_serves_ids()
-> Result<()> {
    let _turn = one_at_a_time().await;
    let cluster = cluster();
    let installed = installed().await?;
    assert!(
        pulled(cluster, &installed.operator).await?,
        "the kubelet pulled {} from the registry:\n{}",
        installed.operator,
        namespace_state(cluster, RELEASE_NAMESPACE).await
    );

    let out = chart_support::helm(
        cluster,
        &[
            "test",
            RELEASE,
            "--namespace",
            RELEASE_NAMESPACE,
            "--timeout",
            "3m",
        ],
    )
    .await?;
    assert!(
        out.success(),
        "helm test failed:\n{}{}",
        out.stdout,
        out.stderr
    );
    // A packaged chart without its test pod would pass `helm test` with nothing run.
    assert!(
        !out.stdout.contains("TEST SUITE: None") && out.stdout.contains("Succeeded"),
        "helm test ran the packaged chart's test pod:\n{}",
        out.stdout
    );

    // The example app, pulled from the registry too, with the sidecar the webhook injects
    // (the packaged chart's pinned sidecar, pulled).
    let ns = cluster.namespace("registry-app").await?;
    create_sequence(&ns, "orders", serde_json::json!({})).await?;
    let mut app: serde_json::Value = serde_json::from_str(&app_deployment("app", "orders", 1))?;
    let container = &mut app["spec"]["template"]["spec"]["containers"][0];
    container["image"] = installed.example_app.clone().into();
    container
        .as_object_mut()
        .context("the app's container")?
        .remove("imagePullPolicy");
    apply(cluster, &ns.name, &app.to_string()).await?;
    rollout(cluster, &ns.name, "app").await?;
    // The sidecar was first pulled for the helm test pod, the app here.
    for image in [&installed.example_app, &installed.sidecar] {
        assert!(
            pulled(cluster, image).await?,
            "the kubelet pulled {image} from the registry:\n{}",
            namespace_state(cluster, &ns.name).await
        );
    }
    let pod = first_ready_pod(&ns, "app").await?;
    let injected: Vec<String> = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.init_containers.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.image.clone())
        .collect();
    assert_eq!(
        injected,
        vec![installed.sidecar.clone()],
        "the webhook injects the packaged chart's pinned sidecar"
    );
    let ids = ids_from_pod(&ns, &pod.metadata.name.unwrap_or_default(), 100).await?;
    let unique: std::collections::BTreeSet<u64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), 100, "100 distinct IDs: {ids:?}");
    delete_namespace(cluster, &ns).await;
    Ok(())
}

#[tokio::test]
async fn a_chart_pinning_a_digest_the_registry_lacks_leaves_the_operator_pod_not_found_by_name()
-> Result<()> {
    let _turn = one_at_a_time().await;
    let cluster = cluster();
    installed().await?;
    let wrong = format!("sha256:{}", "0".repeat(64));
    let image = format!("{}@{wrong}", repository("operator"));
    let mut values = registry_values();
    values.push(format!("operator.image.digest={wrong}"));
    let value_refs: Vec<&str> = values.iter().map(String::as_str).collect();
    let mut args = vec![
        "upgrade",
        RELEASE,
        "--namespace",
        RELEASE_NAMESPACE,
        "--reuse-values",
    ];
    let chart_dir = cluster.dir().join("release");
    let chart = release_file(&chart_dir, "kubeflake-", ".tgz")?;
    let chart = chart.to_string_lossy().into_owned();
    args.insert(2, &chart);
    let sets = chart_support::set_args(&value_refs);
    args.extend(sets.iter().map(String::as_str));
    chart_support::helm(cluster, &args).await?.ok()?;

    // The new operator pod cannot start: it waits on the pull, and the kubelet's event
    // says which image and why.
    let (message, state) = eventually(LIMIT, "the missing image's pod and event", || async {
        let failed = event_messages(cluster, Some(RELEASE_NAMESPACE), "Failed").await?;
        let message = failed
            .into_iter()
            .find(|m| m.contains(&image) && m.contains("not found"));
        let pods = cluster
            .kubectl(&[
                "get",
                "pods",
                "-n",
                RELEASE_NAMESPACE,
                "-o",
                "jsonpath={range .items[*]}{.spec.containers[0].image} {.status.containerStatuses[0].state.waiting.reason}{\"\\n\"}{end}",
            ])
            .await?
            .ok()?;
        let waiting = pods
            .lines()
            .find(|l| {
                l.starts_with(&image)
                    && (l.ends_with("ErrImagePull") || l.ends_with("ImagePullBackOff"))
            })
            .map(str::to_owned);
        Ok(message.zip(waiting))
    })
    .await
    .with_context(|| format!("no clear message for the wrong digest {image}"))?;
    assert!(message.contains(&registry_host()), "{message}");
    assert!(state.starts_with(&image), "{state}");

    // Back to the release's digests, for the other test of this binary.
    chart_support::helm(
        cluster,
        &[
            "rollback",
            RELEASE,
            "1",
            "--namespace",
            RELEASE_NAMESPACE,
            "--wait",
            "--timeout",
            "5m",
        ],
    )
    .await?
    .ok()?;
    Ok(())
}

#[tokio::test]
async fn an_image_the_release_did_not_sign_is_refused_by_cosign_verify_before_install() -> Result<()>
{
    let _turn = one_at_a_time().await;
    let cluster = cluster();
    let installed = installed().await?;
    let (_, digest) = installed
        .sidecar
        .rsplit_once('@')
        .context("the sidecar's reference has a digest")?;
    // Someone with push rights puts a changed sidecar beside the release's.
    let tampered_digest =
        installed
            .registry
            .push_tampered("kubeflake/sidecar", digest, cluster.dir(), "tampered")?;
    assert_ne!(
        tampered_digest, digest,
        "the tampered copy is another image"
    );
    let tampered = format!("{}@{tampered_digest}", repository("sidecar"));
    let refused = |verdict: Verdict, what: &str| match verdict {
        Verdict::Verified => bail!("cosign verify passed {what} {tampered}"),
        Verdict::Refused(message) => Ok(message),
    };

    // Unsigned: no signature for its digest in the registry.
    let message = refused(
        installed.cosign.verify(&installed.public_key, &tampered)?,
        "the unsigned",
    )?;
    assert!(
        message.contains("no signatures found") || message.contains("no matching signatures"),
        "cosign says why it refuses the unsigned image: {message}"
    );

    // Signed, but with another key than the release's.
    let other = installed
        .cosign
        .key_pair(&cluster.dir().join("another-key"))?;
    installed.cosign.sign(&other, &tampered)?;
    assert_eq!(
        installed.cosign.verify(&other.public, &tampered)?,
        Verdict::Verified,
        "the other key's signature is in the registry (so the refusal below is the key's)"
    );
    let message = refused(
        installed.cosign.verify(&installed.public_key, &tampered)?,
        "an image signed by another key,",
    )?;
    assert!(
        message.contains("no matching signatures"),
        "cosign says why it refuses an image signed by another key: {message}"
    );

    // The release's own image still verifies beside them.
    assert_eq!(
        installed
            .cosign
            .verify(&installed.public_key, &installed.sidecar)?,
        Verdict::Verified
    );
    Ok(())
}
