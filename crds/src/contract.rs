//! The operator <-> sidecar injection contract: every name both sides must agree on.
//!
//! The operator's webhook (`operator/src/inject/`) writes these into the pods it
//! changes; the sidecar's command line (`sidecar/src/main.rs`) reads them. Both use the
//! constants below and nothing else, so a rename is one change here and both sides follow.
//! Apps read [`URL_ENV`] (and nothing else from this list).

/// The sidecar's subcommand in an injected pod.
pub const CLUSTER_SUBCOMMAND: &str = "cluster";

/// Name of the injected sidecar (a restartable init container); also how a second
/// webhook invocation recognises a pod it already changed.
pub const SIDECAR_NAME: &str = "kubeflake-sidecar";

/// Environment of every app container: where the sidecar answers, e.g.
/// `http://127.0.0.1:7070`.
pub const URL_ENV: &str = "KUBEFLAKE_URL";

/// Environment of every app container: the sidecar's Unix socket, e.g.
/// `curl --unix-socket "$KUBEFLAKE_SOCKET" http://kubeflake/id`.
pub const SOCKET_ENV: &str = "KUBEFLAKE_SOCKET";
/// Sidecar environment: the path of the Unix socket to serve the ID API on as well.
pub const LISTEN_UNIX_ENV: &str = "KUBEFLAKE_LISTEN_UNIX";

/// Sidecar environment: the IdSequence to take part in (in the pod's namespace).
pub const SEQUENCE_ENV: &str = "KUBEFLAKE_SEQUENCE";
/// Sidecar environment: the address of the ID API (`127.0.0.1:<port>`).
pub const LISTEN_ENV: &str = "KUBEFLAKE_LISTEN";
/// Sidecar environment: the address of `/healthz` and `/readyz` for kubelet probes.
pub const PROBE_LISTEN_ENV: &str = "KUBEFLAKE_PROBE_LISTEN";
/// Sidecar environment: the directory of its durable state (fence file, segment
/// counter file). One name in both modes.
pub const STATE_DIR_ENV: &str = "KUBEFLAKE_STATE_DIR";
/// The name development builds before release 0.1.0 set for [`STATE_DIR_ENV`] in cluster
/// mode (0.1.0 itself injects [`STATE_DIR_ENV`]); the sidecar still reads it so pods
/// injected by such a build keep their fence.
pub const LEGACY_FENCE_DIR_ENV: &str = "KUBEFLAKE_FENCE_DIR";
/// Sidecar environment: `text` or `json` logs.
pub const LOG_FORMAT_ENV: &str = "KUBEFLAKE_LOG_FORMAT";
/// Sidecar environment (downward API `metadata.name`).
pub const POD_NAME_ENV: &str = "POD_NAME";
/// Sidecar environment (downward API `metadata.namespace`).
pub const POD_NAMESPACE_ENV: &str = "POD_NAMESPACE";
/// Sidecar environment (downward API `metadata.uid`): the holder identity in slot leases.
pub const POD_UID_ENV: &str = "POD_UID";

/// Sidecar environment (downward API `status.podIP`): where a strict sequence's oracle
/// takes forwarded requests (with [`ORACLE_PORT_ENV`]).
pub const POD_IP_ENV: &str = "POD_IP";
/// Sidecar environment: the port of the strict oracle's forwarding listener on the pod IP.
pub const ORACLE_PORT_ENV: &str = "KUBEFLAKE_ORACLE_PORT";
/// Default port of the strict oracle's forwarding listener (on the pod IP; only a strict
/// sequence's oracle listens on it).
pub const DEFAULT_ORACLE_PORT: u16 = 7072;
/// Name of the oracle port on the sidecar container.
pub const ORACLE_PORT_NAME: &str = "strict-oracle";

/// The audience of the token a strict sequence's sidecars show each other on the oracle
/// port (docs/safety.md rule 16): a token for this audience is good for nothing else, and
/// the API server's own tokens (audience: the API server) are refused on the port.
pub const ORACLE_TOKEN_AUDIENCE: &str = "kubeflake.io/strict-oracle";
/// The projected `serviceAccountToken` volume that carries it: the sidecar alone mounts it.
pub const ORACLE_TOKEN_VOLUME: &str = "kubeflake-oracle-token";
/// Where the sidecar mounts that volume (read-only).
pub const ORACLE_TOKEN_DIR: &str = "/var/run/secrets/kubeflake.io/strict-oracle";
/// The token file's name in [`ORACLE_TOKEN_DIR`].
pub const ORACLE_TOKEN_FILE_NAME: &str = "token";
/// The token file's path in the sidecar container: the default of [`ORACLE_TOKEN_FILE_ENV`].
pub const ORACLE_TOKEN_PATH: &str = "/var/run/secrets/kubeflake.io/strict-oracle/token";
/// How long a projected oracle token lives; the kubelet renews it at 80% of that.
pub const ORACLE_TOKEN_EXPIRATION_SECONDS: i64 = 3600;
/// Sidecar environment (not injected: its default is [`ORACLE_TOKEN_PATH`]): the file the
/// sidecar reads its oracle token from, each time it opens or answers a connection.
pub const ORACLE_TOKEN_FILE_ENV: &str = "KUBEFLAKE_ORACLE_TOKEN_FILE";

