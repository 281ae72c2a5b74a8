//! Which peers the oracle serves (docs/safety.md rule 16): a forwarder whose hello carries
//! a token the API server signed for a pod of the sequence's namespace, for the oracle's
//! audience ([`crate::peer_token`]), whose pod is among the claimants of the oracle Lease
//! this sidecar holds. Checked at the hello, and again for every request (a pod no longer
//! listed, or a token expired on a long-lived connection, is served no further). Every
//! refusal that is the peer's doing is counted and logged (at most once a minute per peer).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use super::Oracle;
use crate::peer_token::{LEEWAY_SECS, Peer, Side, TokenError};

/// How long checking a token may take (a fetch of the API server's keys included).
const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// Why a peer is not served: the status sent (HTTP's numbers: 401 its token is not
/// accepted, 503 ask again later) and the message.
pub(crate) type NotServed = (u16, String);

/// Who the forwarder that sent `token` from `ip` is, if the oracle serves it now.
pub(crate) async fn admit(
    oracle: &Arc<Oracle>,
    token: &str,
    ip: Option<IpAddr>,
) -> Result<Peer, NotServed> {
    let checked = tokio::time::timeout(CHECK_TIMEOUT, oracle.peers.verifier.verify(token))
        .await
        .unwrap_or_else(|_| {
            Err(TokenError::Keys(format!(
                "no answer within {CHECK_TIMEOUT:?}"
            )))
        });
    let peer = match checked {
        Ok(peer) => peer,
        Err(e) => {
            oracle
                .peers
                .log
                .refused(Side::Forwarder, ip, e.reason(), &e.to_string());
            let status = if e.is_retryable() { 503 } else { 401 };
            return Err((
                status,
                format!("this oracle does not accept the token: {e}"),
            ));
        }
    };
    claimant(oracle, &peer, ip)?;
    Ok(peer)
}

/// [`admit`] again for the next request of an admitted peer: still a claimant, and its
/// token not expired since.
pub(crate) fn still_admitted(
    oracle: &Oracle,
    peer: &Peer,
    ip: Option<IpAddr>,
) -> Result<(), NotServed> {
    let now = chrono::Utc::now().timestamp();
    if now >= peer.expires.saturating_add(LEEWAY_SECS) {
        let e = TokenError::Expired {
            exp: peer.expires,
            now,
        };
        oracle
            .peers
            .log
            .refused(Side::Forwarder, ip, e.reason(), &e.to_string());
        return Err((401, format!("{e}; connect again with a fresh token")));
    }
    claimant(oracle, peer, ip)
}

/// Whether `peer`'s pod is a claimant of the sequence, as the oracle Lease this sidecar
/// holds lists them (a pod just started is listed within seconds: 503, asked again).
fn claimant(oracle: &Oracle, peer: &Peer, ip: Option<IpAddr>) -> Result<(), NotServed> {
    match oracle.is_claimant(&peer.pod_uid) {
        Some(true) => Ok(()),
        Some(false) => {
            let message = format!(
                "pod {} ({}) is not a claimant of strict sequence {} (the operator lists the \
                 pods labelled for it; a pod just started is listed within seconds: retry)",
                peer.pod_name, peer.pod_uid, oracle.config.sequence
            );
            oracle
                .peers
                .log
                .refused(Side::Forwarder, ip, "not_claimant", &message);
            Err((503, message))
        }
        // No fault of the peer: not counted.
        None => Err((
            503,
            "strict: this sidecar is not the sequence's oracle now (a hand-over is under way)"
                .into(),
        )),
    }
}
