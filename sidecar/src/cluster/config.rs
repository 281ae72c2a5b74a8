//! What cluster mode is told on its command line, already parsed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::slot::PodIdentity;

/// Everything cluster mode needs, already parsed.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Where the ID API is served: loopback (the app is in the same pod).
    pub listen: SocketAddr,
    /// Also serve the ID API on this Unix socket (in a volume shared with the app).
    pub listen_unix: Option<PathBuf>,
    /// Where `/healthz`, `/readyz` and `/metrics` alone are also served (the pod IP, for kubelet).
    pub probe_listen: Option<SocketAddr>,
    pub pod: PodIdentity,
    /// The IdSequence's name (in the pod's namespace).
    pub sequence: String,
    /// Directory of the pod-local fence file (an emptyDir): `--state-dir`, as in
    /// standalone mode.
    pub state_dir: PathBuf,
    pub max_batch: u64,
    /// Largest `count` of `GET /range` (`--max-range`; segment sequences that are not strict).
    pub max_range: u64,
    /// How far ahead of use the local fence is kept.
    pub local_fence_ahead: Duration,
    /// Lease renewal interval; `None`: a third of the lease duration.
    pub renew_every: Option<Duration>,
    /// Largest clock skew against the API server at which the sidecar starts issuing or
    /// raises its lease fence.
    pub max_clock_skew: Duration,
    pub drain: Duration,
    /// Where a strict sequence's oracle takes forwarded requests (the pod IP and the
    /// oracle port); `None`: this sidecar only forwards.
    pub oracle_listen: Option<SocketAddr>,
    /// This pod's token for the strict oracle's audience (a projected volume the webhook
    /// injects), shown to the sequence's other sidecars (docs/safety.md rule 16).
    pub oracle_token_file: PathBuf,
    /// Test only: the broken variant of the strict oracle (no wait before a take-over).
    pub unsafe_take_over_without_waiting: bool,
}

impl ClusterConfig {
    /// What this sidecar shows and checks on a strict sequence's oracle port: its token
    /// from `oracle_token_file`, its peers' checked with the API server's keys.
    pub(crate) fn peer_auth(
        &self,
        client: &kube::Client,
        metrics: &crate::metrics::SegmentMetrics,
    ) -> std::sync::Arc<crate::peer_token::PeerAuth> {
        crate::peer_token::PeerAuth::in_cluster(
            client,
            &self.oracle_token_file,
            &self.pod.namespace,
            metrics,
        )
    }
}
