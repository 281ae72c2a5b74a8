//! Tests of [`super`].
use super::*;

fn template() -> SidecarTemplate {
    SidecarTemplate {
        image: "kubeflake-sidecar:test".into(),
        image_pull_policy: "IfNotPresent".into(),
        port: 7070,
        probe_port: 7071,
        requests: [("cpu".to_string(), Quantity("50m".into()))].into(),
        limits: [("memory".to_string(), Quantity("64Mi".into()))].into(),
    }
}

fn pod(value: Value) -> Pod {
    serde_json::from_value(value).expect("valid pod")
}

fn labelled() -> Value {
    json!({
        "metadata": {"name": "app", "labels": {"kubeflake.io/sequence": "orders"}},
        "spec": {"containers": [
            {"name": "app", "image": "app"},
            {"name": "helper", "image": "helper", "env": [{"name": "A", "value": "1"}]}
        ]}
    })
}

/// Applies the decision's patch (an injection or a re-invocation's completion) the way
/// the API server would.
fn apply(original: &Value, decision: &Decision) -> Value {
    let (Decision::Inject { patch, .. } | Decision::Complete { patch }) = decision else {
        panic!("expected a patch, got {decision:?}");
    };
    let mut doc = original.clone();
    let patch: json_patch::Patch = serde_json::from_value(patch.clone()).expect("a patch");
    json_patch::patch(&mut doc, &patch).expect("patch applies");
    doc
}

#[test]
fn a_labelled_pod_gets_a_native_sidecar_the_state_volume_and_the_url() {
    let original = labelled();
    let decision = decide(&pod(original.clone()), &template());
    let patched = pod(apply(&original, &decision));
    let spec = patched.spec.expect("spec");
    let init = spec.init_containers.expect("init containers");
    assert_eq!(init.len(), 1);
    let sidecar = &init[0];
    assert_eq!(sidecar.name, SIDECAR_NAME);
    assert_eq!(sidecar.restart_policy.as_deref(), Some("Always"));
    let env = sidecar.env.as_deref().expect("env");
    let value = |n: &str| {
        env.iter()
            .find(|e| e.name == n)
            .and_then(|e| e.value.clone())
    };
    assert_eq!(value("KUBEFLAKE_SEQUENCE").as_deref(), Some("orders"));
    assert_eq!(value("KUBEFLAKE_LISTEN").as_deref(), Some("127.0.0.1:7070"));
    let uid = env.iter().find(|e| e.name == "POD_UID").expect("POD_UID");
    let field = uid.value_from.as_ref().and_then(|v| v.field_ref.as_ref());
    assert_eq!(field.map(|f| f.field_path.as_str()), Some("metadata.uid"));
    assert_eq!(spec.volumes.expect("volumes")[0].name, STATE_VOLUME);
    for c in &spec.containers {
        let env = c.env.as_deref().expect("env added");
        let url = env
            .iter()
            .find(|e| e.name == URL_ENV)
            .expect("KUBEFLAKE_URL");
        assert_eq!(url.value.as_deref(), Some("http://127.0.0.1:7070"));
    }
    assert_eq!(
        spec.containers[1].env.as_ref().map(Vec::len),
        Some(3),
        "existing env kept, KUBEFLAKE_URL and KUBEFLAKE_SOCKET added"
    );
    let annotations = patched.metadata.annotations.expect("annotations");
    assert!(annotations.contains_key(INJECTED_ANNOTATION));
}

