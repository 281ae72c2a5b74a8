//! The hub commands' pure parts: the reports of `members` and `blocks`, and `forget` and
//! `recover` through the registry's own transitions, on registries stored as an IdSpace
//! stores them.

use kubeflake_crds::Tick;
use kubeflake_crds::id_space::{
    BlockRecord, BlockState, IdSpaceSpec, MemberRecord, Registry, RegistryRecord, Space,
    SpaceSequenceSpec,
};
use kubeflake_crds::timebase::DEFAULT_EPOCH;

use super::change;
use super::view::{self, BlockStatus, TickTime};
use crate::error::{CliError, EXIT_NOT_FOUND};
use crate::output::Report;

const AT: (&str, &str) = ("orders", "kubeflake-space-orders");
/// Unix ms of the default epoch (2025-01-01T00:00:00Z).
const EPOCH_MS: u64 = 1_735_689_600_000;
/// "Now" in the tests: one day after the epoch (1 ms ticks).
const NOW_TICK: u64 = 86_400_000;
const NOW_MS: u64 = EPOCH_MS + NOW_TICK;

fn member(id: &str, name: &str, generation: i64) -> MemberRecord {
    MemberRecord {
        id: id.into(),
        name: name.into(),
        datacenter_id: 0,
        generation,
    }
}

fn block(index: i64, term: i64, floor: i64, owner: Option<(&str, i64)>) -> BlockRecord {
    BlockRecord {
        index,
        term,
        floor,
        owner: owner.map(|(o, _)| o.to_string()),
        bound: owner.map(|(_, b)| b),
    }
}

/// Two members: prod holds blocks 0 (bound in 43 minutes) and 2 (bound in 2 hours), dr
/// holds block 5, lapsed 5 minutes ago; block 1 is free with a floor.
fn spec() -> IdSpaceSpec {
    let now = NOW_TICK as i64;
    let mut spec = IdSpaceSpec::new(SpaceSequenceSpec::default(), 64);
    spec.registry = RegistryRecord {
        revision: 7,
        members: vec![member("uid-prod", "prod", 4), member("uid-dr", "dr", 2)],
        blocks: vec![
            block(0, 1, 0, Some(("uid-prod", now + 43 * 60_000))),
            block(1, 2, now - 1000, None),
            block(2, 1, 500, Some(("uid-prod", now + 2 * 3_600_000))),
            block(5, 3, 900, Some(("uid-dr", now - 5 * 60_000))),
        ],
    };
    spec
}

fn parts(spec: &IdSpaceSpec) -> (Space, Registry) {
    let space = spec.space().unwrap();
    let registry = spec.registry(&space).unwrap();
    (space, registry)
}

#[test]
fn a_tick_is_shown_as_when_it_ends_and_how_far_that_is() {
    let space = spec().space().unwrap();
    let t = TickTime::new(
        &space.sequence().timebase,
        Tick(NOW_TICK + 43 * 60_000),
        NOW_MS,
    );
    assert_eq!(t.ends, "2025-01-02T00:43:00.001Z");
    assert_eq!(t.in_seconds, 43 * 60);
    assert_eq!(t.cell(), "2025-01-02T00:43:00.001Z (in 43m)");
    assert_eq!(view::relative(-300), "5m ago");
    assert_eq!(DEFAULT_EPOCH, "2025-01-01T00:00:00Z");
}

#[test]
fn members_show_their_blocks_and_their_nearest_bound() {
    let (space, registry) = parts(&spec());
    let report = view::members(AT, &space, &registry, NOW_MS);
    assert_eq!(report.revision, 7);
    let prod = report.members.iter().find(|m| m.name == "prod").unwrap();
    assert_eq!(prod.id, "uid-prod");
    assert_eq!(prod.generation, 4);
    assert_eq!(prod.blocks, vec![0, 2]);
    assert_eq!(prod.nearest_bound.as_ref().unwrap().in_seconds, 43 * 60);
    let dr = report.members.iter().find(|m| m.name == "dr").unwrap();
    assert_eq!(dr.nearest_bound.as_ref().unwrap().in_seconds, -5 * 60);
    let table = report.table();
    assert!(table.starts_with("NAME"), "{table}");
    assert!(table.contains("(in 43m)"), "{table}");
    assert!(table.contains("(5m ago)"), "{table}");
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["members"][0]["nearestBound"]["inSeconds"], -300);
    assert_eq!(json["members"][0]["datacenterId"], 0);
}

