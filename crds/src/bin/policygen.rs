//! Writes the spec of the Lease ValidatingAdmissionPolicy (`kubeflake_crds::lease_policy`)
//! to every path given as an argument, or to stdout. The chart keeps it at
//! `charts/kubeflake/files/lease-policy-spec.yaml`; a test fails when that copy is stale.
fn main() {
    let yaml = kubeflake_crds::lease_policy::spec_yaml();
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() {
        print!("{yaml}");
    }
    for path in paths {
        if let Err(e) = std::fs::write(&path, &yaml) {
            eprintln!("policygen: cannot write {path}: {e}");
            std::process::exit(1);
        }
    }
}