/// Every pod-identity variable of the contract is filled from its downward-API field (the
/// pod IP included: where a strict sequence's oracle takes forwarded requests), and the
/// oracle's port is declared on the sidecar beside the probe port.
#[test]
fn rule13_the_sidecar_gets_the_pod_ip_and_declares_the_oracle_port() {
    let original = labelled();
    let patched = pod(apply(
        &original,
        &decide(&pod(original.clone()), &template()),
    ));
    let init = patched.spec.and_then(|s| s.init_containers).expect("init");
    let env = init[0].env.as_deref().expect("env");
    for (name, path) in contract::POD_FIELDS {
        let var = env
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("{name} is injected"));
        let field = var.value_from.as_ref().and_then(|v| v.field_ref.as_ref());
        assert_eq!(field.map(|f| f.field_path.as_str()), Some(path), "{name}");
    }
    let ip = env.iter().find(|e| e.name == contract::POD_IP_ENV);
    let field = ip
        .and_then(|e| e.value_from.as_ref())
        .and_then(|v| v.field_ref.as_ref());
    assert_eq!(field.map(|f| f.field_path.as_str()), Some("status.podIP"));
    assert!(
        !env.iter().any(|e| e.name == contract::ORACLE_PORT_ENV),
        "the sidecar's default oracle port is the declared one: no variable needed"
    );
    for e in env {
        assert!(
            contract::SIDECAR_ENV_NAMES.contains(&e.name.as_str()),
            "{} is not a variable the sidecar reads",
            e.name
        );
    }
    let ports: Vec<(Option<&str>, i32, Option<&str>)> = init[0]
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.as_deref(), p.container_port, p.protocol.as_deref()))
        .collect();
    assert_eq!(
        ports,
        [
            (Some(contract::PROBE_PORT_NAME), 7071, Some("TCP")),
            (Some(contract::ORACLE_PORT_NAME), 7072, Some("TCP")),
        ]
    );
    assert_eq!(contract::DEFAULT_ORACLE_PORT, 7072);
}

#[test]
fn the_sidecar_runs_under_the_restricted_pod_security_profile() {
    let original = labelled();
    let patched = pod(apply(
        &original,
        &decide(&pod(original.clone()), &template()),
    ));
    let init = patched.spec.and_then(|s| s.init_containers).expect("init");
    let sc = init[0].security_context.clone().expect("security context");
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(
        sc.capabilities.and_then(|c| c.drop),
        Some(vec!["ALL".to_string()])
    );
    assert_eq!(
        sc.seccomp_profile.map(|p| p.type_).as_deref(),
        Some("RuntimeDefault")
    );
    let probe = init[0]
        .readiness_probe
        .clone()
        .and_then(|p| p.http_get)
        .expect("probe");
    assert_eq!(probe.port, IntOrString::Int(7071));
    let resources = init[0].resources.clone().expect("resources");
    assert!(resources.requests.is_some() && resources.limits.is_some());
}

#[test]
fn injection_is_idempotent_a_second_invocation_changes_nothing() {
    let original = labelled();
    let once = apply(&original, &decide(&pod(original.clone()), &template()));
    assert_eq!(
        decide(&pod(once), &template()),
        Decision::Skip("sidecar already injected")
    );
}

#[test]
fn existing_init_containers_volumes_and_annotations_are_kept_and_the_sidecar_goes_first() {
    let mut original = labelled();
    original["metadata"]["annotations"] = json!({"team": "orders"});
    original["spec"]["initContainers"] = json!([{"name": "migrate", "image": "m"}]);
    original["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    let patched = pod(apply(
        &original,
        &decide(&pod(original.clone()), &template()),
    ));
    let spec = patched.spec.expect("spec");
    let names: Vec<_> = spec
        .init_containers
        .as_deref()
        .expect("init")
        .iter()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(names, [SIDECAR_NAME, "migrate"]);
    // It runs after the sidecar has started, so it may take IDs too.
    let migrate = &spec.init_containers.as_deref().expect("init")[1];
    assert_eq!(env_value(migrate, URL_ENV), Some("http://127.0.0.1:7070"));
    assert_eq!(env_value(migrate, SOCKET_ENV), Some(SOCKET_PATH));
    assert!(
        migrate
            .volume_mounts
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|m| m.name == SOCKET_VOLUME && m.read_only == Some(true))
    );
    let sidecar = &spec.init_containers.as_deref().expect("init")[0];
    assert_eq!(
        env_value(sidecar, URL_ENV),
        None,
        "the sidecar is not its own client"
    );
    let volumes: Vec<_> = spec
        .volumes
        .as_deref()
        .expect("volumes")
        .iter()
        .map(|v| v.name.clone())
        .collect();
    assert_eq!(
        volumes,
        [
            "data",
            STATE_VOLUME,
            SOCKET_VOLUME,
            contract::ORACLE_TOKEN_VOLUME
        ]
    );
    let annotations = patched.metadata.annotations.expect("annotations");
    assert_eq!(annotations.get("team").map(String::as_str), Some("orders"));
    assert!(annotations.contains_key(INJECTED_ANNOTATION));
}