#[test]
fn blocks_show_ranges_owners_and_lapsed_bounds_and_unused_ones_only_with_all() {
    let spec = spec();
    let (space, registry) = parts(&spec);
    let report = view::blocks(AT, &spec, &space, &registry, false, NOW_MS);
    let indexes: Vec<u32> = report.blocks.iter().map(|b| b.index).collect();
    assert_eq!(indexes, vec![0, 1, 2, 5]);
    let b0 = &report.blocks[0];
    assert_eq!((b0.first_slot, b0.last_slot), (0, 63));
    assert_eq!(b0.status, BlockStatus::Held);
    assert_eq!(b0.owner_name.as_deref(), Some("prod"));
    assert!(!b0.lapsed);
    let b1 = &report.blocks[1];
    assert_eq!(
        (b1.status, b1.owner.as_deref(), b1.term),
        (BlockStatus::Free, None, 2)
    );
    let b5 = &report.blocks[3];
    assert_eq!((b5.first_slot, b5.last_slot), (320, 383));
    assert_eq!(b5.status, BlockStatus::Lapsed);
    assert!(b5.lapsed);
    assert!(report.table().contains("lapsed"), "{}", report.table());
    let all = view::blocks(AT, &spec, &space, &registry, true, NOW_MS);
    assert_eq!(all.blocks.len(), 16);
    assert_eq!(all.blocks[3].status, BlockStatus::Unused);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["blocks"][3]["status"], "lapsed");
    assert_eq!(json["blocks"][3]["ownerName"], "dr");
}

#[test]
fn an_empty_space_says_so_in_words() {
    let spec = IdSpaceSpec::new(SpaceSequenceSpec::default(), 64);
    let (space, registry) = parts(&spec);
    let members = view::members(AT, &space, &registry, NOW_MS).table();
    assert!(members.contains("has no members yet"), "{members}");
    let blocks = view::blocks(AT, &spec, &space, &registry, false, NOW_MS).table();
    assert!(
        blocks.contains("no block was ever used (16 blocks of 64 slots"),
        "{blocks}"
    );
}

#[test]
fn rule18_forget_hands_back_every_block_of_the_member_with_its_floor_at_its_bound() {
    let spec = spec();
    let (space, registry) = parts(&spec);
    let (next, report) = change::forget(AT, &spec, &space, &registry, "prod", NOW_MS).unwrap();
    let after = next.registry(&space).unwrap();
    assert!(after.members().all(|(_, m)| m.name.as_str() != "prod"));
    assert_eq!(after.revision(), 8);
    for (index, bound) in [(0, NOW_TICK + 43 * 60_000), (2, NOW_TICK + 2 * 3_600_000)] {
        let b = space.block(index).unwrap();
        assert!(
            matches!(after.block(b), BlockState::Free { floor, .. } if floor.0 == bound),
            "block {index}: {:?}",
            after.block(b)
        );
    }
    // dr's block is untouched, and so is the free one.
    assert_eq!(
        after.block(space.block(5).unwrap()),
        registry.block(space.block(5).unwrap())
    );
    assert_eq!(report.member, "prod");
    assert_eq!(report.id, "uid-prod");
    let floors: Vec<(u32, u64)> = report
        .handed_back
        .iter()
        .map(|h| (h.index, h.new_floor.tick))
        .collect();
    assert_eq!(
        floors,
        vec![(0, NOW_TICK + 43 * 60_000), (2, NOW_TICK + 2 * 3_600_000)]
    );
    assert!(
        report.table().contains("2 block(s) handed back"),
        "{}",
        report.table()
    );
    // The rest of the spec is kept as read.
    assert_eq!(next.block_slots, spec.block_slots);
    assert_eq!(next.sequence, spec.sequence);
}

