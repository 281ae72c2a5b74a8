//! Fixtures for tests of the fence and of what drives it (the renewal task): a generator
//! on a manual clock, and a local fence of a pod written once.

use std::path::Path;
use std::sync::Arc;

use kubeflake_crds::{DatacenterId, IdSequenceSpec, Slot, Tick};

use super::{FenceFile, FenceIdentity, LocalFence};
use crate::clock::ManualClock;
use crate::generator::{Generator, WorkerConfig};

/// A generator of slot 1 (default layout, drift limit 2 s) on a manual clock at `now_ms`,
/// that has started above tick 0 and may use nothing yet.
pub(crate) fn generator_at(now_ms: u64) -> (Arc<Generator>, Arc<ManualClock>) {
    let p = IdSequenceSpec::default().params().unwrap();
    let clock = Arc::new(ManualClock::at_millis(now_ms));
    let config = WorkerConfig {
        layout: p.layout,
        timebase: p.timebase,
        datacenter: DatacenterId(0),
        slot: Slot(1),
        max_drift_ms: 2000,
    };
    (
        Arc::new(Generator::start_above(config, Tick(0), clock.clone()).unwrap()),
        clock,
    )
}

/// A local fence in a pod (`dir/s.fence`, 1000 ticks ahead): lease fence (the cap) at
/// `cap`, first write done, no ID yet.
pub(crate) fn written_once(
    dir: &Path,
    now_ms: u64,
    cap: u64,
) -> (LocalFence, Arc<Generator>, Arc<ManualClock>) {
    let (file, _) = FenceFile::open(dir, "s.fence").unwrap();
    let (g, clock) = generator_at(now_ms);
    let identity = FenceIdentity {
        sequence: "orders".into(),
        slot: 3,
        holder: "standalone".into(),
        acquisition: "layout 41/0/10/12".into(),
    };
    let mut local = LocalFence::new(
        file,
        identity,
        g.clone(),
        1000,
        Tick(0),
        Some(Tick(cap)),
        None,
    );
    local.renew().unwrap();
    (local, g, clock)
}
