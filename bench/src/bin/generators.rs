//! `kubeflake-generators`: in-process ID generation, kubeflake's generator against
//! Snowflake crates users pick from crates.io, under one harness: each of T threads calls
//! the generator in a loop for a fixed time, and the IDs per second of all threads are
//! summed. A crate whose generator needs `&mut self` is shared the way a user would share
//! it across threads: behind a `Mutex` (uncontended on one thread).
//!
//! Prints one JSON line per (generator, threads, run).

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use kubeflake_crds::{DatacenterId, IdSequenceSpec, Slot, Tick};
use kubeflake_sidecar::clock::SystemClock;
use kubeflake_sidecar::generator::{Generator, WorkerConfig};
use serde::Serialize;

/// In-process generator throughput, one JSON line per run.
#[derive(Parser, Debug)]
#[command(about)]
struct Cli {
    /// Seconds per run (at most 60).
    #[arg(long, default_value_t = 1.0)]
    secs: f64,
    /// Runs of each generator at each thread count.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=50))]
    runs: u64,
    /// Thread counts, comma-separated.
    #[arg(long, default_value = "1,2,4", value_delimiter = ',')]
    threads: Vec<usize>,
}

#[derive(Serialize)]
struct Line<'a> {
    generator: &'a str,
    sharing: &'a str,
    threads: usize,
    secs: f64,
    ids: u64,
    ids_per_s: f64,
    ns_per_id_per_thread: f64,
}

/// Calls `next` from `threads` threads for `secs`; returns the IDs made.
fn measure(threads: usize, secs: Duration, next: Arc<dyn Fn() + Send + Sync>) -> u64 {
    let total = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (next, total, start) = (next.clone(), total.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let end = Instant::now() + secs;
                let mut made = 0u64;
                // Check the time once per 256 calls so the clock read is not measured.
                while Instant::now() < end {
                    for _ in 0..256 {
                        next();
                    }
                    made += 256;
                }
                total.fetch_add(made, Ordering::Relaxed);
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a generator thread panicked");
    }
    total.load(Ordering::Relaxed)
}

fn kubeflake(max_drift_ms: u64) -> Arc<Generator> {
    let p = IdSequenceSpec::default()
        .params()
        .expect("the default spec is valid");
    let g = Generator::start_above(
        WorkerConfig {
            layout: p.layout,
            timebase: p.timebase,
            datacenter: DatacenterId(0),
            slot: Slot(1),
            max_drift_ms,
        },
        Tick(0),
        Arc::new(SystemClock::new()),
    )
    .expect("fence 0 is within every layout");
    // The fence is persisted ahead in the product; in process, any tick is allowed.
    g.raise_fence(Tick(u64::MAX >> 24));
    Arc::new(g)
}

/// One contender: a name, how it is shared, and a factory for a fresh instance.
type Contender = (
    &'static str,
    &'static str,
    Box<dyn Fn() -> Arc<dyn Fn() + Send + Sync>>,
);

fn contenders() -> Vec<Contender> {
    vec![
        (
            "kubeflake Generator, no borrowing (drift 0: waits for the next tick like the peers)",
            "shared, lock-free (AtomicU64 CAS)",
            Box::new(|| {
                let g = kubeflake(0);
                Arc::new(move || {
                    // Like the peers, wait for the next tick once its 4,096 IDs are used.
                    loop {
                        if let Ok(id) = g.next_id() {
                            black_box(id);
                            return;
                        }
                        std::hint::spin_loop();
                    }
                })
            }),
        ),
        (
            "kubeflake Generator, borrowing future ticks (as the sidecar may, within its drift limit)",
            "shared, lock-free (AtomicU64 CAS)",
            Box::new(|| {
                let g = kubeflake(600_000);
                Arc::new(move || {
                    black_box(g.next_id().ok());
                })
            }),
        ),
        (
            "snowflaked 1.0 sync::Generator",
            "shared, lock-free (its own atomic)",
            Box::new(|| {
                let g = Arc::new(snowflaked::sync::Generator::new(1));
                Arc::new(move || {
                    black_box(g.generate::<u64>());
                })
            }),
        ),
        (
            "rs-snowflake 0.6 SnowflakeIdGenerator::generate",
            "Mutex (needs &mut self)",
            Box::new(|| {
                let g = Mutex::new(snowflake::SnowflakeIdGenerator::new(1, 1));
                Arc::new(move || {
                    let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
                    black_box(g.generate());
                })
            }),
        ),
        (
            "sonyflake 0.5 Sonyflake::next_id",
            "shared (its own internal Mutex)",
            Box::new(|| {
                let machine_id = || Ok(1u16);
                match sonyflake::Sonyflake::builder()
                    .machine_id(&machine_id)
                    .finalize()
                {
                    Ok(g) => Arc::new(move || {
                        black_box(g.next_id().ok());
                    }),
                    Err(e) => {
                        eprintln!("kubeflake-generators: sonyflake would not start: {e}");
                        Arc::new(|| {})
                    }
                }
            }),
        ),
    ]
}

fn main() {
    let cli = Cli::parse();
    if !(0.01..=60.0).contains(&cli.secs) {
        eprintln!(
            "kubeflake-generators: error: --secs must be between 0.01 and 60, got {}",
            cli.secs
        );
        std::process::exit(2);
    }
    if cli.threads.iter().any(|&t| !(1..=64).contains(&t)) {
        eprintln!("kubeflake-generators: error: --threads must list counts from 1 to 64");
        std::process::exit(2);
    }
    let secs = Duration::from_secs_f64(cli.secs);
    for &threads in &cli.threads {
        for (name, sharing, make) in contenders() {
            for _ in 0..cli.runs {
                let ids = measure(threads, secs, make());
                let line = Line {
                    generator: name,
                    sharing,
                    threads,
                    secs: cli.secs,
                    ids,
                    ids_per_s: ids as f64 / cli.secs,
                    ns_per_id_per_thread: cli.secs * 1e9 * threads as f64 / ids.max(1) as f64,
                };
                println!(
                    "{}",
                    serde_json::to_string(&line).expect("a line serializes")
                );
            }
        }
    }
}
