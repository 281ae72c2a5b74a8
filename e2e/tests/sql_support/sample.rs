//! IDs of a running sidecar for each layout, with the sidecar's own `/decode` of every one:
//! the truth the SQL functions are compared with.
//!
//! Per layout, two standalone sidecars (worker 1 and the largest worker slot, so a mask
//! one bit short shows) read the same IdSequence file and issue 5,000 IDs each in batches
//! of 100 a few milliseconds apart, so the IDs span many ticks. Samples are cached for the
//! test binary: the three databases get the same IDs.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::BufReader;
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use kubeflake_crds::sequence::SequenceParams;
use kubeflake_e2e::process::{Process, ProcessSpec, remove_dir_at_exit};

use crate::operator_support::{free_port, workspace_binary};
use crate::sidecar_support::{get, request};

/// IDs per sidecar, two sidecars per layout.
const PER_WORKER: usize = 5_000;
const BATCH: usize = 100;

/// One layout under test: a name (also the SQL prefix) and the IdSequence spec.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: &'static str,
    /// The body of `spec:` in flow style, e.g. `{layout: {totalBits: 53}, timeUnit: 10ms}`.
    pub spec: String,
}

/// The layouts of issue 25: 63-bit default, 53-bit, datacenter bits, a 10 ms unit and each
/// key form, plus forms combined with 53 bits (a 53-bit reversal) and ten shard bits.
pub fn cases() -> Vec<Case> {
    let case = |name, spec: &str| Case {
        name,
        spec: spec.to_string(),
    };
    // 31 timestamp bits of 1 ms last 24 days: the epoch is two days ago.
    let recent = chrono::Utc::now() - chrono::Duration::days(2);
    let recent = recent.format("%Y-%m-%dT%H:%M:%S.123Z");
    vec![
        case("default63", "{}"),
        case(
            "js53",
            "{layout: {timestampBits: 36, workerBits: 7, sequenceBits: 10, totalBits: 53}, \
             timeUnit: 10ms}",
        ),
        case(
            "datacenter",
            "{layout: {timestampBits: 39, datacenterBits: 5, workerBits: 5, sequenceBits: 14}, \
             datacenterId: 19, epoch: \"2024-02-29T12:34:56.789Z\"}",
        ),
        case("tenms", "{timeUnit: 10ms}"),
        case("shard4", "{layout: {timestampBits: 37, shardBits: 4}}"),
        case("reversed", "{layout: {bitReversed: true}}"),
        case("rotating", "{layout: {sequenceStart: Rotating}}"),
        case(
            "reversed53",
            "{layout: {timestampBits: 35, datacenterBits: 2, workerBits: 6, sequenceBits: 10, \
             totalBits: 53, bitReversed: true, sequenceStart: Rotating}, timeUnit: 10ms, \
             datacenterId: 3}",
        ),
        Case {
            name: "shard10",
            spec: format!(
                "{{layout: {{timestampBits: 31, shardBits: 10, sequenceStart: Rotating}}, \
                 epoch: \"{recent}\"}}"
            ),
        },
    ]
}

/// What the sidecar's `/decode` said about one ID.
#[derive(Debug, Clone)]
pub struct Decoded {
    pub id: u64,
    /// RFC 3339, milliseconds, UTC: the start of the ID's tick.
    pub time: String,
    pub unix_ms: i64,
    pub tick: u64,
    pub datacenter: u32,
    pub worker: u32,
    /// Present for `shardBits` layouts.
    pub shard: Option<u32>,
    /// The time-ordered key, present for every layout other than the classic one.
    pub key: Option<u64>,
}

/// A layout's sequence file, its parameters and the decoded IDs, sorted by ID.
#[derive(Debug)]
pub struct Sample {
    pub case: Case,
    pub file: PathBuf,
    pub params: SequenceParams,
    pub ids: Vec<Decoded>,
}

/// The sample of `case`, taken on first use and shared by the tests of this binary.
pub fn sample(case: &Case) -> Result<Arc<Sample>> {
    static CACHE: Mutex<BTreeMap<&'static str, Arc<Sample>>> = Mutex::new(BTreeMap::new());
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = cache.get(case.name) {
        return Ok(s.clone());
    }
    let sample = Arc::new(take(case).with_context(|| format!("sampling layout {}", case.name))?);
    cache.insert(case.name, sample.clone());
    Ok(sample)
}

