//! In-process generator throughput: the lock-free generator against a `Mutex` around the
//! same computation, on 1, 2 and 4 threads, and the generator with key forms
//! (docs/layouts.md: shard bits with a rotating start, bit reversal) beside the default
//! layout in the same runs. Bounded: a fixed number of IDs per run.
//!
//! Run: `cargo bench -p kubeflake-sidecar --bench generator`
//! Prints a Markdown table (median and spread of the runs, ns per ID and IDs per second).

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kubeflake_crds::{DatacenterId, IdSequenceSpec, Slot, Tick};
use kubeflake_sidecar::clock::{Clock, SystemClock};
use kubeflake_sidecar::generator::{Generator, WorkerConfig};

const IDS_PER_THREAD: u64 = 2_000_000;
const RUNS: usize = 5;

/// The alternative that was measured: one lock around the position.
struct MutexGenerator {
    clock: SystemClock,
    epoch_ms: u64,
    seq_bits: u32,
    last: Mutex<u64>,
    fence: AtomicU64,
}

impl MutexGenerator {
    fn next(&self) -> u64 {
        let now = (self.clock.wall_micros() / 1000 - self.epoch_ms) << self.seq_bits;
        let mut last = self.last.lock().unwrap();
        let next = (*last + 1).max(now);
        assert!(next >> self.seq_bits <= self.fence.load(Ordering::Relaxed));
        *last = next;
        next
    }
}

fn config() -> WorkerConfig {
    config_of(IdSequenceSpec::default())
}

fn config_of(spec: IdSequenceSpec) -> WorkerConfig {
    let p = spec.params().unwrap();
    WorkerConfig {
        layout: p.layout,
        timebase: p.timebase,
        datacenter: DatacenterId(0),
        slot: Slot(1),
        // Demand far above 4,096 IDs/ms borrows future ticks; allow it for the benchmark.
        max_drift_ms: 600_000,
    }
}

fn time_threads(threads: usize, work: impl Fn() + Send + Sync + 'static) -> f64 {
    let work = Arc::new(work);
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let w = work.clone();
            std::thread::spawn(move || w())
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    start.elapsed().as_secs_f64()
}

fn median_and_spread(mut xs: Vec<f64>) -> (f64, f64, f64) {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (xs[xs.len() / 2], xs[0], xs[xs.len() - 1])
}

fn main() {
    println!("| generator | threads | median ns/ID | median IDs/s | min-max IDs/s |");
    println!("|---|---:|---:|---:|---:|");
    for threads in [1usize, 2, 4] {
        let total = IDS_PER_THREAD * threads as u64;
        let mut variants: Vec<(&str, Vec<f64>)> = vec![
            ("lock-free CAS (kubeflake)", vec![]),
            ("Mutex", vec![]),
            ("lock-free CAS, shardBits 4 + Rotating", vec![]),
            ("lock-free CAS, bitReversed", vec![]),
        ];
        let mut sharded = IdSequenceSpec::default();
        sharded.layout.timestamp_bits = 37;
        sharded.layout.shard_bits = 4;
        sharded.layout.sequence_start = kubeflake_crds::sequence::SequenceStartSpec::Rotating;
        let mut reversed = IdSequenceSpec::default();
        reversed.layout.bit_reversed = true;
        let generators = [
            (0, config()),
            (2, config_of(sharded)),
            (3, config_of(reversed)),
        ];
        for _ in 0..RUNS {
            for (variant, config) in generators {
                let g = Arc::new(
                    Generator::start_above(config, Tick(0), Arc::new(SystemClock::new()))
                        .expect("fence 0 is within every layout"),
                );
                g.raise_fence(Tick(u64::MAX >> 28));
                let secs = time_threads(threads, move || {
                    for _ in 0..IDS_PER_THREAD {
                        black_box(g.next_id().unwrap());
                    }
                });
                variants[variant].1.push(secs);
            }
            let m = Arc::new(MutexGenerator {
                clock: SystemClock::new(),
                epoch_ms: config().timebase.epoch_unix_ms(),
                seq_bits: 12,
                last: Mutex::new(0),
                fence: AtomicU64::new(u64::MAX >> 24),
            });
            let secs = time_threads(threads, move || {
                for _ in 0..IDS_PER_THREAD {
                    black_box(m.next());
                }
            });
            variants[1].1.push(secs);
        }
        for (name, secs) in variants {
            let rates: Vec<f64> = secs.iter().map(|s| total as f64 / s).collect();
            let (median, lo, hi) = median_and_spread(rates);
            println!(
                "| {name} | {threads} | {:.1} | {:.2}M | {:.2}M-{:.2}M |",
                1e9 / median,
                median / 1e6,
                lo / 1e6,
                hi / 1e6
            );
        }
    }
}
