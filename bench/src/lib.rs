//! Side-by-side benchmarks for kubeflake (issue 7). The driver is `bench/run`; this crate
//! holds the pieces it runs: one load generator for every network peer (so HTTP, Redis and
//! PostgreSQL are measured by the same closed loop and the same histogram), a bare hyper
//! server that is the ceiling for any HTTP sidecar, an in-process generator harness, and a
//! deterministic simulation of where IDs land in range-partitioned stores ([`hotspot`]).

pub mod hotspot;
pub mod http1;
pub mod load;
pub mod resp;
pub mod stats;
pub mod target;
