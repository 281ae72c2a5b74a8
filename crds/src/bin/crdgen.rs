//! Writes the IdSequence CRD: to the path given as the only argument, or to stdout.
fn main() {
    let yaml = kubeflake_crds::crd_yaml();
    match std::env::args().nth(1) {
        Some(path) => {
            if let Err(e) = std::fs::write(&path, yaml) {
                eprintln!("crdgen: cannot write {path}: {e}");
                std::process::exit(1);
            }
        }
        None => print!("{yaml}"),
    }
}
