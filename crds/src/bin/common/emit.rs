//! What both generators do with their text: write it to every path given, or to stdout
//! when there is none; exit 1 naming the path it cannot write.
pub fn emit_to(generator: &str, text: &str, paths: &[String]) {
    if paths.is_empty() {
        print!("{text}");
    }
    for path in paths {
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("{generator}: cannot write {path}: {e}");
            std::process::exit(1);
        }
    }
}
