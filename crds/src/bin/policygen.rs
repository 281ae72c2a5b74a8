//! Writes the spec of the Lease ValidatingAdmissionPolicy (`kubeflake_crds::lease_policy`)
//! to every path given as an argument, or to stdout. The chart keeps it at
//! `charts/kubeflake/files/lease-policy-spec.yaml`; a test fails when that copy is stale.
//! With `--hub`, the hub's IdSpace policy and its binding
//! (`kubeflake_crds::id_space::hub_policy`), kept at `crds/idspace-hub-policy.yaml`.
#[path = "common/emit.rs"]
mod emit;

fn main() {
    let mut paths: Vec<String> = std::env::args().skip(1).collect();
    let text = if paths.first().map(String::as_str) == Some("--hub") {
        kubeflake_crds::id_space::hub_policy::policy_yaml()
    } else {
        paths.insert(0, String::new());
        kubeflake_crds::lease_policy::spec_yaml()
    };
    emit::emit_to("policygen", &text, &paths[1..]);
}