#[test]
fn an_app_that_sets_its_own_kubeflake_url_keeps_it() {
    let mut original = labelled();
    original["spec"]["containers"][0]["env"] = json!([{"name": URL_ENV, "value": "http://x"}]);
    let patched = pod(apply(
        &original,
        &decide(&pod(original.clone()), &template()),
    ));
    let env = patched.spec.expect("spec").containers[0]
        .env
        .clone()
        .expect("env");
    assert_eq!(env[0].value.as_deref(), Some("http://x"));
    assert_eq!(
        env.iter().filter(|e| e.name == URL_ENV).count(),
        1,
        "the app's own KUBEFLAKE_URL is not overridden or repeated"
    );
}

/// Issue 18: the Unix socket lives in its own emptyDir, mounted read-only into every app
/// container and writable into the sidecar, which serves it at KUBEFLAKE_SOCKET; the
/// state volume (the fence) is mounted into the sidecar alone (docs/safety.md rule 6).
#[test]
fn apps_get_the_socket_volume_and_kubeflake_socket_but_never_the_state_volume() {
    let original = labelled();
    let patched = pod(apply(
        &original,
        &decide(&pod(original.clone()), &template()),
    ));
    let spec = patched.spec.expect("spec");
    let sidecar = &spec.init_containers.as_ref().expect("init")[0];
    let sidecar_env = sidecar.env.as_deref().expect("env");
    let listen_unix = sidecar_env
        .iter()
        .find(|e| e.name == "KUBEFLAKE_LISTEN_UNIX")
        .and_then(|e| e.value.as_deref());
    assert_eq!(listen_unix, Some(SOCKET_PATH));
    assert!(
        sidecar_env
            .iter()
            .any(|e| e.name == "KUBEFLAKE_STATE_DIR" && e.value.as_deref() == Some(STATE_DIR)),
        "one name for the state directory in both modes"
    );
    let sidecar_mounts: Vec<_> = sidecar
        .volume_mounts
        .as_deref()
        .expect("mounts")
        .iter()
        .map(|m| (m.name.as_str(), m.mount_path.as_str(), m.read_only))
        .collect();
    assert_eq!(
        sidecar_mounts,
        [
            (STATE_VOLUME, STATE_DIR, None),
            (SOCKET_VOLUME, SOCKET_DIR, None),
            (
                contract::ORACLE_TOKEN_VOLUME,
                contract::ORACLE_TOKEN_DIR,
                Some(true)
            ),
        ]
    );
    assert!(!spec.containers.is_empty());
    for c in &spec.containers {
        let socket = c
            .env
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|e| e.name == SOCKET_ENV)
            .and_then(|e| e.value.as_deref());
        assert_eq!(socket, Some(SOCKET_PATH), "{}", c.name);
        let mounts = c.volume_mounts.as_deref().unwrap_or_default();
        assert!(
            mounts.iter().any(|m| m.name == SOCKET_VOLUME
                && m.mount_path == SOCKET_DIR
                && m.read_only == Some(true)),
            "{}: {mounts:?}",
            c.name
        );
        assert!(
            !mounts.iter().any(|m| m.name == STATE_VOLUME),
            "{}: an app container must not mount the fence's volume",
            c.name
        );
    }
}

