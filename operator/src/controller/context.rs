//! What every pass shares: the client, the caches, the metrics, the Event recorder and the
//! operator's own memory of lease versions (for silence, docs/safety.md rule 9) and of its
//! last writes (expectations).

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};

use super::expectations::Expectations;
use super::silence::SilenceBook;
use crate::index::Index;
use crate::metrics::Metrics;

/// Everything a pass needs. Shared by all passes.
pub struct Context {
    pub client: Client,
    /// Labelled pods and slot Leases, indexed by sequence.
    pub pods: Index<Pod>,
    pub leases: Index<Lease>,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// For each sequence, the version of each of its held leases and since when it was
    /// seen unchanged (monotonic clock).
    pub(crate) silence: SilenceBook,
    /// For each sequence, the lease writes of its last pass the cache may not show yet.
    pub(crate) expectations: Expectations,
}

impl Context {
    pub fn new(
        client: Client,
        pods: Index<Pod>,
        leases: Index<Lease>,
        metrics: Arc<Metrics>,
        reporter: Reporter,
    ) -> Context {
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            pods,
            leases,
            metrics,
            silence: SilenceBook::default(),
            expectations: Expectations::default(),
        }
    }
}
