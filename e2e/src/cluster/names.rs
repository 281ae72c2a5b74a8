//! Names the harness makes from test names.

/// Turns a test name into the start of a namespace name (a DNS label, with room for the
/// random suffix the API server appends).
pub(super) fn dns_label_prefix(prefix: &str) -> String {
    let mut label: String = prefix
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    label = label.trim_matches('-').to_owned();
    if label.is_empty() {
        "test".to_owned()
    } else {
        label
    }
}