/// Every environment variable the sidecar's cluster mode reads, the legacy name
/// included: a webhook of any release may inject only these (the sidecar's tests check
/// this list against its command line, and every released webhook's env against it).
pub const SIDECAR_ENV_NAMES: [&str; 13] = [
    SEQUENCE_ENV,
    LISTEN_ENV,
    LISTEN_UNIX_ENV,
    PROBE_LISTEN_ENV,
    STATE_DIR_ENV,
    LEGACY_FENCE_DIR_ENV,
    LOG_FORMAT_ENV,
    POD_NAME_ENV,
    POD_NAMESPACE_ENV,
    POD_UID_ENV,
    POD_IP_ENV,
    ORACLE_PORT_ENV,
    ORACLE_TOKEN_FILE_ENV,
];

/// The downward-API field each pod-identity variable is filled from.
pub const POD_FIELDS: [(&str, &str); 4] = [
    (POD_NAME_ENV, "metadata.name"),
    (POD_NAMESPACE_ENV, "metadata.namespace"),
    (POD_UID_ENV, "metadata.uid"),
    (POD_IP_ENV, "status.podIP"),
];

/// Default port of the ID API on 127.0.0.1.
pub const DEFAULT_PORT: u16 = 7070;
/// Default port of the probe listener.
pub const DEFAULT_PROBE_PORT: u16 = 7071;
/// Name of the probe port on the sidecar container.
pub const PROBE_PORT_NAME: &str = "kubeflake-probe";

/// Liveness path: 503 once the process cannot serve again (the kubelet restarts it).
pub const HEALTHZ_PATH: &str = "/healthz";
/// Readiness path: 503 while the sidecar waits for a slot or is stopping.
pub const READYZ_PATH: &str = "/readyz";
/// Query parameter of [`READYZ_PATH`]: `/readyz?wait=<ms>` answers as soon as the sidecar
/// is ready, or 503 once `<ms>` have passed (one long-polled request instead of one every
/// few milliseconds). The injected startup probe asks this way (and the postStart hook of
/// pods injected by 0.1.0, [`WAIT_READY_SUBCOMMAND`]); a sidecar that predates it ignores
/// the query and answers at once, and the probe or hook asks again after its interval.
pub const READYZ_WAIT_PARAM: &str = "wait";
/// The longest `wait` a sidecar accepts, ms; a longer one is a 400 (which the hook, like
/// any answer that comes at once, meets by asking again after its interval).
pub const READYZ_MAX_WAIT_MS: u64 = 10_000;

/// The emptyDir that keeps the pod-local fence across sidecar restarts (docs/safety.md
/// rule 6). Only the sidecar mounts it: an app must not be able to touch the fence.
pub const STATE_VOLUME: &str = "kubeflake-state";
/// Where [`STATE_VOLUME`] is mounted in the sidecar, and the cluster-mode default of
/// the state directory.
pub const STATE_DIR: &str = "/var/run/kubeflake";

/// The emptyDir that holds the sidecar's Unix socket, mounted into the sidecar and every
/// app container. Never the state volume: an app must not be able to touch the fence.
pub const SOCKET_VOLUME: &str = "kubeflake-socket";
/// Where [`SOCKET_VOLUME`] is mounted, in the sidecar and in the app containers.
pub const SOCKET_DIR: &str = "/var/run/kubeflake-socket";
/// The socket's path in an injected pod.
pub const SOCKET_PATH: &str = "/var/run/kubeflake-socket/kubeflake.sock";
/// Permission bits of the socket: every user in the pod may connect. Who can reach it at
/// all is decided by which containers mount [`SOCKET_VOLUME`].
pub const SOCKET_MODE: u32 = 0o666;

/// Numeric non-root user and group the sidecar runs as (the image's user too).
pub const SIDECAR_UID: i64 = 65532;

/// Pod annotation that switches injection off: `kubeflake.io/inject: "false"`.
pub const INJECT_ANNOTATION: &str = "kubeflake.io/inject";
/// Pod annotation the webhook sets on pods it changed, with the operator's version.
pub const INJECTED_ANNOTATION: &str = "kubeflake.io/injected";

