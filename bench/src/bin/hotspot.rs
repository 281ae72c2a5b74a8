//! `kubeflake-hotspot`: where the writes of N pods' IDs land in a range-partitioned store
//! and under `id % N` sharding, for the default layout and each hotspot-free key form
//! (issue 25; the simulation is bench/src/hotspot.rs). Deterministic: simulated time and a
//! seeded PRNG, so every machine prints the same figures.
//!
//! Prints one JSON line per (rate, form).

use clap::Parser;
use kubeflake_bench::hotspot::{Scenario, forms, simulate};
use serde::Serialize;

/// Hottest-range share and `id % N` skew of each key form, one JSON line per (rate, form).
#[derive(Parser, Debug)]
#[command(about)]
struct Cli {
    /// Pods issuing IDs (slots 0 .. pods).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pods: u32,
    /// Mean IDs per second per pod, one scenario each, comma-separated.
    #[arg(long, default_value = "100,5000", value_delimiter = ',')]
    rates: Vec<f64>,
    /// Keys per range before the split store splits it, one per rate.
    #[arg(long, default_value = "2048,65536", value_delimiter = ',')]
    split_keys: Vec<usize>,
    /// Simulated seconds.
    #[arg(long, default_value_t = 180, value_parser = clap::value_parser!(u64).range(1..=3600))]
    secs: u64,
    /// Simulated seconds per window.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    window_secs: u64,
    /// Range counts of the equal-range models.
    #[arg(long, default_value = "16,64", value_delimiter = ',')]
    ranges: Vec<u64>,
    /// The N of `id % N`, comma-separated.
    #[arg(long, default_value = "16,100", value_delimiter = ',')]
    moduli: Vec<u64>,
    /// Days since the sequence's epoch at the start (1 ms ticks).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=90))]
    start_days: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Serialize)]
struct Line<'a> {
    figure: &'static str,
    #[serde(flatten)]
    scenario: &'a Scenario,
    #[serde(flatten)]
    result: kubeflake_bench::hotspot::FormResult,
}

fn fail(msg: &str) -> ! {
    eprintln!("kubeflake-hotspot: error: {msg}");
    std::process::exit(2);
}

fn main() {
    let cli = Cli::parse();
    if cli.rates.len() != cli.split_keys.len() {
        fail("--split-keys needs one value per rate in --rates");
    }
    if cli.rates.iter().any(|r| !(0.1..=100_000.0).contains(r)) {
        fail("--rates must be between 0.1 and 100000 IDs/s per pod");
    }
    if cli
        .ranges
        .iter()
        .chain(&cli.moduli)
        .any(|&n| !(1..=65_536).contains(&n))
    {
        fail("--ranges and --moduli must be between 1 and 65536");
    }
    let forms = forms().unwrap_or_else(|e| fail(&format!("a layout is invalid: {e}")));
    for (&rate, &split_keys) in cli.rates.iter().zip(&cli.split_keys) {
        let scenario = Scenario {
            pods: cli.pods,
            ids_per_s_per_pod: rate,
            secs: cli.secs,
            window_secs: cli.window_secs,
            start_tick: cli.start_days * 86_400_000,
            seed: cli.seed,
            equal_ranges: cli.ranges.clone(),
            split_keys,
            moduli: cli.moduli.clone(),
        };
        for form in &forms {
            let line = Line {
                figure: "hotspot",
                scenario: &scenario,
                result: simulate(&scenario, form),
            };
            match serde_json::to_string(&line) {
                Ok(s) => println!("{s}"),
                Err(e) => fail(&format!("a line did not serialize: {e}")),
            }
        }
    }
}
