//! The IdSequence CRD against a real API server: it installs, documents itself, shows its
//! printer columns, and the API server itself (OpenAPI schema + CEL rules) rejects
//! invalid and immutable-field-changing objects with a message naming the field.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kubeflake_crds::IdSequence;
use kubeflake_e2e::{Cluster, TestNamespace};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

const CRD_NAME: &str = "idsequences.kubeflake.io";

/// `crds/idsequence.yaml` as checked in; generated from the Rust types when it is not
/// there yet (e.g. on a branch that has not regenerated it). `KUBEFLAKE_E2E_CRD=<file>`
/// tests another file, for example a candidate fix.
fn crd_file(cluster: &Cluster) -> PathBuf {
    if let Some(file) = std::env::var_os("KUBEFLAKE_E2E_CRD") {
        return PathBuf::from(file);
    }
    let checked_in = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crds/idsequence.yaml");
    if checked_in.is_file() {
        return checked_in;
    }
    let generated = cluster.dir().join("idsequence.yaml");
    std::fs::write(&generated, kubeflake_crds::crd_yaml()).expect("cannot write the generated CRD");
    eprintln!(
        "crds/idsequence.yaml is missing; testing the CRD generated from kubeflake-crds instead"
    );
    generated
}

/// Installs the CRD once per test binary and waits until it is Established.
async fn cluster_with_crd() -> &'static Cluster {
    static INSTALLED: OnceCell<()> = OnceCell::const_new();
    let cluster = Cluster::shared();
    INSTALLED
        .get_or_try_init(|| async {
            let file = crd_file(cluster);
            let file = file.to_string_lossy();
            cluster
                .kubectl(&["apply", "--server-side", "-f", &file])
                .await?
                .ok()
                .context("kubectl apply of the CRD")?;
            cluster
                .wait_crd_established(CRD_NAME)
                .await
                .context("waiting for the CRD to be Established")?;
            // The API server publishes the CRD's OpenAPI (what `kubectl explain` reads)
            // a moment after Established.
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let explain = cluster.kubectl(&["explain", "idsequence"]).await?;
                if explain.success() {
                    break;
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "OpenAPI for the CRD not published: {}",
                    explain.stderr
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            anyhow::Ok(())
        })
        .await
        .expect("cannot install the IdSequence CRD");
    cluster
}

/// An untyped API for IdSequences, so tests can send what the Rust types cannot hold
/// (such as an unknown time unit).
fn sequences(ns: &TestNamespace) -> Api<DynamicObject> {
    Api::namespaced_with(
        ns.client.clone(),
        &ns.name,
        &ApiResource::erase::<IdSequence>(&()),
    )
}

fn object(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kubeflake.io/v1alpha1",
        "kind": "IdSequence",
        "metadata": { "name": name },
        "spec": spec,
    }))
    .expect("a valid IdSequence object")
}

/// The API server's message when it refused the request, or None if it accepted it.
fn rejection<T>(result: kube::Result<T>) -> Result<Option<String>> {
    match result {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(status)) => Ok(Some(status.message)),
        Err(e) => Err(e.into()),
    }
}

#[tokio::test]
async fn crd_is_established_and_explained() -> Result<()> {
    let cluster = cluster_with_crd().await;
    let explain = cluster
        .kubectl(&["explain", "idsequence.spec.layout"])
        .await?
        .ok()?;
    for expected in [
        "How the 63 bits of an ID are split",
        "timestampBits",
        "datacenterBits",
        "workerBits",
        "sequenceBits",
        "totalBits",
    ] {
        assert!(
            explain.contains(expected),
            "`kubectl explain idsequence.spec.layout` lacks {expected:?}:\n{explain}"
        );
    }
    let field = cluster
        .kubectl(&["explain", "idsequence.spec.layout.workerBits"])
        .await?
        .ok()?;
    assert!(
        field.contains("2^workerBits slots"),
        "workerBits docs missing:\n{field}"
    );
    Ok(())
}

