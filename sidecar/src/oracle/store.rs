//! Where the oracle Lease is read, watched and written: the API server in a cluster, a map
//! in tests. Every write is a replace carrying the `resourceVersion` read: a compare-and-swap
//! (409 Conflict when the Lease moved on).
//!
//! A sidecar that does not hold the Lease follows it through a watch ([`OracleStore::changes`])
//! rather than by reading it again and again: one watch per sidecar instead of a read every
//! `D/12` (100 pods: about 240 reads a second). A watched copy may be older than the Lease
//! in etcd, which is as safe as a quorum read: a take-over is a compare-and-swap on the
//! version seen, so a copy that is out of date can only make it fail (docs/safety.md
//! rule 13).

use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use kubeflake_crds::strict_oracle::{OracleLease, OracleLeaseError, oracle_name};
use kubeflake_runtime::kube_error::{self, KubeErrorKind};

/// How long one read or write of the oracle Lease may take before it is abandoned (a
/// write whose outcome is unknown is harmless: the next one is conditional on a newer
/// read, and the serving bound counts from the last *known* success).
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Why the oracle Lease could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum OracleStoreError {
    #[error("the oracle lease changed since it was read")]
    Conflict,
    #[error(
        "oracle lease {0} does not exist: the operator creates it for a strict sequence; is \
         the operator running, and is it a release with the strict oracle?"
    )]
    NotFound(String),
    #[error(transparent)]
    Bad(#[from] OracleLeaseError),
    #[error("oracle lease {name}: {message}")]
    Unavailable { name: String, message: String },
}

/// The oracle Lease of one sequence.
pub(crate) trait OracleStore: Send + Sync + 'static {
    fn read(&self) -> BoxFuture<'_, Result<OracleLease, OracleStoreError>>;
    /// Writes `lease` if it is still the version it carries; returns what was written.
    fn replace(&self, lease: Lease) -> BoxFuture<'_, Result<OracleLease, OracleStoreError>>;
    /// The Lease as it changes: `Some` is the Lease now; `None` says the watch no longer
    /// knows (it broke, it lists again, the Lease was deleted or is malformed), and holds
    /// until the next `Some`. The stream ends only if the watch cannot go on.
    fn changes(&self) -> BoxStream<'static, Option<OracleLease>>;
}

/// The oracle Lease in the API server.
pub(crate) struct KubeOracleStore {
    api: Api<Lease>,
    name: String,
}

impl KubeOracleStore {
    pub(crate) fn new(client: Client, namespace: &str, sequence: &str) -> KubeOracleStore {
        KubeOracleStore {
            api: Api::namespaced(client, namespace),
            name: oracle_name(sequence),
        }
    }

    fn error(&self, e: kube::Error) -> OracleStoreError {
        match kube_error::kind(&e) {
            KubeErrorKind::Conflict => OracleStoreError::Conflict,
            KubeErrorKind::NotFound => OracleStoreError::NotFound(self.name.clone()),
            _ => OracleStoreError::Unavailable {
                name: self.name.clone(),
                message: e.to_string(),
            },
        }
    }

    fn timed_out(&self) -> OracleStoreError {
        OracleStoreError::Unavailable {
            name: self.name.clone(),
            message: format!("no answer within {CALL_TIMEOUT:?}"),
        }
    }
}

impl OracleStore for KubeOracleStore {
    fn read(&self) -> BoxFuture<'_, Result<OracleLease, OracleStoreError>> {
        Box::pin(async move {
            // A quorum read (no resourceVersion=0): an older copy would look unchanged.
            match tokio::time::timeout(CALL_TIMEOUT, self.api.get(&self.name)).await {
                Ok(Ok(lease)) => Ok(OracleLease::parse(lease)?),
                Ok(Err(e)) => Err(self.error(e)),
                Err(_) => Err(self.timed_out()),
            }
        })
    }

    fn replace(&self, lease: Lease) -> BoxFuture<'_, Result<OracleLease, OracleStoreError>> {
        Box::pin(async move {
            let params = PostParams::default();
            let write = self.api.replace(&self.name, &params, &lease);
            match tokio::time::timeout(CALL_TIMEOUT, write).await {
                Ok(Ok(written)) => Ok(OracleLease::parse(written)?),
                Ok(Err(e)) => Err(self.error(e)),
                Err(_) => Err(self.timed_out()),
            }
        })
    }

    fn changes(&self) -> BoxStream<'static, Option<OracleLease>> {
        let name = self.name.clone();
        kubeflake_runtime::watch::one_object(self.api.clone(), &name)
            .filter_map(move |event| std::future::ready(known(event, &name)))
            .boxed()
    }
}