/// Issue 54 (docs/safety.md rule 16): the sidecar, and only the sidecar, gets a projected
/// token bound to the pod for the oracle's own audience, an hour long, read-only at the
/// path the sidecar reads by default. An app container with it could pass for its pod on
/// the oracle port.
#[test]
fn rule16_the_sidecar_alone_mounts_a_projected_token_for_the_oracles_audience() {
    let mut original = labelled();
    original["spec"]["initContainers"] = json!([{"name": "migrate", "image": "m"}]);
    let patched = pod(apply(
        &original,
        &decide(&pod(original.clone()), &template()),
    ));
    let spec = patched.spec.expect("spec");
    let volume = spec
        .volumes
        .as_deref()
        .expect("volumes")
        .iter()
        .find(|v| v.name == contract::ORACLE_TOKEN_VOLUME)
        .expect("the oracle token volume")
        .clone();
    let sources = volume
        .projected
        .expect("projected")
        .sources
        .expect("sources");
    assert_eq!(sources.len(), 1);
    let token = sources[0]
        .service_account_token
        .as_ref()
        .expect("a service account token");
    assert_eq!(
        token.audience.as_deref(),
        Some(contract::ORACLE_TOKEN_AUDIENCE)
    );
    assert_eq!(token.expiration_seconds, Some(3600));
    assert_eq!(
        format!("{}/{}", contract::ORACLE_TOKEN_DIR, token.path),
        contract::ORACLE_TOKEN_PATH,
        "mounted where the sidecar reads it by default"
    );
    let init = spec.init_containers.as_deref().expect("init");
    let sidecar = &init[0];
    assert_eq!(sidecar.name, SIDECAR_NAME);
    let mount = sidecar
        .volume_mounts
        .as_deref()
        .expect("mounts")
        .iter()
        .find(|m| m.name == contract::ORACLE_TOKEN_VOLUME)
        .expect("the sidecar mounts it");
    assert_eq!(mount.mount_path, contract::ORACLE_TOKEN_DIR);
    assert_eq!(mount.read_only, Some(true));
    let apps = init[1..].iter().chain(&spec.containers);
    for c in apps {
        let mounts = c.volume_mounts.as_deref().unwrap_or_default();
        assert!(
            !mounts
                .iter()
                .any(|m| m.name == contract::ORACLE_TOKEN_VOLUME
                    || m.mount_path.starts_with(contract::ORACLE_TOKEN_DIR)),
            "{}: an app container must not mount the oracle token: {mounts:?}",
            c.name
        );
    }
    // A container added later (the webhook called again) gets no token either.
    let again = injected_then_added(json!({"name": "late", "image": "l"}));
    for c in pod(again).spec.expect("spec").containers {
        let mounts = c.volume_mounts.as_deref().unwrap_or_default();
        assert!(
            !mounts
                .iter()
                .any(|m| m.name == contract::ORACLE_TOKEN_VOLUME),
            "{}: {mounts:?}",
            c.name
        );
    }
}

#[test]
fn an_empty_sequence_label_is_denied_with_a_message_naming_the_label() {
    let mut empty = labelled();
    empty["metadata"]["labels"] = json!({SEQUENCE_LABEL: ""});
    let Decision::Deny(message) = decide(&pod(empty), &template()) else {
        panic!("an empty label must be denied");
    };
    assert!(
        message.contains("kubeflake.io/sequence label is empty"),
        "{message}"
    );
    assert!(!message.contains("retry"), "{message}");
}

#[test]
fn a_pod_without_a_service_account_token_is_denied_because_the_sidecar_needs_it() {
    let mut no_token = labelled();
    no_token["spec"]["automountServiceAccountToken"] = json!(false);
    let Decision::Deny(message) = decide(&pod(no_token.clone()), &template()) else {
        panic!("a pod without a token must be denied");
    };
    assert!(
        message.contains("automountServiceAccountToken: false"),
        "{message}"
    );
    assert!(message.contains(INJECT_ANNOTATION), "{message}");
    // Opted out, it is not our business; with the token mounted, it is injected.
    no_token["metadata"]["annotations"] = json!({INJECT_ANNOTATION: "false"});
    assert!(matches!(
        decide(&pod(no_token), &template()),
        Decision::Skip(_)
    ));
    let mut with_token = labelled();
    with_token["spec"]["automountServiceAccountToken"] = json!(true);
    assert!(matches!(
        decide(&pod(with_token), &template()),
        Decision::Inject { .. }
    ));
}