/// Whether an [`INJECTED_ANNOTATION`] value names a release older than 0.2.0. No annotation
/// (`None`: the pod was not injected by a webhook) is not old; an unreadable version is
/// (such pods are kept away rather than risk a duplicate or a misorder).
pub fn injected_before_0_2(version: Option<&str>) -> bool {
    let Some(version) = version else {
        return false;
    };
    let mut parts = version.split(['.', '-', '+']).map(|p| p.parse::<u64>());
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => (major, minor) < (0, 2),
        _ => true,
    }
}

/// Pod annotation that lets the app containers start at once, before the sidecar can issue
/// (as before 0.1.0): `kubeflake.io/hold-app: "false"`. By default the sidecar's startup
/// probe (a long poll of [`READYZ_PATH`]) holds the app until the sidecar would answer `/id`.
pub const HOLD_APP_ANNOTATION: &str = "kubeflake.io/hold-app";

/// The sidecar binary's path in its image (the image holds nothing else).
pub const SIDECAR_BINARY: &str = "/kubeflake-sidecar";
/// The sidecar's subcommand that returns once the sidecar in the same container is ready
/// (its `/readyz` answers 200): the postStart hook that 0.1.0's webhook injected, so the
/// kubelet starts the app containers only after the sidecar holds its slot or segment
/// block. Kept for the pods that carry it; the webhook now injects a startup probe.
pub const WAIT_READY_SUBCOMMAND: &str = "wait-ready";

/// Reason of the Warning Event the sidecar records on its pod when it has waited for a
/// slot for a while, with the sequence's `Exhausted` condition when it is set.
pub const WAITING_FOR_SLOT_REASON: &str = "WaitingForSlot";

/// The app-facing URL of a sidecar listening on `port`.
pub fn sidecar_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

/// The ID API's listen address for `port`: loopback only, the app shares the pod's
/// network namespace and nothing else needs it.
pub fn listen_addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// The probe listener's address for `port`: every address, because the kubelet probes
/// the pod IP. It answers probes only (see the sidecar's HTTP layer).
pub fn probe_listen_addr(port: u16) -> String {
    format!("0.0.0.0:{port}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_app_url_and_the_listen_address_name_the_same_loopback_port() {
        assert_eq!(sidecar_url(DEFAULT_PORT), "http://127.0.0.1:7070");
        assert_eq!(listen_addr(DEFAULT_PORT), "127.0.0.1:7070");
        assert!(sidecar_url(8080).ends_with(&listen_addr(8080)));
    }

    #[test]
    fn the_oracle_token_path_is_its_file_in_its_own_directory() {
        assert_eq!(
            ORACLE_TOKEN_PATH,
            format!("{ORACLE_TOKEN_DIR}/{ORACLE_TOKEN_FILE_NAME}")
        );
        assert_ne!(ORACLE_TOKEN_DIR, STATE_DIR);
        assert_ne!(ORACLE_TOKEN_DIR, SOCKET_DIR);
    }

    #[test]
    fn the_socket_lives_in_its_own_volume_never_in_the_state_volume() {
        assert!(SOCKET_PATH.starts_with(&format!("{SOCKET_DIR}/")));
        assert_ne!(SOCKET_VOLUME, STATE_VOLUME);
        assert!(!SOCKET_DIR.starts_with(&format!("{STATE_DIR}/")) && SOCKET_DIR != STATE_DIR);
        assert!(!STATE_DIR.starts_with(&format!("{SOCKET_DIR}/")));
    }

    #[test]
    fn every_sidecar_variable_is_distinct() {
        let names = [
            URL_ENV,
            SOCKET_ENV,
            LISTEN_UNIX_ENV,
            SEQUENCE_ENV,
            LISTEN_ENV,
            PROBE_LISTEN_ENV,
            STATE_DIR_ENV,
            LEGACY_FENCE_DIR_ENV,
            LOG_FORMAT_ENV,
            POD_NAME_ENV,
            POD_NAMESPACE_ENV,
            POD_UID_ENV,
            POD_IP_ENV,
            ORACLE_PORT_ENV,
        ];
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
    }

    /// The API server refuses a pod whose container port name is not an IANA service name
    /// (at most 15 characters, lower-case letters, digits and inner hyphens, a letter in
    /// it): every injected pod would be refused (found on the node with "kubeflake-oracle").
    #[test]
    fn injected_port_names_are_valid_iana_service_names() {
        for name in [PROBE_PORT_NAME, ORACLE_PORT_NAME] {
            assert!(name.len() <= 15, "{name}: more than 15 characters");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{name}"
            );
            assert!(!name.starts_with('-') && !name.ends_with('-') && !name.contains("--"));
            assert!(name.bytes().any(|b| b.is_ascii_lowercase()), "{name}");
        }
    }
}