/// What one event of the oracle Lease's watch tells the elector: `Some(Some(lease))`, the
/// Lease now; `Some(None)`, the watch does not know it now (it broke, it lists again, the
/// Lease was deleted, or it is malformed: logged, and the elector reads it, whose error
/// says what is wrong); `None`, nothing new (a list is complete).
pub(crate) fn known(
    event: Result<Event<Lease>, watcher::Error>,
    name: &str,
) -> Option<Option<OracleLease>> {
    match event {
        Ok(Event::Apply(lease) | Event::InitApply(lease)) => match OracleLease::parse(lease) {
            Ok(lease) => Some(Some(lease)),
            Err(e) => {
                tracing::warn!(lease = %name, error = %e, "strict: the watched oracle lease is malformed");
                Some(None)
            }
        },
        // A new list begins (after a break, or a watch too old to resume): what was seen
        // may be gone. The Lease is in the list's `InitApply`, if it is.
        Ok(Event::Init | Event::Delete(_)) => Some(None),
        Ok(Event::InitDone) => None,
        Err(e) => {
            tracing::warn!(lease = %name, error = %e, "strict: watching the oracle lease failed; reading it instead until the watch is back");
            Some(None)
        }
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! An in-memory oracle Lease with versions and a watch, shared by the sidecars of a test.

    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use tokio::sync::watch;

    use super::*;
    use kubeflake_crds::strict_oracle::new_oracle_lease;

    pub(crate) struct FakeOracleStore {
        lease: Mutex<(u64, Lease)>,
        /// Every call fails as unavailable (an API server outage): see [`Self::set_down`].
        down: AtomicBool,
        /// The watch delivers nothing but `None` from now on (it cannot be made).
        watch_broken: AtomicBool,
        /// What every watch delivers: the Lease now, or `None` (the watch does not know).
        watched: watch::Sender<Option<Lease>>,
        /// How many reads were made (not counting watches).
        pub(crate) reads: AtomicU64,
    }

    impl FakeOracleStore {
        pub(crate) fn new(lease_secs: i32) -> FakeOracleStore {
            let mut lease = new_oracle_lease("s", "ns");
            lease.spec.as_mut().unwrap().lease_duration_seconds = Some(lease_secs);
            lease.metadata.resource_version = Some("1".into());
            lease.metadata.uid = Some("lease-uid-1".into());
            FakeOracleStore {
                watched: watch::Sender::new(Some(lease.clone())),
                lease: Mutex::new((1, lease)),
                down: AtomicBool::new(false),
                watch_broken: AtomicBool::new(false),
                reads: AtomicU64::new(0),
            }
        }

        pub(crate) fn holder(&self) -> Option<String> {
            let guard = self.lease.lock().unwrap();
            OracleLease::parse(guard.1.clone()).unwrap().holder
        }

        /// Changes `leaseDurationSeconds` as a new version (as an admin's edit would).
        pub(crate) fn set_lease_secs(&self, secs: i32) {
            let mut guard = self.lease.lock().unwrap();
            guard.0 += 1;
            let version = guard.0.to_string();
            let lease = &mut guard.1;
            lease.spec.as_mut().unwrap().lease_duration_seconds = Some(secs);
            lease.metadata.resource_version = Some(version);
            self.publish(&guard.1);
        }

        /// Lists `uids` as the claimants, as a new version (the operator's write).
        pub(crate) fn set_claimants(&self, uids: &[&str]) {
            let mut guard = self.lease.lock().unwrap();
            guard.0 += 1;
            let version = guard.0.to_string();
            let lease = &mut guard.1;
            lease
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(
                    kubeflake_crds::segment_counter::CLAIMANTS_ANNOTATION.into(),
                    uids.join(","),
                );
            lease.metadata.resource_version = Some(version);
            self.publish(&guard.1);
        }

        /// An API server outage (`true`) and its end: every call fails meanwhile, and the
        /// watches break (`None`), then list the Lease again.
        pub(crate) fn set_down(&self, down: bool) {
            self.down.store(down, Ordering::SeqCst);
            let guard = self.lease.lock().unwrap();
            self.publish(&guard.1);
        }

        /// Watches stop delivering the Lease for good (reads and writes still work).
        pub(crate) fn break_watch(&self) {
            self.watch_broken.store(true, Ordering::SeqCst);
            let guard = self.lease.lock().unwrap();
            self.publish(&guard.1);
        }

        /// Tells every watch what it would deliver now.
        fn publish(&self, lease: &Lease) {
            let live =
                !self.down.load(Ordering::SeqCst) && !self.watch_broken.load(Ordering::SeqCst);
            self.watched.send_replace(live.then(|| lease.clone()));
        }

        /// The Lease's term (`leaseTransitions`).
        pub(crate) fn term(&self) -> i32 {
            let guard = self.lease.lock().unwrap();
            let spec = guard.1.spec.as_ref();
            spec.and_then(|s| s.lease_transitions).unwrap_or(0)
        }

        fn check_up(&self) -> Result<(), OracleStoreError> {
            if self.down.load(Ordering::SeqCst) {
                Err(OracleStoreError::Unavailable {
                    name: "s-strict-oracle".into(),
                    message: "down".into(),
                })
            } else {
                Ok(())
            }
        }
    }

    impl OracleStore for FakeOracleStore {
        fn read(&self) -> BoxFuture<'_, Result<OracleLease, OracleStoreError>> {
            Box::pin(async move {
                self.reads.fetch_add(1, Ordering::SeqCst);
                self.check_up()?;
                let guard = self.lease.lock().unwrap();
                Ok(OracleLease::parse(guard.1.clone())?)
            })
        }

        fn replace(&self, lease: Lease) -> BoxFuture<'_, Result<OracleLease, OracleStoreError>> {
            Box::pin(async move {
                self.check_up()?;
                let mut guard = self.lease.lock().unwrap();
                if lease.metadata.resource_version != guard.1.metadata.resource_version {
                    return Err(OracleStoreError::Conflict);
                }
                guard.0 += 1;
                let mut written = lease;
                written.metadata.resource_version = Some(guard.0.to_string());
                guard.1 = written.clone();
                self.publish(&guard.1);
                Ok(OracleLease::parse(written)?)
            })
        }

        fn changes(&self) -> BoxStream<'static, Option<OracleLease>> {
            let first = true;
            futures::stream::unfold(
                (self.watched.subscribe(), first),
                |(mut rx, first)| async move {
                    if !first && rx.changed().await.is_err() {
                        return None;
                    }
                    let now = rx.borrow_and_update().clone();
                    Some((now, (rx, false)))
                },
            )
            // What the Lease's watch in the API server would deliver, through the same
            // reading of its events.
            .filter_map(|now| {
                std::future::ready(match now {
                    Some(lease) => known(Ok(Event::Apply(lease)), "s-strict-oracle"),
                    None => known(Ok(Event::Init), "s-strict-oracle"),
                })
            })
            .boxed()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflake_crds::strict_oracle::new_oracle_lease;
    use kubeflake_runtime::fake_api::FakeApi;

    fn lease(secs: i32) -> Lease {
        let mut lease = new_oracle_lease("s", "ns");
        lease.spec.as_mut().unwrap().lease_duration_seconds = Some(secs);
        lease
    }

    /// Only a Lease this release can read is taken as the Lease; anything else on the
    /// watch (a malformed Lease, a new list, a delete, an error) says "not known now", so
    /// the elector reads, and the watch itself goes on.
    #[test]
    fn the_watch_gives_the_elector_a_readable_lease_or_says_it_does_not_know() {
        let known = |event| known(event, "s-strict-oracle");
        let now = known(Ok(Event::Apply(lease(5))))
            .expect("news")
            .expect("the lease");
        assert_eq!(now.timing.lease, Duration::from_secs(5));
        assert!(matches!(
            known(Ok(Event::InitApply(lease(5)))),
            Some(Some(_))
        ));
        assert!(
            matches!(known(Ok(Event::Apply(lease(0)))), Some(None)),
            "malformed"
        );
        assert!(
            matches!(known(Ok(Event::Init)), Some(None)),
            "listing again"
        );
        assert!(matches!(known(Ok(Event::Delete(lease(5)))), Some(None)));
        let refused = Err(watcher::Error::NoResourceVersion);
        assert!(matches!(known(refused), Some(None)), "a watch error");
        assert!(known(Ok(Event::InitDone)).is_none(), "nothing new");
    }

    /// Rule 16: a Lease with the oracle Lease's name that a tenant made (no kubeflake label,
    /// so the Lease policy never guarded it) is not the oracle Lease: its address is never
    /// believed, read or watched.
    #[tokio::test]
    async fn rule16_an_unlabelled_oracle_lease_is_refused_and_its_address_never_believed() {
        let mut forged = lease(5);
        forged.metadata.labels = None;
        forged
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                kubeflake_crds::strict_oracle::ADDRESS_ANNOTATION.into(),
                "10.9.9.9:7072".into(),
            );
        assert!(
            matches!(
                known(Ok(Event::Apply(forged.clone())), "s-strict-oracle"),
                Some(None)
            ),
            "not taken from the watch"
        );
        let body = serde_json::to_value(&forged).expect("serialises");
        let client = FakeApi::answering(move |_, _, _| (200, body.clone())).client();
        let err = KubeOracleStore::new(client, "ns", "s")
            .read()
            .await
            .expect_err("refused");
        assert!(
            matches!(err, OracleStoreError::Bad(OracleLeaseError::Foreign(_))),
            "{err}"
        );
        assert!(
            err.to_string().contains("Delete Lease s-strict-oracle"),
            "{err}"
        );
    }
}