#[test]
fn a_part_that_cannot_be_serialised_fails_the_admission_instead_of_patching_null() {
    // serde_json refuses maps whose keys are not strings.
    let failure = serde_json::to_value(BTreeMap::from([((1, 2), 3)]))
        .expect_err("a map with tuple keys does not serialise");
    let result = patch_value("sidecar container", Err(failure));
    let expected = match &result {
        Err(error) => error.to_string(),
        Ok(value) => panic!("a failed serialisation must be an error, got {value}"),
    };
    let Decision::Fail(message) = inject_or_fail("orders", result) else {
        panic!("a failed patch must not be injected");
    };
    assert_eq!(message, expected);
    assert!(message.contains("sidecar container"), "{message}");
    assert!(message.contains("key must be a string"), "{message}");
    assert!(message.contains("bug in the operator"), "{message}");
    // A good serialisation passes through unchanged.
    let volume = patch_value("state volume", serde_json::to_value(json!({"name": "v"})));
    assert_eq!(volume.ok(), Some(json!({"name": "v"})));
}

#[test]
fn unlabelled_and_opted_out_pods_are_left_alone() {
    let mut unlabelled = labelled();
    unlabelled["metadata"]["labels"] = json!({"app": "x"});
    assert!(matches!(
        decide(&pod(unlabelled), &template()),
        Decision::Skip(_)
    ));
    let mut opted_out = labelled();
    opted_out["metadata"]["annotations"] = json!({INJECT_ANNOTATION: "false"});
    assert!(matches!(
        decide(&pod(opted_out), &template()),
        Decision::Skip(_)
    ));
    let mut opted_in = labelled();
    opted_in["metadata"]["annotations"] = json!({INJECT_ANNOTATION: "true"});
    assert!(matches!(
        decide(&pod(opted_in), &template()),
        Decision::Inject { .. }
    ));
}

/// The injected sidecar, from the patch applied to `original`.
fn injected_sidecar(original: Value) -> Container {
    let decision = decide(&pod(original.clone()), &template());
    let patched = pod(apply(&original, &decision));
    let init = patched
        .spec
        .expect("spec")
        .init_containers
        .expect("init containers");
    init.into_iter().next().expect("the sidecar")
}

#[test]
fn the_app_is_held_by_a_startup_probe_that_long_polls_the_sidecars_readyz() {
    let sidecar = injected_sidecar(labelled());
    let probe = sidecar.startup_probe.expect("a startup probe");
    let get = probe.http_get.expect("an HTTP startup probe");
    assert_eq!(
        get.path.as_deref(),
        Some("/readyz?wait=900"),
        "the probe long-polls /readyz for less than its timeout"
    );
    let readiness_port = sidecar
        .readiness_probe
        .and_then(|p| p.http_get)
        .map(|h| h.port);
    assert_eq!(get.port, IntOrString::Int(7071));
    assert_eq!(
        readiness_port,
        Some(get.port),
        "the same probe port as the readiness probe"
    );
    assert_eq!(
        probe.period_seconds,
        Some(1),
        "the shortest period there is"
    );
    let waited_secs = i64::from(probe.failure_threshold.expect("a failure threshold"))
        * i64::from(probe.period_seconds.unwrap_or(10));
    assert!(
        waited_secs >= 86_400,
        "a pod waiting for a free slot is not restarted for a day (the probe allows {waited_secs} s)"
    );
    assert!(
        sidecar.lifecycle.is_none(),
        "no postStart hook: the kubelet could not stop a pod inside it"
    );
}

#[test]
fn the_startup_probe_asks_for_a_wait_the_sidecar_accepts_and_shorter_than_its_timeout() {
    let probe = injected_sidecar(labelled())
        .startup_probe
        .expect("a startup probe");
    let path = probe
        .http_get
        .and_then(|h| h.path)
        .expect("a startup probe path");
    let wait_ms: u64 = path
        .split_once(&format!("{}=", contract::READYZ_WAIT_PARAM))
        .and_then(|(_, ms)| ms.parse().ok())
        .expect("a wait in ms");
    let timeout_ms = u64::try_from(probe.timeout_seconds.unwrap_or(1)).expect("positive") * 1000;
    assert!(
        wait_ms > 0 && wait_ms <= contract::READYZ_MAX_WAIT_MS,
        "{path}: the sidecar refuses a wait over {} ms",
        contract::READYZ_MAX_WAIT_MS
    );
    assert!(
        wait_ms < timeout_ms,
        "{path}: a held question must be answered before the kubelet's {timeout_ms} ms timeout"
    );
}

