//! Writes the spec of the Lease ValidatingAdmissionPolicy (`kubeflake_crds::lease_policy`)
//! to every path given as an argument, or to stdout. The chart keeps it at
//! `charts/kubeflake/files/lease-policy-spec.yaml`; a test fails when that copy is stale.
#[path = "common/emit.rs"]
mod emit;

fn main() {
    emit::emit("policygen", &kubeflake_crds::lease_policy::spec_yaml());
}
