//! The chart's Grafana dashboard (`charts/kubeflake/dashboards/kubeflake.json`) as the e2e
//! tests read it: each row's panel queries, sent as Grafana would, and a wait until every
//! one of them returns a series with a value on a real [`Prometheus`]. e2e `prometheus`
//! checks every row but the ID space's against an operator and sidecars; e2e
//! `id_space_join` checks the ID space's against an operator whose sequence joined a hub
//! (only there do its series exist), e2e `id_space_segment` the Segment ranges' against
//! one whose Segment sequence did.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::Value;

use crate::prometheus::Prometheus;

/// The title of the dashboard row of the ID space's panels.
pub const ID_SPACE_ROW: &str = "ID space (many clusters)";
/// The title of the dashboard row of a Segment membership's panels (its series exist only
/// where a Segment sequence joined a Segment space: e2e `id_space_segment` checks it).
pub const ID_SPACE_SEGMENT_ROW: &str = "ID space, Segment ranges";

/// Each row of the dashboard, in order: its title (`""` for panels before the first row)
/// and the `expr` of every query of its panels.
pub fn rows() -> Result<Vec<(String, Vec<String>)>> {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../charts/kubeflake/dashboards/kubeflake.json"
    );
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(file)?)?;
    let mut rows = vec![(String::new(), Vec::new())];
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        if panel["type"] == "row" {
            let title = panel["title"].as_str().unwrap_or_default().to_owned();
            rows.push((title, Vec::new()));
        }
        let queries = panel["targets"].as_array().into_iter().flatten();
        if let Some((_, exprs)) = rows.last_mut() {
            exprs.extend(queries.filter_map(|t| t["expr"].as_str().map(str::to_owned)));
        }
    }
    Ok(rows)
}

/// The queries of the rows `keep` picks by title, in order.
pub fn queries(keep: impl Fn(&str) -> bool) -> Result<Vec<String>> {
    Ok(rows()?
        .into_iter()
        .filter(|(title, _)| keep(title))
        .flat_map(|(_, exprs)| exprs)
        .collect())
}

/// A dashboard query as Grafana would send it with the namespace variable set to `ns`:
/// `$namespace` is a regex (`=~`), `$__rate_interval` at least four scrape intervals (here
/// 1 minute, with a 1 s scrape interval).
pub fn as_grafana_sends(expr: &str, ns: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$namespace", ns)
}

/// Waits (at most `limit`) until every query of `queries`, as Grafana sends it for `ns`,
/// returns a series whose value is not NaN (a histogram without observations in the window
/// is drawn as a gap: it does not count). Fails naming the queries still empty. Blocking.
pub fn wait_every_query(
    prom: &Prometheus,
    queries: &[String],
    ns: &str,
    limit: Duration,
) -> Result<()> {
    let started = Instant::now();
    let deadline = started + limit;
    let mut empty: Vec<String> = queries.iter().map(|q| as_grafana_sends(q, ns)).collect();
    loop {
        let mut still = Vec::new();
        for q in empty {
            let result = prom.query(&q)?;
            if result.iter().all(|r| r["value"][1] == "NaN") {
                still.push(q);
            } else {
                eprintln!("dashboard: {:?}: {q}", started.elapsed());
            }
        }
        empty = still;
        if empty.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{} of {} dashboard queries returned no series (or only NaN) after {limit:?}:\n{}",
                empty.len(),
                queries.len(),
                empty
                    .iter()
                    .map(|q| format!("{q}\n  -> {:?}", prom.query(q)))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}