#[test]
fn readiness_and_liveness_probes_allow_a_busy_node_more_than_the_default_second() {
    let sidecar = injected_sidecar(labelled());
    for (kind, probe) in [
        ("readiness", sidecar.readiness_probe),
        ("liveness", sidecar.liveness_probe),
    ] {
        let probe = probe.unwrap_or_else(|| panic!("a {kind} probe"));
        let (period, timeout) = (
            probe.period_seconds.expect("a period"),
            probe
                .timeout_seconds
                .expect("a timeout, not the 1 s default"),
        );
        assert!(
            timeout > 1 && timeout <= period,
            "{kind}: timeout {timeout} s: over the 1 s default, at most the {period} s period"
        );
    }
}

#[test]
fn a_pod_that_opts_out_with_hold_app_false_starts_its_app_at_once() {
    let mut original = labelled();
    original["metadata"]["annotations"] = json!({HOLD_APP_ANNOTATION: "False"});
    let sidecar = injected_sidecar(original);
    assert!(
        sidecar.startup_probe.is_none() && sidecar.lifecycle.is_none(),
        "no startup probe and no hook: the app starts at once"
    );
    assert!(
        sidecar.readiness_probe.is_some(),
        "still probed for readiness"
    );

    let mut held = labelled();
    held["metadata"]["annotations"] = json!({HOLD_APP_ANNOTATION: "true"});
    assert!(
        injected_sidecar(held).startup_probe.is_some(),
        "any other value holds the app"
    );
}

#[test]
fn a_host_network_pod_is_denied_because_its_loopback_api_would_be_the_nodes() {
    let mut host = labelled();
    host["spec"]["hostNetwork"] = json!(true);
    let Decision::Deny(message) = decide(&pod(host.clone()), &template()) else {
        panic!("a hostNetwork pod must be denied");
    };
    for what in [
        "hostNetwork: true",
        "127.0.0.1:7070",
        "port 7071",
        "Remove hostNetwork",
        INJECT_ANNOTATION,
    ] {
        assert!(message.contains(what), "{what:?} not in: {message}");
    }
    // Opted out, it is not our business; hostNetwork: false is injected as usual.
    host["metadata"]["annotations"] = json!({INJECT_ANNOTATION: "false"});
    assert!(matches!(decide(&pod(host), &template()), Decision::Skip(_)));
    let mut pod_network = labelled();
    pod_network["spec"]["hostNetwork"] = json!(false);
    assert!(matches!(
        decide(&pod(pod_network), &template()),
        Decision::Inject { .. }
    ));
}

/// The env var `name` of `container`, if set by value.
fn env_value<'a>(container: &'a Container, name: &str) -> Option<&'a str> {
    container
        .env
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.as_deref())
}

/// The pod after the injection, with a container appended the way a later mutating
/// webhook would (a mesh proxy, a log shipper).
fn injected_then_added(late: Value) -> Value {
    let original = labelled();
    let mut injected = apply(&original, &decide(&pod(original.clone()), &template()));
    let containers = injected["spec"]["containers"]
        .as_array_mut()
        .expect("containers");
    containers.push(late);
    injected
}

#[test]
fn on_reinvocation_a_container_added_after_the_injection_gets_the_url_and_the_socket() {
    let later = injected_then_added(json!({"name": "late", "image": "late"}));
    let decision = decide(&pod(later.clone()), &template());
    assert!(
        matches!(decision, Decision::Complete { .. }),
        "{decision:?}"
    );
    let completed = apply(&later, &decision);
    let spec = pod(completed.clone()).spec.expect("spec");
    let late = spec.containers.last().expect("the late container");
    assert_eq!(late.name, "late");
    assert_eq!(env_value(late, URL_ENV), Some("http://127.0.0.1:7070"));
    assert_eq!(env_value(late, SOCKET_ENV), Some(SOCKET_PATH));
    let mounts = late.volume_mounts.as_deref().unwrap_or_default();
    assert_eq!(
        mounts
            .iter()
            .map(|m| (m.name.as_str(), m.mount_path.as_str(), m.read_only))
            .collect::<Vec<_>>(),
        [(SOCKET_VOLUME, SOCKET_DIR, Some(true))],
        "the socket, read-only, as the other app containers have it"
    );
    // Only the late container was touched: no second sidecar, volume or variable.
    let ops = match &decision {
        Decision::Complete { patch } => patch.as_array().expect("ops").clone(),
        other => panic!("{other:?}"),
    };
    assert!(
        ops.iter().all(|op| op["path"]
            .as_str()
            .is_some_and(|p| p.starts_with("/spec/containers/2/"))),
        "{ops:?}"
    );
    assert_eq!(spec.init_containers.map(|i| i.len()), Some(1));
    for c in &spec.containers[..2] {
        let env = c.env.as_deref().unwrap_or_default();
        assert_eq!(env.iter().filter(|e| e.name == URL_ENV).count(), 1);
    }
    // A further re-invocation finds every container complete: no patch.
    assert_eq!(
        decide(&pod(completed), &template()),
        Decision::Skip("sidecar already injected")
    );
}

