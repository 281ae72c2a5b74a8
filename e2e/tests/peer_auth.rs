//! Peers of a strict sequence prove who they are on the oracle port (docs/safety.md rule
//! 16, issue 54), with the API server's real tokens: TokenRequest bound to pod objects,
//! for the oracle's audience, as the projected volume the webhook injects would hold them
//! (`sidecar_support::oracle_token`), checked by the sidecars against the control plane's
//! own keys (`/.well-known/openid-configuration`, `/openid/v1/jwks`).
//!
//! Two `kubeflake-sidecar cluster` processes carrying pod identities serve a strict
//! sequence through its oracle; strangers then speak the oracle's wire format to its port
//! with no token, with a token of the right audience bound to a pod of another sequence
//! (not a claimant), and with a token of the API server's own audience bound to a pod of
//! the sequence: each gets one refusal and no welcome, the counter does not move, and
//! the oracle counts each refusal by reason. Control plane only, no node.
//!
//! `cargo test -p kubeflake-e2e --test peer_auth -- --nocapture`

mod operator_support;
mod sidecar_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use kubeflake_crds::segment_counter::{Counter, counter_name};
use kubeflake_crds::strict_oracle::wire::{ForwardRequest, Hello};
use kubeflake_crds::strict_oracle::{ADDRESS_ANNOTATION, oracle_name};
use kubeflake_e2e::{Cluster, TestNamespace, exposition};
use operator_support::*;
use serde_json::json;
use sidecar_support::{Sidecar, get, oracle_token};

const SEQUENCE: &str = "orders";

async fn counter_next(ns: &TestNamespace) -> Result<u64> {
    let api: Api<Lease> = Api::namespaced(ns.client.clone(), &ns.name);
    Ok(Counter::parse(&api.get(&counter_name(SEQUENCE)).await?)?.next)
}

/// The oracle Lease's holder and address, once it names one of `sidecars`.
async fn oracle(ns: &TestNamespace, sidecars: &[Sidecar]) -> Result<(usize, String)> {
    let api: Api<Lease> = Api::namespaced(ns.client.clone(), &ns.name);
    eventually(Duration::from_secs(60), "an oracle serves", || async {
        let Some(lease) = api.get_opt(&oracle_name(SEQUENCE)).await? else {
            return Ok(None);
        };
        let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
        let address = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ADDRESS_ANNOTATION).cloned());
        let index = sidecars
            .iter()
            .position(|s| Some(&s.uid) == holder.as_ref());
        Ok(index.zip(address))
    })
    .await
}

/// One strict value from `sidecar`'s ID API (retried while it answers 503, bounded).
async fn value(sidecar: &Sidecar) -> Result<u64> {
    eventually(Duration::from_secs(30), "a strict value", || async {
        let (status, body) = get(sidecar.port, "/id")?;
        if status != 200 {
            return Ok(None);
        }
        Ok(Some(body.trim().parse::<u64>().context("a value")?))
    })
    .await
}

/// What the oracle port answered a stranger's hello and first request.
#[derive(Debug)]
enum Answer {
    Refused { status: u16, message: String },
    Welcomed,
    Values,
    Closed,
}

/// Speaks the wire format to the oracle at `address` with `token`: hello, one request.
fn knock(address: &str, token: &str) -> Result<Answer> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut bytes = Hello {
        sequence: SEQUENCE.into(),
        token: token.into(),
    }
    .encode()?;
    bytes.extend_from_slice(&ForwardRequest { count: 1, min: 0 }.encode());
    stream.write_all(&bytes)?;
    let mut tag = [0u8; 1];
    if stream.read(&mut tag)? == 0 {
        return Ok(Answer::Closed);
    }
    Ok(match tag[0] {
        1 => {
            let mut head = [0u8; 4];
            stream.read_exact(&mut head)?;
            let status = u16::from_be_bytes([head[0], head[1]]);
            let mut text = vec![0u8; usize::from(u16::from_be_bytes([head[2], head[3]]))];
            stream.read_exact(&mut text)?;
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest);
            ensure!(rest.is_empty(), "bytes after the refusal: {rest:?}");
            Answer::Refused {
                status,
                message: String::from_utf8_lossy(&text).into_owned(),
            }
        }
        2 => Answer::Welcomed,
        0 => Answer::Values,
        other => bail!("tag {other}"),
    })
}

