//! Reading what a `/metrics` endpoint answers (Prometheus' text exposition format), as far
//! as the tests need it: one series' value, or the sum of a metric's series. Comment lines
//! (`# HELP`, `# TYPE`) and lines that do not parse are skipped.

/// The value of the unlabelled series `name`, if it is exported.
pub fn value(text: &str, name: &str) -> Option<f64> {
    series(text, name)
        .find(|(labels, _)| labels.is_empty())
        .map(|(_, v)| v)
}

/// The value of the first series of `name` whose labels contain `fragment` (such as
/// `result="ok"`), if one is exported.
pub fn value_with(text: &str, name: &str, fragment: &str) -> Option<f64> {
    series(text, name)
        .find(|(labels, _)| labels.contains(fragment))
        .map(|(_, v)| v)
}

/// The sum of every series of `name`, whatever their labels (0 when none is exported).
pub fn sum(text: &str, name: &str) -> f64 {
    series(text, name).map(|(_, v)| v).sum()
}

/// Every series of `name`: its labels (between the braces, empty when it has none) and
/// its value.
fn series<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    text.lines().filter_map(move |line| {
        let rest = line.strip_prefix(name)?;
        let (labels, rest) = match rest.strip_prefix('{') {
            Some(inner) => inner.split_once('}')?,
            None if rest.starts_with(' ') => ("", rest),
            None => return None,
        };
        let value = rest.split_whitespace().next()?.parse().ok()?;
        Some((labels, value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# HELP kubeflake_up Whether it is up.
# TYPE kubeflake_up gauge
kubeflake_up 1
kubeflake_up_total 7
kubeflake_writes_total{result=\"ok\"} 3
kubeflake_writes_total{result=\"error\"} 2 1700000000000
kubeflake_bad{result=\"ok\"} not-a-number
";

    #[test]
    fn a_series_is_found_by_its_whole_name_and_labels() {
        assert_eq!(value(TEXT, "kubeflake_up"), Some(1.0));
        assert_eq!(
            value(TEXT, "kubeflake_writes_total"),
            None,
            "only labelled series"
        );
        assert_eq!(
            value_with(TEXT, "kubeflake_writes_total", "result=\"error\""),
            Some(2.0)
        );
        assert_eq!(sum(TEXT, "kubeflake_writes_total"), 5.0);
        assert_eq!(sum(TEXT, "kubeflake_missing"), 0.0);
        assert_eq!(value_with(TEXT, "kubeflake_bad", "ok"), None, "no value");
    }
}
