//! Clock skew against the API server, from the HTTP `Date` header of its answers.
//!
//! Uniqueness never depends on clocks agreeing (docs/safety.md rule 4), but a clock far ahead
//! would push fences far into the future, and a slot's next holder would have to wait for
//! them. So the sidecar measures its skew, exports it, and neither starts issuing nor raises
//! a lease fence while the skew is beyond `--max-clock-skew-ms`.
//!
//! `Date` has one-second resolution: the server's time lies in `[D, D + 1 s)`. The estimate
//! takes the middle of that second against the middle of the round trip; its uncertainty is
//! half a second plus half the round trip. A skew counts as too large only if it exceeds the
//! bound by more than the uncertainty.

use std::time::Duration;

use chrono::DateTime;
use kube::Client;

use crate::clock::Clock;

/// One measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Skew {
    /// Local wall clock minus the API server's, in milliseconds.
    pub(crate) local_minus_server_ms: i64,
    pub(crate) uncertainty_ms: u64,
}

impl Skew {
    /// Estimates from a `Date` header and the local send and receive instants (Unix ms).
    pub(crate) fn from_date_header(date: &str, sent_ms: u64, received_ms: u64) -> Option<Skew> {
        let server_ms = DateTime::parse_from_rfc2822(date).ok()?.timestamp_millis() + 500;
        let local_ms = ((sent_ms + received_ms) / 2) as i64;
        Some(Skew {
            local_minus_server_ms: local_ms - server_ms,
            uncertainty_ms: 500 + received_ms.saturating_sub(sent_ms) / 2,
        })
    }

    /// Whether the skew is certainly beyond `bound`.
    pub(crate) fn exceeds(&self, bound: Duration) -> bool {
        self.local_minus_server_ms.unsigned_abs() > bound.as_millis() as u64 + self.uncertainty_ms
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SkewError {
    #[error("cannot ask the API server for its time: {0}")]
    Kube(#[from] kube::Error),
    #[error("the API server's answer has no usable Date header")]
    NoDate,
}

/// Measures the skew with one `GET /version`.
pub(crate) async fn measure(client: &Client, clock: &dyn Clock) -> Result<Skew, SkewError> {
    let request = http::Request::get("/version")
        .body(kube::client::Body::from(Vec::new()))
        .map_err(kube::Error::HttpError)?;
    let sent = clock.wall_micros() / 1000;
    let response = client.send(request).await?;
    let received = clock.wall_micros() / 1000;
    let date = response
        .headers()
        .get(http::header::DATE)
        .and_then(|d| d.to_str().ok())
        .ok_or(SkewError::NoDate)?;
    Skew::from_date_header(date, sent, received).ok_or(SkewError::NoDate)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Sun, 22 Nov 2026 04:30:00 GMT = 1795321800000 ms.
    const DATE: &str = "Sun, 22 Nov 2026 04:30:00 GMT";
    const AT: u64 = 1_795_321_800_000;

    #[test]
    fn skew_is_the_local_midpoint_against_the_middle_of_the_servers_second() {
        let s = Skew::from_date_header(DATE, AT + 400, AT + 600).unwrap();
        assert_eq!(
            s,
            Skew {
                local_minus_server_ms: 0,
                uncertainty_ms: 600
            }
        );
        let ahead = Skew::from_date_header(DATE, AT + 3_600_500, AT + 3_600_500).unwrap();
        assert_eq!(ahead.local_minus_server_ms, 3_600_000);
    }

    #[test]
    fn only_skews_certainly_beyond_the_bound_count() {
        let bound = Duration::from_secs(10);
        let near = Skew::from_date_header(DATE, AT + 10_900, AT + 10_900).unwrap();
        assert!(
            !near.exceeds(bound),
            "10.4 s off, within 10 s + 0.5 s uncertainty"
        );
        let far = Skew::from_date_header(DATE, AT + 12_000, AT + 12_000).unwrap();
        assert!(far.exceeds(bound));
        let behind = Skew::from_date_header(DATE, AT - 3_600_000, AT - 3_600_000).unwrap();
        assert!(behind.exceeds(bound));
    }

    #[test]
    fn an_unparsable_date_gives_no_estimate() {
        assert_eq!(Skew::from_date_header("yesterday", AT, AT), None);
    }
}