/// `kubectl create token` for the pod's account, bound to it, for `audience` (`None`: the
/// API server's own).
async fn token_for(
    cluster: &Cluster,
    ns: &str,
    pod: &Pod,
    audience: Option<&str>,
) -> Result<String> {
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let (name, uid) = (pod.name_any(), pod.uid().context("a uid")?);
    let mut args = vec!["create", "token", &account, "-n", ns, "--duration=1h"];
    args.extend(["--bound-object-kind", "Pod", "--bound-object-name", &name]);
    args.extend(["--bound-object-uid", &uid]);
    if let Some(audience) = audience {
        args.extend(["--audience", audience]);
    }
    Ok(cluster.kubectl(&args).await?.ok()?.trim().to_string())
}

fn refusals(port: u16, reason: &str) -> f64 {
    get(port, "/metrics")
        .ok()
        .and_then(|(_, text)| {
            exposition::value_with(
                &text,
                "kubeflake_strict_peer_refusals_total",
                &format!("reason=\"{reason}\""),
            )
        })
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule16_only_pods_of_the_sequence_are_served_by_its_oracle_with_the_api_servers_real_tokens()
-> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("peer-auth").await?;
    let _operator = Operator::start(cluster, &ns.name, "a")?;
    // The ClusterRoleBinding that lets every account read the keys the sidecars check with.
    cluster
        .kubectl(&[
            "get",
            "clusterrolebinding",
            "system:service-account-issuer-discovery",
        ])
        .await?
        .ok()
        .context("Kubernetes' default RBAC binds the issuer discovery role")?;
    for name in [SEQUENCE, "other"] {
        let spec = json!({"mode": "Segment", "segment": {"strict": true}});
        create_sequence(&ns, name, spec).await?;
    }
    let pods = create_pods(&ns, SEQUENCE, "app", 2).await?;
    let stranger_pod = create_pods(&ns, "other", "other", 1).await?.remove(0);
    let sidecars = Sidecar::start_all_ready(cluster, &ns.name, &pods, SEQUENCE).await?;
    let (o, address) = oracle(&ns, &sidecars).await?;
    let forwarder = &sidecars[1 - o];
    eprintln!(
        "the oracle is {} at {address}; {} forwards; logs in {}",
        sidecars[o].pod,
        forwarder.pod,
        cluster.dir().display()
    );

    // Both serve, the forwarder through the oracle (its welcome and token checked).
    let mut last = 0;
    for s in [&sidecars[o], forwarder, &sidecars[o], forwarder] {
        let v = value(s).await?;
        ensure!(v > last, "{v} after {last}");
        last = v;
    }
    let next = counter_next(&ns).await?;

    let ns_name = ns.name.as_str();
    let strangers = [
        ("no token", String::new(), 401, "no_token"),
        (
            "a token bound to a pod of another sequence",
            oracle_token(cluster, ns_name, &stranger_pod)?,
            503,
            "not_claimant",
        ),
        (
            "a token of the API server's audience bound to a pod of the sequence",
            token_for(cluster, ns_name, &pods[1 - o], None).await?,
            401,
            "audience",
        ),
    ];
    for (what, token, status, reason) in &strangers {
        match knock(&address, token)? {
            Answer::Refused {
                status: got,
                message,
            } => {
                ensure!(got == *status, "{what}: {got} {message}");
                eprintln!("{what}: refused {got}: {message}");
            }
            other => bail!("{what}: {other:?}, not a refusal"),
        }
        let counted = refusals(sidecars[o].port, reason);
        ensure!(
            counted >= 1.0,
            "{what}: not counted as {reason} ({counted})"
        );
    }
    ensure!(
        counter_next(&ns).await? == next,
        "the counter moved for strangers"
    );
    // And the sequence serves on, above every value before.
    for s in [forwarder, &sidecars[o]] {
        let v = value(s).await?;
        ensure!(v > last, "{v} after {last}");
        last = v;
    }
    Ok(())
}
