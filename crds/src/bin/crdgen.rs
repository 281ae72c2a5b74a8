//! Writes the IdSequence CRD: to every path given as an argument, or to stdout. The repo
//! keeps two copies (`crds/idsequence.yaml` and the Helm chart's
//! `charts/kubeflake/crds/idsequence.yaml`); tests fail when either is stale.
fn main() {
    let yaml = kubeflake_crds::crd_yaml();
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() {
        print!("{yaml}");
    }
    for path in paths {
        if let Err(e) = std::fs::write(&path, &yaml) {
            eprintln!("crdgen: cannot write {path}: {e}");
            std::process::exit(1);
        }
    }
}
