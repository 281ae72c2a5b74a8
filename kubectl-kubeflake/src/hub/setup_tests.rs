//! `hub init` and `hub add-member`'s pure parts: the flags' checks, the Role the design
//! gives members, the shared part of a sequence, and the Secret a member applies.

use kube::config::Kubeconfig;
use kubeflake_crds::id_space::{IdSpaceSpec, SpaceSequenceSpec};
use kubeflake_crds::sequence::IdSequenceSpec;

use super::init::{check, parse_sequence_ref, shared_part};
use super::member_secret::{HubAddress, address_in, member_secret};
use super::setup::{MEMBER_ROLE, differences, member_binding, member_role};
use crate::error::{CliError, EXIT_USAGE};
use crate::output::Report;

#[test]
fn from_sequence_must_be_namespace_slash_name() {
    assert_eq!(
        parse_sequence_ref("shop/orders").unwrap(),
        ("shop", "orders")
    );
    for bad in ["orders", "/orders", "shop/", "a/b/c"] {
        let err = parse_sequence_ref(bad).unwrap_err();
        assert_eq!(err.exit_code(), EXIT_USAGE);
        assert!(
            err.to_string().starts_with("--from-sequence: "),
            "{bad}: {err}"
        );
    }
}

#[test]
fn the_member_role_is_get_list_watch_update_of_the_one_space_and_nothing_else() {
    let role = member_role("kubeflake-space-orders", "orders");
    assert_eq!(role.metadata.name.as_deref(), Some(MEMBER_ROLE));
    let rules = role.rules.unwrap();
    assert_eq!(rules.len(), 1);
    let rule = &rules[0];
    assert_eq!(
        rule.api_groups.as_deref(),
        Some(&["kubeflake.io".to_string()][..])
    );
    assert_eq!(
        rule.resources.as_deref(),
        Some(&["idspaces".to_string()][..])
    );
    assert_eq!(
        rule.resource_names.as_deref(),
        Some(&["orders".to_string()][..])
    );
    assert_eq!(rule.verbs, ["get", "list", "watch", "update"]);
    let binding = member_binding("kubeflake-space-orders", "member-prod");
    assert_eq!(binding.role_ref.name, MEMBER_ROLE);
    let subject = &binding.subjects.unwrap()[0];
    assert_eq!(
        (subject.kind.as_str(), subject.name.as_str()),
        ("ServiceAccount", "member-prod")
    );
}

#[test]
fn the_shared_part_of_a_sequence_leaves_its_datacenter_out_and_keeps_strict() {
    let mut spec: IdSequenceSpec = serde_json::from_value(serde_json::json!({
        "datacenterId": 3,
        "layout": {"datacenterBits": 2, "workerBits": 8},
        "timeUnit": "10ms"
    }))
    .unwrap();
    let shared = shared_part(&spec);
    assert_eq!(shared.layout, spec.layout);
    assert_eq!(shared.time_unit, spec.time_unit);
    assert!(!shared.strict);
    spec = serde_json::from_value(serde_json::json!({
        "mode": "Segment", "segment": {"strict": true}
    }))
    .unwrap();
    let strict = IdSpaceSpec::new(shared_part(&spec), 64);
    assert!(strict.space().is_err(), "a strict sequence makes no space");
}

/// Rule 22: `hub init` makes a Segment space (ranges of one counter, no blocks: its block
/// slots are not checked), and refuses a strict one in either mode, saying why.
#[test]
fn rule22_init_makes_a_segment_space_and_refuses_a_strict_one() {
    let sequence = |mode: &str, strict: bool| -> IdSequenceSpec {
        serde_json::from_value(serde_json::json!({
            "mode": mode, "segment": {"strict": strict}
        }))
        .unwrap()
    };
    let segment = IdSpaceSpec::new(shared_part(&sequence("Segment", false)), 64);
    assert!(segment.space().is_err(), "a Segment space has no blocks");
    check(&segment).unwrap();
    let strict = IdSpaceSpec::new(shared_part(&sequence("Segment", true)), 64);
    let err = check(&strict).unwrap_err();
    assert_eq!(err.exit_code(), EXIT_USAGE);
    assert!(err.to_string().contains("cannot span clusters"), "{err}");
    let mut snowflake = IdSpaceSpec::new(SpaceSequenceSpec::default(), 64);
    check(&snowflake).unwrap();
    snowflake.block_slots = 3;
    let err = check(&snowflake).unwrap_err();
    assert_eq!(
        err.exit_code(),
        EXIT_USAGE,
        "a Snowflake space's blocks are checked: {err}"
    );
}