#[test]
fn forget_finds_a_member_by_its_cluster_id_too() {
    let spec = spec();
    let (space, registry) = parts(&spec);
    let (_, report) = change::forget(AT, &spec, &space, &registry, "uid-dr", NOW_MS).unwrap();
    assert_eq!(report.member, "dr");
    assert_eq!(report.handed_back.len(), 1);
}

#[test]
fn forget_refuses_an_unknown_member_naming_the_members_and_exits_3() {
    let spec = spec();
    let (space, registry) = parts(&spec);
    let err = change::forget(AT, &spec, &space, &registry, "staging", NOW_MS).unwrap_err();
    assert!(matches!(err, CliError::UnknownMember { .. }));
    assert_eq!(err.exit_code(), EXIT_NOT_FOUND);
    let text = err.to_string();
    assert!(
        text.starts_with(
            "\"staging\" is not a member of idspace kubeflake-space-orders/orders (by name or \
             cluster ID); its members are: dr, prod"
        ),
        "{text}"
    );
    assert!(text.contains("kubectl kubeflake hub members orders -n kubeflake-space-orders"));
}

#[test]
fn rule21_recover_frees_every_block_with_its_floor_above_any_bound_a_member_can_hold() {
    let spec = spec();
    let (space, registry) = parts(&spec);
    let (next, report) = change::recover(AT, &spec, &space, &registry, 60, NOW_MS);
    let after = next.registry(&space).unwrap();
    // tolerance 3600 s + renewal 300 s + skew 60 s ahead of now, in 1 ms ticks.
    let lowest = NOW_TICK + (3600 + 300 + 60) * 1000;
    for b in space.blocks() {
        assert!(
            matches!(after.block(b), BlockState::Free { floor, .. } if floor.0 >= lowest),
            "block {}: {:?}",
            b.get(),
            after.block(b)
        );
    }
    assert_eq!(report.freed, vec![0, 2, 5]);
    assert_eq!(report.lowest_floor.tick, lowest);
    assert_eq!(report.members, 2);
    assert!(after.revision() > registry.revision());
}

#[test]
fn hub_commands_name_what_is_missing_or_wrong_in_their_arguments() {
    use clap::Parser;
    use clap::error::ErrorKind;

    use crate::cli::hub::HubCommand;
    use crate::cli::{Cli, Command};

    let parse = |args: &[&str]| {
        Cli::try_parse_from(std::iter::once("kubectl-kubeflake").chain(args.iter().copied()))
    };
    let err = parse(&["hub", "forget", "orders"]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MissingRequiredArgument);
    assert!(err.to_string().contains("<MEMBER>"), "{err}");
    let err = parse(&["hub", "members"]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MissingRequiredArgument);
    assert!(err.to_string().contains("<SPACE>"), "{err}");
    let err = parse(&["hub", "recover", "orders", "--skew-seconds", "soon"]).unwrap_err();
    assert!(err.to_string().contains("--skew-seconds"), "{err}");
    let err = parse(&["hub", "grow", "orders"]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidSubcommand);

    let cli = parse(&[
        "hub",
        "forget",
        "orders",
        "prod",
        "--dry-run",
        "-n",
        "hub-ns",
    ])
    .unwrap();
    let Command::Hub(hub) = cli.command else {
        panic!("hub parsed as another command");
    };
    let HubCommand::Forget(forget) = hub.command else {
        panic!("hub forget parsed as another command");
    };
    assert_eq!(
        (
            forget.space.space.as_str(),
            forget.member.as_str(),
            forget.dry_run
        ),
        ("orders", "prod", true)
    );
    assert_eq!(forget.space.cluster.namespace.as_deref(), Some("hub-ns"));
}
