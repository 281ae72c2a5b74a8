//! Writes the IdSequence CRD: to every path given as an argument, or to stdout. The repo
//! keeps two copies (`crds/idsequence.yaml` and the Helm chart's
//! `charts/kubeflake/crds/idsequence.yaml`); tests fail when either is stale.
#[path = "common/emit.rs"]
mod emit;

fn main() {
    emit::emit("crdgen", &kubeflake_crds::crd_yaml());
}
