//! What both generators do with their text: write it to every path given as an argument,
//! or to stdout when there is none; exit 1 naming the path it cannot write.
pub fn emit(generator: &str, text: &str) {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() {
        print!("{text}");
    }
    for path in paths {
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("{generator}: cannot write {path}: {e}");
            std::process::exit(1);
        }
    }
}
