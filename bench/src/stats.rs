//! What one measurement reports: a JSON line per run that `bench/run` collects, with
//! latencies read from an HDR histogram (exact to 3 significant digits at any percentile,
//! so p99.9 is as trustworthy as p50).

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latencies are recorded in nanoseconds, from 1 ns up to a minute.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("constant bounds are valid")
}

/// One run of one peer at one connection count.
#[derive(Debug, Serialize, PartialEq)]
pub struct Summary {
    pub peer: String,
    pub connections: usize,
    pub secs: f64,
    /// Answers that carried IDs.
    pub requests: u64,
    /// IDs in those answers.
    pub ids: u64,
    /// Answers that carried none (HTTP 503 refusals, error replies).
    pub refused: u64,
    pub requests_per_s: f64,
    pub ids_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl Summary {
    /// Sums up `latencies` (ns, successful requests only) over `secs`.
    pub fn new(
        peer: String,
        connections: usize,
        secs: f64,
        latencies: &Histogram<u64>,
        ids: u64,
        refused: u64,
    ) -> Summary {
        let us = |q: f64| latencies.value_at_quantile(q) as f64 / 1000.0;
        let requests = latencies.len();
        Summary {
            peer,
            connections,
            secs,
            requests,
            ids,
            refused,
            requests_per_s: requests as f64 / secs,
            ids_per_s: ids as f64 / secs,
            p50_us: us(0.5),
            p99_us: us(0.99),
            p999_us: us(0.999),
            max_us: latencies.max() as f64 / 1000.0,
        }
    }
}

/// Median, minimum and maximum of some runs (the spread `bench/run` reports).
pub fn median_min_max(mut xs: Vec<f64>) -> Option<(f64, f64, f64)> {
    xs.retain(|x| x.is_finite());
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n == 0 {
        return None;
    }
    let median = if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    };
    Some((median, xs[0], xs[n - 1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_turns_counts_into_rates_and_nanoseconds_into_microseconds() {
        let mut h = new_histogram();
        for ns in 1..=1000u64 {
            h.record(ns * 1000).unwrap(); // 1..=1000 us
        }
        let s = Summary::new("p".into(), 4, 2.0, &h, 5000, 7);
        assert_eq!(s.requests, 1000);
        assert_eq!(s.requests_per_s, 500.0);
        assert_eq!(s.ids_per_s, 2500.0);
        assert!((s.p50_us - 500.0).abs() <= 1.0, "{}", s.p50_us);
        assert!((s.p99_us - 990.0).abs() <= 1.0, "{}", s.p99_us);
        assert!((s.p999_us - 999.0).abs() <= 1.0, "{}", s.p999_us);
        assert_eq!(s.refused, 7);
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(
            median_min_max(vec![4.0, 1.0, 3.0, 2.0]),
            Some((2.5, 1.0, 4.0))
        );
        assert_eq!(median_min_max(vec![5.0, 1.0, 3.0]), Some((3.0, 1.0, 5.0)));
        assert_eq!(median_min_max(vec![f64::NAN]), None);
    }
}