fn take(case: &Case) -> Result<Sample> {
    let dir = tempfile::Builder::new()
        .prefix("kubeflake-sql-sample-")
        .tempdir()?
        .keep();
    remove_dir_at_exit(dir.clone());
    let file = dir.join(format!("{}.yaml", case.name));
    let manifest = format!(
        "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata:\n  name: {}\nspec: {}\n",
        case.name, case.spec
    );
    std::fs::write(&file, &manifest)?;
    let params = kubeflake_crds::manifest::parse(&manifest)?
        .spec
        .params()
        .with_context(|| format!("the spec of {}", case.name))?;
    let max_worker = params.layout.slot_count() - 1;
    let mut ids = Vec::new();
    for worker in [1, max_worker] {
        ids.extend(from_sidecar(&dir, &file, worker)?);
    }
    ids.sort_by_key(|d| d.id);
    let before = ids.len();
    ids.dedup_by_key(|d| d.id);
    ensure!(ids.len() == before, "the sidecars issued duplicate IDs");
    Ok(Sample {
        case: case.clone(),
        file,
        params,
        ids,
    })
}

/// Starts a standalone sidecar with `worker`, takes [`PER_WORKER`] IDs and decodes each.
fn from_sidecar(
    dir: &std::path::Path,
    file: &std::path::Path,
    worker: u64,
) -> Result<Vec<Decoded>> {
    let port = free_port();
    let state = dir.join(format!("state-{worker}"));
    let sidecar = Process::start(ProcessSpec {
        name: format!("sidecar-worker-{worker}"),
        program: workspace_binary("kubeflake-sidecar"),
        args: [
            "standalone".into(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--state-dir".into(),
            state.to_string_lossy().into_owned(),
            "--worker-id".into(),
            worker.to_string(),
            "--sequence-file".into(),
            file.to_string_lossy().into_owned(),
        ]
        .into_iter()
        .map(OsString::from)
        .collect(),
        log: dir.join(format!("sidecar-{worker}.log")),
    })?;
    crate::sql_support::wait_until(
        "the sidecar",
        Duration::from_secs(60),
        || sidecar.check_running(),
        || match get(port, "/readyz") {
            Ok((200, _)) => Ok(()),
            Ok((status, body)) => bail!("/readyz answered {status}: {body}"),
            Err(e) => Err(e.into()),
        },
    )?;
    let stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut conn = BufReader::new(stream);
    let mut ids: Vec<u64> = Vec::with_capacity(PER_WORKER);
    while ids.len() < PER_WORKER {
        let target = format!("/ids?count={BATCH}");
        let Some((200, body)) = request(&mut conn, &target) else {
            bail!("{target} failed:\n{}", sidecar.log_tail(20));
        };
        for line in body.lines() {
            ids.push(
                line.parse()
                    .with_context(|| format!("{line:?} from /ids"))?,
            );
        }
        std::thread::sleep(Duration::from_millis(3));
    }
    ids.iter()
        .map(|&id| {
            let target = format!("/decode/{id}");
            match request(&mut conn, &target) {
                Some((200, body)) => parse_decoded(id, &body),
                other => bail!("{target} answered {other:?}"),
            }
        })
        .collect()
}

fn parse_decoded(id: u64, body: &str) -> Result<Decoded> {
    let v: serde_json::Value = serde_json::from_str(body)?;
    let int = |field: &str| -> Result<u64> {
        v[field]
            .as_u64()
            .with_context(|| format!("no {field} in /decode/{id}: {body}"))
    };
    let time = v["time"]
        .as_str()
        .with_context(|| format!("no time in {body}"))?
        .to_string();
    let unix_ms = chrono::DateTime::parse_from_rfc3339(&time)
        .with_context(|| format!("time {time:?}"))?
        .timestamp_millis();
    ensure!(v["id"].as_str() == Some(id.to_string().as_str()), "{body}");
    Ok(Decoded {
        id,
        time,
        unix_ms,
        tick: int("tick")?,
        datacenter: u32::try_from(int("datacenter")?)?,
        worker: u32::try_from(int("worker")?)?,
        shard: v["shard"].as_u64().map(u32::try_from).transpose()?,
        key: v["key"].as_str().map(str::parse).transpose()?,
    })
}