#[tokio::test]
async fn valid_sequence_is_accepted_and_listed_with_printer_columns() -> Result<()> {
    let cluster = cluster_with_crd().await;
    let ns = cluster.namespace("crd-valid").await?;
    let manifest = format!(
        "apiVersion: kubeflake.io/v1alpha1
kind: IdSequence
metadata:
  name: orders
  namespace: {}
spec:
  timeUnit: 10ms
  layout:
    timestampBits: 40
    datacenterBits: 2
    workerBits: 9
    sequenceBits: 12
  datacenterId: 3
",
        ns.name
    );
    cluster
        .kubectl_with_stdin(&["apply", "--server-side", "-f", "-"], Some(&manifest))
        .await?
        .ok()?;

    // An empty spec is valid too: every field has a default.
    sequences(&ns)
        .create(&PostParams::default(), &object("defaults", json!({})))
        .await?;
    let typed: Api<IdSequence> = Api::namespaced(ns.client.clone(), &ns.name);
    let defaults = typed.get("defaults").await?;
    assert_eq!(
        defaults.spec,
        kubeflake_crds::IdSequenceSpec::default(),
        "API server defaults differ from the Rust defaults"
    );
    let orders = typed.get("orders").await?;
    assert_eq!(orders.spec.layout.timestamp_bits, 40);
    assert_eq!(orders.spec.datacenter_id, 3);

    let table = cluster
        .kubectl(&["get", "idseq", "-n", &ns.name])
        .await?
        .ok()?;
    let header = table.lines().next().unwrap_or_default();
    for column in [
        "NAME",
        "CAPACITY",
        "ASSIGNED",
        "READY",
        "EXHAUSTS AT",
        "AGE",
    ] {
        assert!(
            header.contains(column),
            "`kubectl get idseq` has no {column} column:\n{table}"
        );
    }
    assert!(
        table.contains("orders") && table.contains("defaults"),
        "objects missing:\n{table}"
    );
    Ok(())
}

/// One invalid object: what to send and what the API server's message must mention.
struct Invalid {
    case: &'static str,
    spec: Value,
    expect: &'static [&'static str],
}