#[test]
fn an_existing_space_with_other_parameters_is_named_field_by_field() {
    let stored = IdSpaceSpec::new(SpaceSequenceSpec::default(), 32);
    let mut wanted = stored.clone();
    assert!(differences(&stored, &wanted).is_empty());
    wanted.block_slots = 64;
    wanted.tolerance_seconds = 600;
    assert_eq!(
        differences(&stored, &wanted),
        vec![
            "blockSlots is 32, not 64".to_string(),
            "toleranceSeconds is 3600, not 600".to_string()
        ]
    );
    let err = CliError::SpaceDiffers {
        space: "ns/orders".into(),
        fields: "blockSlots is 32, not 64".into(),
    };
    assert_eq!(err.exit_code(), EXIT_USAGE);
}

const KUBECONFIG: &str = r#"
apiVersion: v1
kind: Config
current-context: admin
clusters:
- name: hub
  cluster: {server: "https://10.0.0.1:6443", certificate-authority-data: Q0EK}
- name: other
  cluster: {server: "https://10.0.0.2:6443"}
contexts:
- name: admin
  context: {cluster: hub, user: admin}
- name: second
  context: {cluster: other, user: admin}
users:
- name: admin
  user: {token: secret}
"#;

#[test]
fn the_hub_address_comes_from_the_chosen_context_or_server() {
    let config = Kubeconfig::from_yaml(KUBECONFIG).unwrap();
    let hub = address_in(&config, None, None).unwrap();
    assert_eq!(
        hub,
        HubAddress {
            server: "https://10.0.0.1:6443".into(),
            ca_data: Some("Q0EK".into())
        }
    );
    let other = address_in(&config, Some("second"), Some("https://hub.example:443")).unwrap();
    assert_eq!(other.server, "https://hub.example:443");
    assert_eq!(other.ca_data, None);
    let err = address_in(&config, Some("nope"), None).unwrap_err();
    assert!(
        err.to_string()
            .contains("context \"nope\" is not in the kubeconfig; pass --context NAME"),
        "{err}"
    );
}

#[test]
fn the_member_secret_holds_an_inline_token_kubeconfig_for_the_operator() {
    let hub = HubAddress {
        server: "https://10.0.0.1:6443".into(),
        ca_data: Some("Q0EK".into()),
    };
    let secret = member_secret(&hub, ("orders", "member-prod"), "tok", "kubeflake-system");
    assert_eq!(
        secret.0.metadata.name.as_deref(),
        Some("kubeflake-hub-orders")
    );
    assert_eq!(
        secret.0.metadata.namespace.as_deref(),
        Some("kubeflake-system")
    );
    let text = &secret.0.string_data.as_ref().unwrap()["kubeconfig"];
    let config = Kubeconfig::from_yaml(text).unwrap();
    assert_eq!(config.current_context.as_deref(), Some("hub"));
    let raw: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(raw["users"][0]["user"]["token"], "tok");
    assert_eq!(raw["users"][0]["name"], "member-prod");
    let cluster = config.clusters[0].cluster.as_ref().unwrap();
    assert_eq!(cluster.certificate_authority_data.as_deref(), Some("Q0EK"));
    assert!(
        secret.table().starts_with("apiVersion: v1\nkind: Secret\n"),
        "{}",
        secret.table()
    );
}

#[test]
fn a_join_names_the_space_the_member_and_the_secret_and_refuses_a_bad_name() {
    let spec = super::join::spec(
        "orders",
        "prod",
        ("orders", "kubeflake-space-orders"),
        "kubeflake-hub-orders",
    )
    .unwrap();
    assert_eq!(
        (
            spec.sequence.as_str(),
            spec.member_name.as_str(),
            spec.hub_secret.as_str()
        ),
        ("orders", "prod", "kubeflake-hub-orders")
    );
    assert_eq!(spec.space.namespace, "kubeflake-space-orders");
    let err = super::join::spec("orders", "Prod", ("orders", "ns"), "s").unwrap_err();
    assert_eq!(err.exit_code(), EXIT_USAGE);
    assert!(
        err.to_string().starts_with("MEMBER: member name \"Prod\""),
        "{err}"
    );
}
