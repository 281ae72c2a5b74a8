//! The kubectl plugin against a real API server: `slots` shows what the slot leases say,
//! joined with the pods, in table and json form (`--all` adds the unused slots);
//! `--sequence` reads a layout from the cluster; an unknown sequence exits 3; a Segment
//! sequence has no slots (`slots` shows its counter) and no fields to decode (exit 2); and
//! `kubectl kubeflake` finds the plugin on PATH.
//!
//! The plugin binary is `target/debug/kubectl-kubeflake` (a cargo test cannot depend on
//! another package's binary): [`plugin`] finds it, or builds it when it is missing or
//! stale, like the other workspace binaries (`operator_support::workspace_binary`).

mod operator_support;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use kubeflake_crds::segment_counter::{Counter, counter_name};
use kubeflake_crds::slot_lease::SEQUENCE_LABEL;
use kubeflake_crds::timebase::{DEFAULT_EPOCH, rfc3339};
use kubeflake_crds::{DatacenterId, IdParts, Layout, Slot, Tick, TimeUnit, Timebase};
use kubeflake_e2e::{Cluster, TestNamespace};
use operator_support::*;
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(90);
/// Upper bound for one plugin run (it talks to a local API server).
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// The plugin binary next to this test binary, built first if missing or stale.
fn plugin() -> PathBuf {
    workspace_binary("kubectl-kubeflake")
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn finish(mut command: tokio::process::Command) -> Result<Run> {
    command
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null());
    let Output {
        status,
        stdout,
        stderr,
    } = tokio::time::timeout(RUN_LIMIT, command.output())
        .await
        .context("the plugin did not finish in time")??;
    Ok(Run {
        code: status.code().context("killed by a signal")?,
        stdout: String::from_utf8(stdout)?,
        stderr: String::from_utf8(stderr)?,
    })
}

/// `kubectl-kubeflake <args>` with the test cluster's kubeconfig.
async fn run_plugin(cluster: &Cluster, args: &[&str]) -> Result<Run> {
    let mut command = tokio::process::Command::new(plugin());
    command.args(args).env("KUBECONFIG", cluster.kubeconfig());
    finish(command).await
}

/// Runs the plugin, expects exit 0, and parses its json output.
async fn plugin_json(cluster: &Cluster, args: &[&str]) -> Result<Value> {
    let r = run_plugin(cluster, args).await?;
    ensure!(r.code == 0, "{args:?}: exit {}: {}", r.code, r.stderr);
    serde_json::from_str(&r.stdout).with_context(|| format!("{args:?}: {}", r.stdout))
}

/// Pods labelled for `sequence`, each scheduled to its own (fictional) node.
async fn create_scheduled_pods(
    ns: &TestNamespace,
    sequence: &str,
    count: usize,
) -> Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let mut pods = Vec::new();
    for i in 0..count {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("app-{i}"), "labels": {SEQUENCE_LABEL: sequence}},
            "spec": {
                "nodeName": format!("node-{i}"),
                "containers": [{"name": "app", "image": "example.invalid/app"}],
            },
        }))?;
        pods.push(api.create(&PostParams::default(), &pod).await?);
    }
    Ok(pods)
}

/// Slot number -> holder UID, once `held` slots are held.
async fn holders(ns: &TestNamespace, sequence: &str, held: usize) -> Result<HashMap<u32, String>> {
    eventually(LIMIT, "the operator to fill the slots", || async {
        let leases = slot_leases(ns, sequence).await?;
        let map: HashMap<u32, String> = leases
            .iter()
            .filter_map(|l| Some((l.slot.0, l.holder.clone()?)))
            .collect();
        Ok((map.len() == held).then_some(map))
    })
    .await
}

/// A Lease time as the plugin prints it (RFC 3339 UTC, milliseconds).
fn lease_time(t: &Option<MicroTime>) -> Option<String> {
    t.as_ref()
        .and_then(|t| u64::try_from(t.0.as_millisecond()).ok())
        .map(rfc3339)
}