#[tokio::test]
async fn invalid_sequences_are_rejected_naming_the_field() -> Result<()> {
    let cluster = cluster_with_crd().await;
    let ns = cluster.namespace("crd-invalid").await?;
    let layout = |t: i64, d: i64, w: i64, s: i64| json!({ "timestampBits": t, "datacenterBits": d, "workerBits": w, "sequenceBits": s });
    let cases = [
        Invalid {
            case: "bits add up to 61, not 63",
            spec: json!({ "layout": layout(41, 0, 10, 10) }),
            expect: &[
                "spec.layout",
                "must add up to totalBits (63)",
                "add up to 61",
            ],
        },
        Invalid {
            case: "timestampBits 70 (above 55)",
            spec: json!({ "layout": layout(70, 0, 1, 0) }),
            expect: &["spec.layout.timestampBits", "55"],
        },
        Invalid {
            case: "workerBits 0 (below 1)",
            spec: json!({ "layout": layout(41, 0, 0, 22) }),
            expect: &["spec.layout.workerBits"],
        },
        Invalid {
            case: "sequenceBits -1",
            spec: json!({ "layout": layout(41, 0, 10, -1) }),
            expect: &["spec.layout.sequenceBits"],
        },
        Invalid {
            case: "datacenterBits 11 (above 10)",
            spec: json!({ "layout": layout(40, 11, 1, 11) }),
            expect: &["spec.layout.datacenterBits"],
        },
        Invalid {
            case: "datacenterId 4 with datacenterBits 2",
            spec: json!({ "layout": layout(41, 2, 8, 12), "datacenterId": 4 }),
            expect: &["spec.datacenterId", "datacenterBits"],
        },
        Invalid {
            case: "datacenterId 1 with datacenterBits 0 (the default)",
            spec: json!({ "datacenterId": 1 }),
            expect: &["spec.datacenterId"],
        },
        Invalid {
            case: "datacenterId -1",
            spec: json!({ "datacenterId": -1 }),
            expect: &["spec.datacenterId"],
        },
        Invalid {
            case: "timeUnit 5ms",
            spec: json!({ "timeUnit": "5ms" }),
            expect: &["spec.timeUnit", "5ms"],
        },
        Invalid {
            case: "epoch that is not RFC 3339",
            spec: json!({ "epoch": "yesterday" }),
            expect: &["spec.epoch", "RFC 3339"],
        },
        Invalid {
            case: "epoch before 1970",
            spec: json!({ "epoch": "1969-12-31T23:59:59Z" }),
            expect: &["spec.epoch"],
        },
        Invalid {
            case: "shardBits 4 without taking them from the timestamp",
            spec: json!({ "layout": { "shardBits": 4 } }),
            expect: &[
                "spec.layout",
                "+ shardBits must add up to totalBits (63)",
                "add up to 67",
            ],
        },
        Invalid {
            case: "shardBits 11 (above 10)",
            spec: json!({ "layout": { "timestampBits": 30, "shardBits": 11 } }),
            expect: &["spec.layout.shardBits", "10"],
        },
        Invalid {
            case: "shardBits and bitReversed together",
            spec: json!({ "layout": { "timestampBits": 37, "shardBits": 4, "bitReversed": true } }),
            expect: &["spec.layout", "choose one"],
        },
        Invalid {
            case: "sequenceStart Rotating without sequence bits",
            spec: json!({ "layout": { "timestampBits": 53, "sequenceBits": 0, "sequenceStart": "Rotating" } }),
            expect: &["spec.layout", "sequenceBits above 0"],
        },
        Invalid {
            case: "sequenceStart Random (not a start)",
            spec: json!({ "layout": { "sequenceStart": "Random" } }),
            expect: &["spec.layout.sequenceStart", "Rotating"],
        },
        Invalid {
            case: "totalBits 60",
            spec: json!({ "layout": { "timestampBits": 38, "datacenterBits": 0, "workerBits": 10, "sequenceBits": 12, "totalBits": 60 } }),
            expect: &["spec.layout.totalBits"],
        },
    ];

    let api = sequences(&ns);
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let name = format!("invalid-{i}");
        let message = rejection(
            api.create(&PostParams::default(), &object(&name, case.spec.clone()))
                .await,
        )?;
        match message {
            None => failures.push(format!(
                "{}: ACCEPTED, but should be rejected (spec {})",
                case.case, case.spec
            )),
            Some(message) => {
                eprintln!("{}: rejected: {message}", case.case);
                let missing: Vec<_> = case
                    .expect
                    .iter()
                    .filter(|e| !message.contains(**e))
                    .collect();
                if !missing.is_empty() {
                    failures.push(format!(
                        "{}: rejected, but the message lacks {missing:?}: {message}",
                        case.case
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} invalid IdSequences were not rejected as expected:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    Ok(())
}

/// One forbidden change: a merge patch and what the API server's message must mention.
struct Change {
    case: &'static str,
    patch: Value,
    expect: &'static [&'static str],
}

#[tokio::test]
async fn identity_fields_are_immutable() -> Result<()> {
    let cluster = cluster_with_crd().await;
    let ns = cluster.namespace("crd-immutable").await?;
    let api = sequences(&ns);
    let original = json!({
        "layout": { "timestampBits": 41, "datacenterBits": 1, "workerBits": 9, "sequenceBits": 12 },
        "datacenterId": 0,
        "timeUnit": "1ms",
        "epoch": "2025-01-01T00:00:00Z",
    });
    api.create(&PostParams::default(), &object("stable", original))
        .await?;

    let cases = [
        Change {
            case: "layout changed (valid on its own)",
            patch: json!({ "spec": { "layout": { "workerBits": 8, "sequenceBits": 13 } } }),
            expect: &["spec.layout", "layout is immutable"],
        },
        Change {
            case: "a key form turned on later (bit reversal)",
            patch: json!({ "spec": { "layout": { "bitReversed": true } } }),
            expect: &["spec.layout", "layout is immutable"],
        },
        Change {
            case: "a key form turned on later (rotating sequence start)",
            patch: json!({ "spec": { "layout": { "sequenceStart": "Rotating" } } }),
            expect: &["spec.layout", "layout is immutable"],
        },
        Change {
            case: "epoch changed",
            patch: json!({ "spec": { "epoch": "2024-01-01T00:00:00Z" } }),
            expect: &["spec.epoch", "epoch is immutable"],
        },
        Change {
            case: "timeUnit changed",
            patch: json!({ "spec": { "timeUnit": "10ms" } }),
            expect: &["spec.timeUnit", "timeUnit is immutable"],
        },
        Change {
            case: "datacenterId changed (still fits)",
            patch: json!({ "spec": { "datacenterId": 1 } }),
            expect: &["spec.datacenterId", "datacenterId is immutable"],
        },
    ];
    let mut failures = Vec::new();
    for case in &cases {
        let result = api
            .patch(
                "stable",
                &PatchParams::default(),
                &Patch::Merge(&case.patch),
            )
            .await;
        match rejection(result)? {
            None => failures.push(format!(
                "{}: ACCEPTED, but should be rejected (patch {})",
                case.case, case.patch
            )),
            Some(message) => {
                eprintln!("{}: rejected: {message}", case.case);
                let missing: Vec<_> = case
                    .expect
                    .iter()
                    .filter(|e| !message.contains(**e))
                    .collect();
                if !missing.is_empty() {
                    failures.push(format!(
                        "{}: rejected, but the message lacks {missing:?}: {message}",
                        case.case
                    ));
                }
            }
        }
    }

    // Mutable fields still change.
    let allowed = json!({ "spec": { "lease": { "durationSeconds": 60 }, "clock": { "maxDriftMillis": 500 } } });
    if let Some(message) = rejection(
        api.patch("stable", &PatchParams::default(), &Patch::Merge(&allowed))
            .await,
    )? {
        failures.push(format!(
            "changing lease and clock settings was rejected: {message}"
        ));
    }
    assert!(
        failures.is_empty(),
        "immutability is not enforced as expected:\n{}",
        failures.join("\n")
    );
    Ok(())
}

#[tokio::test]
async fn every_key_form_is_accepted_and_kept_as_written() -> Result<()> {
    let cluster = cluster_with_crd().await;
    let ns = cluster.namespace("crd-key-forms").await?;
    let api = sequences(&ns);
    let forms = [
        ("sharded", json!({ "timestampBits": 37, "shardBits": 4 })),
        ("reversed", json!({ "bitReversed": true })),
        ("rotating", json!({ "sequenceStart": "Rotating" })),
        (
            "sharded-rotating-js",
            json!({ "timestampBits": 33, "workerBits": 7, "sequenceBits": 10, "totalBits": 53, "shardBits": 3, "sequenceStart": "Rotating" }),
        ),
    ];
    for (name, layout) in forms {
        let created = api
            .create(
                &PostParams::default(),
                &object(name, json!({ "layout": layout.clone() })),
            )
            .await?;
        let stored = &created.data["spec"]["layout"];
        for (field, value) in layout.as_object().expect("an object") {
            assert_eq!(&stored[field], value, "{name}: {field} kept");
        }
        let spec: kubeflake_crds::IdSequenceSpec =
            serde_json::from_value(created.data["spec"].clone())?;
        let params = spec.params()?;
        assert!(
            !params.layout.is_time_ordered(),
            "{name}: read back as a key form"
        );
    }
    Ok(())
}
