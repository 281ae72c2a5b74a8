//! What every pass shares: the client, the caches, the metrics, the Event recorder and the
//! operator's own memory of lease versions (for silence, docs/safety.md rule 9) and of its
//! last writes (expectations).
//!
//! That memory, and the metrics' per-sequence figures, follow the IdSequence cache: each
//! pass drops the entries of sequences the cache no longer has ([`Context::forget_gone`]).
//! A sequence's own last pass forgets it too, but a sequence can vanish without one (its
//! finalizer removed by hand, deleted while the operator was down, its namespace deleted),
//! and its entries and metric series must not stay forever.

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kubeflake_crds::IdSequence;

use super::expectations::Expectations;
use super::flow_schema::FlowSchemaKeeper;
use super::id_spaces::IdSpaces;
use super::silence::SilenceBook;
use crate::index::Index;
use crate::lease_policy_guard::LeasePolicyGate;
use crate::metrics::Metrics;
use crate::network_policies::SequencePolicies;

/// Everything a pass needs. Shared by all passes.
pub struct Context {
    pub client: Client,
    /// Labelled pods and slot Leases, indexed by sequence.
    pub pods: Index<Pod>,
    pub leases: Index<Lease>,
    /// The IdSequences, as the controller caches them.
    pub sequences: Store<IdSequence>,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// For each sequence, the version of each of its held leases and since when it was
    /// seen unchanged (monotonic clock).
    pub(crate) silence: SilenceBook,
    /// For each sequence, the lease writes of its last pass the cache may not show yet.
    pub(crate) expectations: Expectations,
    /// Whether slots and claims may be handed out: the Lease policy is in force
    /// ([`crate::lease_policy_guard`]; closed until `run.rs` connects the guard).
    pub lease_policy: LeasePolicyGate,
    /// The sequences' NetworkPolicies, when the operator makes them
    /// (`controller/network_policy.rs`); `None`: it makes none.
    pub network_policies: Option<Arc<SequencePolicies>>,
    /// The sidecars' FlowSchema, when the operator keeps its namespaces
    /// ([`super::flow_schema`]); `None`: the chart's list stays as installed.
    pub flow_schema: Option<Arc<FlowSchemaKeeper>>,
    /// The IdSpaceMemberships, when their CRD is installed (issue 55): which sequences are
    /// joined to an ID space ([`super::id_spaces`]); `None`: none is.
    pub id_spaces: Option<Arc<IdSpaces>>,
}

impl Context {
    pub fn new(
        client: Client,
        pods: Index<Pod>,
        leases: Index<Lease>,
        sequences: Store<IdSequence>,
        metrics: Arc<Metrics>,
        reporter: Reporter,
    ) -> Context {
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            pods,
            leases,
            sequences,
            metrics,
            silence: SilenceBook::default(),
            expectations: Expectations::default(),
            lease_policy: LeasePolicyGate::default(),
            network_policies: None,
            flow_schema: None,
            id_spaces: None,
        }
    }

    /// The context reading which sequences are joined to an ID space from `id_spaces`.
    pub fn with_id_spaces(self, id_spaces: Option<Arc<IdSpaces>>) -> Context {
        Context { id_spaces, ..self }
    }

    /// The context keeping the sidecars' FlowSchema to the sequences' namespaces.
    pub fn with_flow_schema(self, keeper: Option<Arc<FlowSchemaKeeper>>) -> Context {
        Context {
            flow_schema: keeper,
            ..self
        }
    }

    /// The context making each sequence's NetworkPolicy as `policies` say.
    pub fn with_network_policies(self, policies: Option<Arc<SequencePolicies>>) -> Context {
        Context {
            network_policies: policies,
            ..self
        }
    }

    /// The context with `gate` deciding whether slots and claims may be handed out.
    pub fn with_lease_policy(self, gate: LeasePolicyGate) -> Context {
        Context {
            lease_policy: gate,
            ..self
        }
    }

    /// Drops the silence records, expectations and metric figures of every sequence the
    /// IdSequence cache no longer holds. Nothing is dropped before the cache's first full
    /// list (an empty cache then says nothing about what exists). O(sequences remembered).
    pub fn forget_gone(&self) {
        let listed = futures::FutureExt::now_or_never(self.sequences.wait_until_ready());
        if !matches!(listed, Some(Ok(()))) {
            return;
        }
        // Every per-sequence map is keyed `namespace/name`.
        let exists = |key: &str| {
            key.split_once('/').is_some_and(|(ns, name)| {
                self.sequences
                    .get(&ObjectRef::new(name).within(ns))
                    .is_some()
            })
        };
        self.silence.retain(exists);
        self.expectations.retain(exists);
        self.metrics.retain(exists);
    }
}
