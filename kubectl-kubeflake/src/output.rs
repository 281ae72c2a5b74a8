//! Rendering reports: aligned tables for people, json/yaml for scripts.
//!
//! Each command builds one serializable report; the machine formats are that report as is
//! (its shape is documented in docs/kubectl-plugin.md), and the table is a view of it.

use serde::Serialize;

use crate::cli::Format;
use crate::error::CliError;

/// A report that can also be shown as a table.
pub trait Report: Serialize {
    fn table(&self) -> String;
}

/// Renders a report in the chosen format, ending with a newline.
pub fn render<R: Report>(format: Format, report: &R) -> Result<String, CliError> {
    match format {
        Format::Table => Ok(report.table()),
        Format::Json => serde_json::to_string_pretty(report)
            .map(|s| s + "\n")
            .map_err(|e| CliError::Render(e.to_string())),
        Format::Yaml => {
            serde_saphyr::to_string(report).map_err(|e| CliError::Render(e.to_string()))
        }
    }
}

/// Columns padded to their widest cell, separated by three spaces, like kubectl's tables.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let header_row: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header_row).chain(rows) {
        let last = row.len().saturating_sub(1);
        for (i, cell) in row.iter().enumerate() {
            out.push_str(cell);
            if i < last {
                let pad = widths[i] - cell.chars().count() + 3;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    }
    out
}

/// "KEY   value" lines for single-object reports.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    pairs
        .iter()
        .map(|(k, v)| format!("{k:<width$}   {v}\n"))
        .collect()
}

/// Groups digits in threes for people: 4096000 -> 4,096,000.
pub fn grouped(n: u128) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration in seconds as kubectl shows ages: 45s, 12m, 5h, 3d.
pub fn age(seconds: i64) -> String {
    match seconds {
        s if s < 0 => "0s".to_string(),
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_columns_line_up_under_their_headers() {
        let out = table(
            &["SLOT", "POD"],
            &[
                vec!["0".into(), "app-0".into()],
                vec!["10".into(), "a".into()],
            ],
        );
        let lines: Vec<&str> = out.lines().collect();
        let pod_col = lines[0].find("POD").unwrap();
        assert_eq!(lines[1].find("app-0"), Some(pod_col));
        assert_eq!(lines[2].find('a'), Some(pod_col));
    }

    #[test]
    fn numbers_are_grouped_in_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(4_096_000), "4,096,000");
        assert_eq!(grouped(1_000_000_000), "1,000,000,000");
    }

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(age(-3), "0s");
        assert_eq!(age(59), "59s");
        assert_eq!(age(600), "10m");
        assert_eq!(age(3 * 3600), "3h");
        assert_eq!(age(5 * 86400), "5d");
    }
}
