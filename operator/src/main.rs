use clap::Parser;

/// Reconciles kubeflake IdSequences (not implemented yet: this binary only parses flags).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {}

fn main() {
    let _args = Args::parse();
    eprintln!("kubeflake-operator: not implemented yet; see the operator issue");
    std::process::exit(2);
}
