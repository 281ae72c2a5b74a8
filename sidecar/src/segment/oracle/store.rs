//! Where the oracle Lease is read and written: the API server in a cluster, a map in
//! tests. Every write is a replace carrying the `resourceVersion` read: a compare-and-swap
//! (409 Conflict when the Lease moved on).

use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use kube::{Api, Client};
use kubeflake_crds::strict_oracle::{OracleLease, OracleLeaseError, oracle_name};
use kubeflake_runtime::kube_error::{self, KubeErrorKind};

/// How long one read or write of the oracle Lease may take before it is abandoned (a
/// write whose outcome is unknown is harmless: the next one is conditional on a newer
/// read, and the serving bound counts from the last *known* success).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Why the oracle Lease could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OracleStoreError {
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
pub trait OracleStore: Send + Sync + 'static {
    fn read(&self) -> BoxFuture<'_, Result<OracleLease, OracleStoreError>>;
    /// Writes `lease` if it is still the version it carries; returns what was written.
    fn replace(&self, lease: Lease) -> BoxFuture<'_, Result<OracleLease, OracleStoreError>>;
}

/// The oracle Lease in the API server.
pub struct KubeOracleStore {
    api: Api<Lease>,
    name: String,
}

impl KubeOracleStore {
    pub fn new(client: Client, namespace: &str, sequence: &str) -> KubeOracleStore {
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
}

#[cfg(test)]
pub mod fake {
    //! An in-memory oracle Lease with versions, shared by the sidecars of a test.

    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use kubeflake_crds::strict_oracle::new_oracle_lease;

    pub struct FakeOracleStore {
        lease: Mutex<(u64, Lease)>,
        /// Every call fails as unavailable (an API server outage).
        pub down: AtomicBool,
    }

    impl FakeOracleStore {
        pub fn new(lease_secs: i32) -> FakeOracleStore {
            let mut lease = new_oracle_lease("s", "ns");
            lease.spec.as_mut().unwrap().lease_duration_seconds = Some(lease_secs);
            lease.metadata.resource_version = Some("1".into());
            lease.metadata.uid = Some("lease-uid-1".into());
            FakeOracleStore {
                lease: Mutex::new((1, lease)),
                down: AtomicBool::new(false),
            }
        }

        pub fn holder(&self) -> Option<String> {
            let guard = self.lease.lock().unwrap();
            OracleLease::parse(guard.1.clone()).unwrap().holder
        }

        /// Changes `leaseDurationSeconds` as a new version (as an admin's edit would).
        pub fn set_lease_secs(&self, secs: i32) {
            let mut guard = self.lease.lock().unwrap();
            guard.0 += 1;
            let version = guard.0.to_string();
            let lease = &mut guard.1;
            lease.spec.as_mut().unwrap().lease_duration_seconds = Some(secs);
            lease.metadata.resource_version = Some(version);
        }

        /// The Lease's term (`leaseTransitions`).
        pub fn term(&self) -> i32 {
            let guard = self.lease.lock().unwrap();
            OracleLease::parse(guard.1.clone()).unwrap().term
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
                Ok(OracleLease::parse(written)?)
            })
        }
    }
}
