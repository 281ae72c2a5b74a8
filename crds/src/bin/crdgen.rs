//! Writes a CRD: to every path given as an argument, or to stdout. Without a flag, the
//! IdSequence CRD, of which the repo keeps two copies (`crds/idsequence.yaml` and the Helm
//! chart's `charts/kubeflake/crds/idsequence.yaml`); with `--idspace` the hub's IdSpace CRD
//! (`crds/idspace.yaml`), with `--membership` the IdSpaceMembership CRD
//! (`crds/idspacemembership.yaml`). Tests fail when a copy is stale.
#[path = "common/emit.rs"]
mod emit;

fn main() {
    let mut paths: Vec<String> = std::env::args().skip(1).collect();
    let text = match paths.first().map(String::as_str) {
        Some("--idspace") => kubeflake_crds::id_space::crd_yaml(),
        Some("--membership") => kubeflake_crds::id_space::membership_crd_yaml(),
        _ => {
            paths.insert(0, String::new());
            kubeflake_crds::crd_yaml()
        }
    };
    emit::emit_to("crdgen", &text, &paths[1..]);
}