#[test]
fn on_reinvocation_what_a_later_container_sets_itself_is_kept_and_only_the_rest_added() {
    let later = injected_then_added(json!({
        "name": "late",
        "image": "late",
        "env": [{"name": URL_ENV, "value": "http://x"}],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}]
    }));
    let completed = pod(apply(&later, &decide(&pod(later.clone()), &template())));
    let spec = completed.spec.expect("spec");
    let late = spec.containers.last().expect("the late container");
    let env = late.env.as_deref().unwrap_or_default();
    assert_eq!(
        env.iter()
            .map(|e| (e.name.as_str(), e.value.as_deref()))
            .collect::<Vec<_>>(),
        [(URL_ENV, Some("http://x")), (SOCKET_ENV, Some(SOCKET_PATH))]
    );
    let mounts: Vec<_> = late
        .volume_mounts
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(mounts, ["data", SOCKET_VOLUME]);
}

#[test]
fn a_pod_written_with_a_sidecar_but_without_the_socket_volume_is_left_as_written() {
    let mut by_hand = labelled();
    by_hand["spec"]["initContainers"] = json!([{"name": SIDECAR_NAME, "image": "kubeflake-sidecar:own", "restartPolicy": "Always"}]);
    let decision = decide(&pod(by_hand), &template());
    let Decision::Skip(reason) = decision else {
        panic!("mounting a volume the pod lacks would get it refused: {decision:?}");
    };
    assert!(reason.contains("left as written"), "{reason}");
}

/// A labelled pod as the webhook receives it: the API server's ServiceAccount plugin has
/// already added its token volume and mounted it in every container.
fn labelled_with_token_volume() -> Value {
    let mount = json!([{"name": "kube-api-access-x7k2p", "readOnly": true,
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]);
    json!({
        "metadata": {"name": "app", "labels": {"kubeflake.io/sequence": "orders"}},
        "spec": {
            "containers": [{"name": "app", "image": "app", "volumeMounts": mount}],
            "volumes": [
                {"name": "data", "emptyDir": {}},
                {"name": "kube-api-access-x7k2p", "projected": {"sources": []}}
            ]
        }
    })
}

#[test]
fn the_sidecar_mounts_the_pods_token_volume_as_the_service_account_plugin_would_so_it_has_nothing_to_add()
 {
    let sidecar = injected_sidecar(labelled_with_token_volume());
    let at_token_path: Vec<_> = sidecar
        .volume_mounts
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.mount_path == "/var/run/secrets/kubernetes.io/serviceaccount")
        .collect();
    assert_eq!(at_token_path.len(), 1, "{at_token_path:?}");
    assert_eq!(at_token_path[0].name, "kube-api-access-x7k2p");
    assert_eq!(at_token_path[0].read_only, Some(true));
}

#[test]
fn without_a_token_volume_the_sidecar_gets_no_token_mount_from_the_webhook() {
    // The plugin adds it after the webhook then (and the webhook is called again).
    let sidecar = injected_sidecar(labelled());
    assert!(
        sidecar
            .volume_mounts
            .unwrap_or_default()
            .iter()
            .filter(|m| m.name != contract::ORACLE_TOKEN_VOLUME)
            .all(|m| !m.mount_path.starts_with("/var/run/secrets")),
    );
}