/// Seconds in an age cell as the plugin prints it ("45s", "3m", "2h", "5d"), rounded down.
fn age_seconds(cell: &str) -> Option<u64> {
    let unit = match cell.chars().last()? {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return None,
    };
    Some(cell[..cell.len() - 1].parse::<u64>().ok()? * unit)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_shows_each_lease_holder_with_pod_and_node_and_the_pod_left_waiting() -> Result<()> {
    let started = std::time::Instant::now();
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("plugin-slots").await?;
    let _operator = Operator::start(cluster, &ns.name, "a")?;
    // workerBits 2: four slots for five pods, so one pod waits.
    create_sequence(
        &ns,
        "orders",
        json!({"layout": {"timestampBits": 49, "workerBits": 2, "sequenceBits": 12}}),
    )
    .await?;
    let pods = create_scheduled_pods(&ns, "orders", 5).await?;
    let held = holders(&ns, "orders", 4).await?;
    let by_uid: HashMap<String, &Pod> = pods.iter().map(|p| (p.uid().unwrap(), p)).collect();
    let waiting: Vec<&Pod> = pods
        .iter()
        .filter(|p| !held.values().any(|u| Some(u) == p.uid().as_ref()))
        .collect();
    ensure!(waiting.len() == 1, "one pod waits");
    let leases = slot_leases(&ns, "orders").await?;
    // The raw leases, for the times (no sidecar runs, so nothing renews them afterwards).
    let raw: HashMap<String, Lease> = Api::<Lease>::namespaced(ns.client.clone(), &ns.name)
        .list(&ListParams::default().labels(&format!("{SEQUENCE_LABEL}=orders")))
        .await?
        .items
        .into_iter()
        .map(|l| (l.name_any(), l))
        .collect();
    let timebase = Timebase::parse(DEFAULT_EPOCH, TimeUnit::Millisecond)?;
    let fence_cell = |fence: Tick| {
        if fence == Tick(0) {
            "-".to_string()
        } else {
            rfc3339(timebase.start_of(fence))
        }
    };

    // json: every field as the leases and pods say.
    let out = plugin_json(cluster, &["slots", "orders", "-n", &ns.name, "-o", "json"]).await?;
    ensure!(out["capacity"] == 4 && out["held"] == 4, "{out}");
    ensure!(
        out["mode"] == "Snowflake" && out.get("segment").is_none(),
        "{out}"
    );
    let rows = out["slots"].as_array().context("slots array")?;
    ensure!(rows.len() == 4, "{out}");
    for lease in &leases {
        let row = rows
            .iter()
            .find(|r| r["slot"] == lease.slot.0)
            .with_context(|| format!("slot {} listed", lease.slot.0))?;
        let uid = lease.holder.clone().context("held")?;
        let pod = by_uid[&uid];
        ensure!(row["status"] == "held", "{row}");
        ensure!(row["holderUid"] == uid.as_str(), "{row}");
        ensure!(row["holderPod"] == pod.name_any().as_str(), "{row}");
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        ensure!(row["node"] == node.as_deref().unwrap_or("?"), "{row}");
        ensure!(row["fence"] == lease.fence.0, "{row}");
        ensure!(row["lease"] == lease.name.as_str(), "{row}");
        let spec = raw[&lease.name].spec.clone().context("lease spec")?;
        let renew = lease_time(&spec.renew_time).context("the operator set renewTime")?;
        let acquire = lease_time(&spec.acquire_time).context("the operator set acquireTime")?;
        ensure!(row["renewTime"] == renew.as_str(), "{row}");
        ensure!(row["acquireTime"] == acquire.as_str(), "{row}");
        ensure!(
            row["transitions"] == spec.lease_transitions.unwrap_or(0),
            "{row}"
        );
        let fence_time = fence_cell(lease.fence);
        if lease.fence == Tick(0) {
            ensure!(row["fenceTime"].is_null(), "{row}");
        } else {
            ensure!(row["fenceTime"] == fence_time.as_str(), "{row}");
        }
        ensure!(row["releasedAt"].is_null(), "never released: {row}");
    }
    let listed_waiting = out["waiting"].as_array().context("waiting array")?;
    ensure!(listed_waiting.len() == 1, "{out}");
    ensure!(
        listed_waiting[0]["pod"] == waiting[0].name_any().as_str(),
        "{out}"
    );

    // table: one row per slot with its holder, and the waiting pod below.
    let r = run_plugin(cluster, &["slots", "orders", "-n", &ns.name]).await?;
    ensure!(r.code == 0, "exit {}: {}", r.code, r.stderr);
    ensure!(
        r.stdout.contains("4 slots, 4 held, 1 pod waiting"),
        "{}",
        r.stdout
    );
    let header: Vec<&str> = r
        .stdout
        .lines()
        .find(|l| l.starts_with("SLOT"))
        .context("a header row")?
        .split("   ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    ensure!(
        header
            == [
                "SLOT",
                "STATUS",
                "POD",
                "NODE",
                "FENCE",
                "LAST RENEWAL",
                "AGE"
            ],
        "{header:?}"
    );
    // Every lease was written in this test, so no age can exceed the test's run time.
    let elapsed = started.elapsed().as_secs() + 1;
    for (slot, uid) in &held {
        let pod = by_uid[uid];
        let line = r
            .stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(slot.to_string().as_str()))
            .with_context(|| format!("a row for slot {slot}: {}", r.stdout))?;
        // SLOT STATUS POD NODE FENCE <n>s ago AGE: "LAST RENEWAL" is two words.
        let cells: Vec<&str> = line.split_whitespace().collect();
        ensure!(cells.len() == 8, "{line}");
        ensure!(cells[1] == "held" && cells[2] == pod.name_any(), "{line}");
        ensure!(
            cells[3] == format!("node-{}", &pod.name_any()[4..]),
            "{line}"
        );
        let lease = leases
            .iter()
            .find(|l| l.slot.0 == *slot)
            .context("lease of the slot")?;
        ensure!(cells[4] == fence_cell(lease.fence), "FENCE: {line}");
        ensure!(cells[6] == "ago", "LAST RENEWAL: {line}");
        for cell in [cells[5], cells[7]] {
            let secs = age_seconds(cell).with_context(|| format!("an age: {line}"))?;
            ensure!(secs <= elapsed, "{cell} is older than the test: {line}");
        }
    }
    let after = r
        .stdout
        .split("Waiting for a slot:")
        .nth(1)
        .context("a waiting section")?;
    ensure!(after.contains(&waiting[0].name_any()), "{}", r.stdout);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_finds_the_plugin_on_path_and_an_unknown_sequence_exits_3() -> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("plugin-path").await?;
    let _operator = Operator::start(cluster, &ns.name, "a")?;
    create_sequence(&ns, "orders", json!({})).await?;
    let pods = create_pods(&ns, "orders", "app", 2).await?;
    let uids: Vec<String> = pods.iter().map(|p| p.uid().unwrap()).collect();
    let assigned = all_assigned(&ns, "orders", &uids, LIMIT).await?;

    let plugin_dir = plugin().parent().context("plugin dir")?.to_path_buf();
    let path = std::env::join_paths(
        [plugin_dir, cluster.bin_dir().to_path_buf()]
            .into_iter()
            .chain(std::env::split_paths(
                &std::env::var_os("PATH").unwrap_or_default(),
            )),
    )?;
    let kubectl = |args: &[&str]| {
        let mut command = tokio::process::Command::new(cluster.kubectl_path());
        command
            .args(args)
            .env("KUBECONFIG", cluster.kubeconfig())
            .env("PATH", &path);
        finish(command)
    };
    let listed = kubectl(&["plugin", "list"]).await?;
    ensure!(
        listed.stdout.contains("kubectl-kubeflake"),
        "{}{}",
        listed.stdout,
        listed.stderr
    );

    let r = kubectl(&["kubeflake", "slots", "orders", "-n", &ns.name, "-o", "json"]).await?;
    ensure!(r.code == 0, "exit {}: {}", r.code, r.stderr);
    let out: Value = serde_json::from_str(&r.stdout)?;
    let shown: HashMap<String, u64> = out["slots"]
        .as_array()
        .context("slots")?
        .iter()
        .filter_map(|s| Some((s["holderUid"].as_str()?.to_string(), s["slot"].as_u64()?)))
        .collect();
    for (uid, slot) in &assigned {
        ensure!(shown.get(uid) == Some(&u64::from(*slot)), "{uid}: {out}");
    }
    ensure!(
        out["slots"].as_array().map(Vec::len) == Some(2),
        "without --all only leased slots: {out}"
    );

    // --all: every one of the 1024 slots once, the two held ones and the rest unused.
    let all = plugin_json(
        cluster,
        &["slots", "orders", "--all", "-n", &ns.name, "-o", "json"],
    )
    .await?;
    let rows = all["slots"].as_array().context("slots")?;
    let numbers: Vec<u64> = rows.iter().filter_map(|r| r["slot"].as_u64()).collect();
    ensure!(
        numbers == (0..1024).collect::<Vec<u64>>(),
        "slots 0..1024 in order"
    );
    for row in rows {
        let held_here = assigned
            .iter()
            .any(|(uid, slot)| row["slot"] == *slot && row["holderUid"] == uid.as_str());
        let expected = if held_here { "held" } else { "unused" };
        ensure!(row["status"] == expected, "{row}");
        if !held_here {
            ensure!(
                row["lease"] == format!("orders-slot-{}", row["slot"]) && row["fence"] == 0,
                "{row}"
            );
        }
    }
    ensure!(all["held"] == 2 && all["capacity"] == 1024, "{all}");

    let r = kubectl(&["kubeflake", "slots", "missing", "-n", &ns.name]).await?;
    ensure!(r.code == 3, "exit {}: {}", r.code, r.stderr);
    let expected = format!("idsequence missing not found in namespace {}", ns.name);
    ensure!(r.stderr.contains(&expected), "{}", r.stderr);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_completes_the_plugins_commands_and_flags_through_kubectl_complete_kubeflake()
-> Result<()> {
    let cluster = Cluster::shared();
    // What docs/kubectl-plugin.md tells users to do: link the plugin under the completer's
    // name somewhere on PATH.
    let links = tempfile::tempdir()?;
    std::os::unix::fs::symlink(plugin(), links.path().join("kubectl_complete-kubeflake"))?;
    let plugin_dir = plugin().parent().context("plugin dir")?.to_path_buf();
    let path = std::env::join_paths([links.path().to_path_buf(), plugin_dir].into_iter().chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))?;
    let complete = |words: &[&str]| {
        let mut command = tokio::process::Command::new(cluster.kubectl_path());
        command
            .arg("__complete")
            .arg("kubeflake")
            .args(words)
            .env("KUBECONFIG", cluster.kubeconfig())
            .env("PATH", &path);
        finish(command)
    };
    let candidates = |r: &Run| -> Vec<String> {
        r.stdout
            .lines()
            .map(|l| l.split('\t').next().unwrap_or_default().to_string())
            .collect()
    };
    let r = complete(&["pl"]).await?;
    ensure!(r.code == 0, "exit {}: {}", r.code, r.stderr);
    ensure!(candidates(&r) == ["plan", ":4"], "{}{}", r.stdout, r.stderr);
    let r = complete(&["plan", "--repl"]).await?;
    ensure!(
        candidates(&r) == ["--replicas", ":4"],
        "{}{}",
        r.stdout,
        r.stderr
    );
    let r = complete(&["decode", "-o", ""]).await?;
    ensure!(
        candidates(&r) == ["table", "json", "yaml", ":4"],
        "{}{}",
        r.stdout,
        r.stderr
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decode_and_compose_read_the_layout_of_a_sequence_in_the_cluster() -> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("plugin-layout").await?;
    create_sequence(
        &ns,
        "dc",
        json!({
            "layout": {"timestampBits": 39, "datacenterBits": 5, "workerBits": 5, "sequenceBits": 14},
            "timeUnit": "1s", "epoch": "2020-01-01T00:00:00Z", "datacenterId": 17,
        }),
    )
    .await?;
    let layout = Layout::new(39, 5, 5, 14, 63)?;
    let parts = IdParts {
        tick: Tick(1_000_000),
        datacenter: DatacenterId(17),
        slot: Slot(30),
        sequence: 9_999,
    };
    let id = layout.encode(parts)?.to_string();
    let from_cluster = ["--sequence", "dc", "-n", &ns.name, "-o", "json"];
    let out = plugin_json(cluster, &[&["decode", &id][..], &from_cluster].concat()).await?;
    let d = &out["ids"][0];
    ensure!(
        d["tick"] == 1_000_000
            && d["datacenter"] == 17
            && d["worker"] == 30
            && d["sequence"] == 9_999,
        "{out}"
    );
    // Tick 1,000,000 of one second after 2020-01-01T00:00:00Z: 11 days, 13:46:40 later.
    ensure!(d["time"] == "2020-01-12T13:46:40.000Z", "{out}");
    ensure!(
        out["layout"]["source"] == format!("idsequence {}/dc", ns.name),
        "{out}"
    );

    let compose = ["compose", "--time", "2020-01-12T13:46:40.500Z"];
    let out = plugin_json(cluster, &[&compose[..], &from_cluster].concat()).await?;
    let (lo, hi) = layout.id_range_of_tick(Tick(1_000_000))?;
    ensure!(
        out["min"] == lo.to_string().as_str() && out["max"] == hi.to_string().as_str(),
        "{out}"
    );

    let r = run_plugin(
        cluster,
        &["decode", "1", "--sequence", "nope", "-n", &ns.name],
    )
    .await?;
    if r.code != 3 {
        bail!("an unknown sequence exits 3, got {}: {}", r.code, r.stderr);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_sequence_has_no_slots_so_slots_shows_its_counter_and_decode_exits_2()
-> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("plugin-segment").await?;
    let _operator = Operator::start(cluster, &ns.name, "a")?;
    create_sequence(
        &ns,
        "invoices",
        json!({"mode": "Segment", "segment": {"start": 1000, "blockSize": 500}}),
    )
    .await?;
    create_pods(&ns, "invoices", "app", 2).await?;
    // The operator creates the counter at start; then a "sidecar" claims one block by CAS.
    // As a sidecar does (docs/safety.md rule 1), a conflict means read again and claim
    // again: the operator may write the counter meanwhile (its list of claimant pods).
    let leases: Api<Lease> = Api::namespaced(ns.client.clone(), &ns.name);
    let name = counter_name("invoices");
    let claimed = eventually(LIMIT, "a block claimed from the counter", || async {
        let Some(lease) = leases.get_opt(&name).await? else {
            return Ok(None); // the operator has not created it yet
        };
        let counter = Counter::parse(&lease)?;
        ensure!(counter.next == 1000, "next = start: {counter:?}");
        let claimed = Counter {
            next: 1500,
            claims: counter.claims + 1,
            ..counter
        };
        match leases
            .replace(&name, &PostParams::default(), &claimed.write_into(lease))
            .await
        {
            Ok(_) => Ok(Some(claimed)),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
            Err(e) => Err(e.into()),
        }
    })
    .await?;

    let out = plugin_json(
        cluster,
        &["slots", "invoices", "-n", &ns.name, "-o", "json"],
    )
    .await?;
    ensure!(out["mode"] == "Segment", "{out}");
    ensure!(out["capacity"] == 0 && out["held"] == 0, "{out}");
    ensure!(
        out["slots"] == json!([]) && out["waiting"] == json!([]),
        "no slots, and labelled pods do not wait for one: {out}"
    );
    let seg = &out["segment"];
    ensure!(seg["counterLease"] == name.as_str(), "{out}");
    ensure!(
        seg["next"] == 1500 && seg["blocksClaimed"] == claimed.claims,
        "the live counter: {out}"
    );
    ensure!(
        seg["start"] == 1000 && seg["blockSize"] == 500 && seg["maxBlockSize"] == 500,
        "{out}"
    );
    ensure!(seg["pods"] == 2, "{out}");

    let r = run_plugin(cluster, &["slots", "invoices", "-n", &ns.name, "--all"]).await?;
    ensure!(r.code == 0, "exit {}: {}", r.code, r.stderr);
    let intro = format!(
        "idsequence {}/invoices is a Segment sequence: it has no worker slots",
        ns.name
    );
    ensure!(r.stdout.starts_with(&intro), "{}", r.stdout);
    let next_line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("NEXT VALUE"))
        .context("a NEXT VALUE line")?;
    ensure!(
        next_line.split_whitespace().nth(2) == Some("1500"),
        "{next_line}"
    );
    ensure!(
        r.stdout.contains(&format!("COUNTER LEASE    {name}")),
        "{}",
        r.stdout
    );
    ensure!(!r.stdout.contains("SLOT"), "no slot table: {}", r.stdout);

    // Counter values are not Snowflake IDs: nothing to decode, compose or plan.
    let from_cluster = ["--sequence", "invoices", "-n", &ns.name];
    for head in [
        &["decode", "1200"][..],
        &["compose", "--time", "now"][..],
        &["plan"][..],
    ] {
        let r = run_plugin(cluster, &[head, &from_cluster].concat()).await?;
        ensure!(r.code == 2, "{head:?}: exit {}: {}", r.code, r.stderr);
        ensure!(r.stdout.is_empty(), "no invented fields: {}", r.stdout);
        let expected = format!(
            "error: idsequence {}/invoices is a Segment sequence: its values are plain counter \
             values with no time, datacenter, worker or sequence fields",
            ns.name
        );
        ensure!(r.stderr.starts_with(&expected), "{head:?}: {}", r.stderr);
        ensure!(
            r.stderr.contains(&format!(
                "`kubectl kubeflake slots invoices -n {}` shows its counter",
                ns.name
            )),
            "{}",
            r.stderr
        );
    }
    Ok(())
}
