//! `hub recover` and `hub forget` on a Segment space (docs/safety.md rule 22): the pure
//! parts, on registries and counters as the operator writes them.

use kubeflake_crds::id_space::membership::RangeRecord;
use kubeflake_crds::id_space::registry::RECOVERY_REVISION_STEP;
use kubeflake_crds::id_space::segment_member::{
    SegmentCheck, check_records, count_up, generation_of,
};
use kubeflake_crds::id_space::segment_range::take;
use kubeflake_crds::id_space::{
    IdSpaceSpec, MemberId, MemberName, MemberRecord, SpaceCounterRecord, SpaceSequenceSpec,
};
use kubeflake_crds::segment_counter::Counter;
use kubeflake_crds::segment_counter::range::{Queued, Ranged};
use kubeflake_crds::sequence::Mode;

use super::segment::{self, Held, Reached, counter_end, kept_end};
use crate::error::{CliError, EXIT_NOT_FOUND, EXIT_USAGE};
use crate::output::Report;

const AT: (&str, &str) = ("orders", "kubeflake-space-orders");
/// The hub's counter as the backup holds it.
const BACKUP_NEXT: i64 = 1 << 30;

fn member(id: &str, name: &str, generation: i64) -> MemberRecord {
    MemberRecord {
        id: id.into(),
        name: name.into(),
        datacenter_id: 0,
        generation,
    }
}

/// A Segment space as a backup holds it: prod and dr joined, the counter at 2^30.
fn restored() -> IdSpaceSpec {
    let sequence = SpaceSequenceSpec {
        mode: Mode::Segment,
        ..SpaceSequenceSpec::default()
    };
    let mut spec = IdSpaceSpec::new(sequence, 1024);
    spec.registry.revision = 40;
    spec.registry.members = vec![member("uid-prod", "prod", 12), member("uid-dr", "dr", 7)];
    spec.segment = Some(SpaceCounterRecord { next: BACKUP_NEXT });
    spec
}

fn held(membership: &str, id: Option<&str>, counter: Option<u64>, kept: Option<u64>) -> Held {
    Held {
        membership: membership.into(),
        member_id: id.map(String::from),
        counter_end: counter,
        kept_end: kept,
    }
}

/// After the backup, prod took ranges up to 5 * 2^30 (queued in its counter), and dr one
/// up to 7 * 2^30 that it kept in its status, not queued yet.
fn clusters() -> Vec<Reached> {
    let g = 1u64 << 30;
    vec![
        Reached {
            cluster: "--member-context prod".into(),
            memberships: vec![held("shop/orders", Some("uid-prod"), Some(5 * g), None)],
        },
        Reached {
            cluster: "--member-kubeconfig dr.kubeconfig".into(),
            memberships: vec![held(
                "shop/orders",
                Some("uid-dr"),
                Some(3 * g),
                Some(7 * g),
            )],
        },
    ]
}

fn next_of(spec: &IdSpaceSpec) -> u64 {
    spec.segment.as_ref().map(|s| s.next as u64).unwrap()
}

#[test]
fn rule22_a_counter_holds_values_up_to_its_queued_ranges_limit_and_a_kept_range_counts() {
    let counter = |next, range| Counter {
        next,
        claims: 3,
        format: 3,
        resource_version: None,
        range,
    };
    assert_eq!(counter_end(&counter(900, None)), 900, "no range: next");
    let in_use = Some(Ranged {
        limit: 2_000,
        queued: None,
    });
    assert_eq!(counter_end(&counter(900, in_use)), 2_000);
    let queued = Some(Ranged {
        limit: 2_000,
        queued: Some(Queued {
            start: 8_000,
            limit: 9_000,
        }),
    });
    assert_eq!(counter_end(&counter(900, queued)), 9_000);
    // Claims moved into the queued range: next is inside it.
    assert_eq!(counter_end(&counter(8_500, queued)), 9_000);
    let kept = RangeRecord {
        start: 9_000,
        end: 12_000,
    };
    let h = held(
        "shop/orders",
        Some("uid-prod"),
        Some(9_000),
        kept_end(Some(&kept)),
    );
    assert_eq!(h.highest(), 12_000);
}

#[test]
fn rule22_recover_raises_the_counter_above_every_value_the_member_clusters_hold() {
    let spec = restored();
    let (next, report) = segment::recover(AT, &spec, &clusters(), None).unwrap();
    let g = 1u64 << 30;
    // dr's kept range ends highest: no range handed out after the backup lies above it.
    assert_eq!(next_of(&next), 7 * g);
    assert_eq!((report.next_before, report.next_after), (g, 7 * g));
    // A range taken from the recovered counter overlaps nothing a member holds.
    let (_, range) = take(next.segment.as_ref().unwrap(), 1 << 24).unwrap();
    assert!(range.start >= 7 * g, "{range:?}");
    // The revision as for blocks: 2^32 up, above any a member saw, so members accept it.
    assert_eq!(
        next.registry.revision,
        40 + RECOVERY_REVISION_STEP as i64,
        "{next:?}"
    );
    assert_eq!(report.members, 2);
    // The rest of the spec as read.
    assert_eq!(next.sequence, spec.sequence);
    assert_eq!(next.block_slots, spec.block_slots);
    let table = report.table();
    assert!(
        table.contains("segment.next 1073741824 -> 7516192768"),
        "{table}"
    );
    assert!(
        table.contains("--member-kubeconfig dr.kubeconfig"),
        "{table}"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["nextAfter"], 7 * g);
}

#[test]
fn rule22_recover_raises_every_members_generation_so_that_no_older_snapshot_matches_it() {
    let spec = restored();
    let (next, _) = segment::recover(AT, &spec, &clusters(), None).unwrap();
    let (prod, name) = (
        MemberId::new("uid-prod").unwrap(),
        MemberName::new("prod").unwrap(),
    );
    let after = generation_of(&next.registry, &prod, &name)
        .unwrap()
        .unwrap();
    assert_eq!(after, 12 + RECOVERY_REVISION_STEP);
    // prod wrote up to generation 500 after the backup (each write counts 1 up): its status,
    // and any older snapshot of its etcd, is apart from the hub's entry, at its next
    // contact and at every later one (its entry only counts up from there).
    for local in [0, 1, 12, 13, 500] {
        assert!(
            matches!(
                check_records(local, Some(after)),
                SegmentCheck::WentBack { .. }
            ),
            "status generation {local}"
        );
    }
    let (counted, g) = count_up(&next.registry, &prod, &name).unwrap();
    assert_eq!(g, after + 1);
    assert_eq!(counted.revision, next.registry.revision + 1);
}

#[test]
fn rule22_recover_never_lowers_the_counter_and_is_safe_to_run_twice() {
    let spec = restored();
    let (once, _) = segment::recover(AT, &spec, &clusters(), None).unwrap();
    let (twice, report) = segment::recover(AT, &once, &clusters(), None).unwrap();
    assert_eq!(next_of(&twice), next_of(&once));
    assert!(twice.registry.revision > once.registry.revision);
    for (a, b) in once.registry.members.iter().zip(&twice.registry.members) {
        assert!(b.generation > a.generation);
    }
    assert_eq!(report.next_before, report.next_after);
    // A hub counter above what the members hold stays where it is.
    let mut ahead = restored();
    ahead.segment = Some(SpaceCounterRecord { next: 1 << 40 });
    let (next, _) = segment::recover(AT, &ahead, &clusters(), None).unwrap();
    assert_eq!(next_of(&next), 1 << 40);
    // --above, one past the value the data holds.
    let (next, report) = segment::recover(AT, &spec, &clusters(), Some(1 << 50)).unwrap();
    assert_eq!(next_of(&next), (1 << 50) + 1);
    assert!(report.table().contains("(--above)"), "{}", report.table());
}

#[test]
fn rule22_recover_refuses_what_it_cannot_bound_saying_what_to_do_and_changes_nothing() {
    let spec = restored();
    let refused = |clusters: &[Reached], above| {
        let err = segment::recover(AT, &spec, clusters, above).unwrap_err();
        assert!(matches!(err, CliError::SegmentRefused { .. }), "{err}");
        assert_eq!(err.exit_code(), EXIT_USAGE);
        err.to_string()
    };
    let none = refused(&[], None);
    assert!(none.contains("--member-context"), "{none}");
    assert!(none.ends_with("nothing was changed"), "{none}");
    // dr's cluster not named: its ranges after the backup are known nowhere else.
    let only_prod = &clusters()[..1];
    let missing = refused(only_prod, None);
    assert!(missing.contains("dr (uid-dr)"), "{missing}");
    assert!(missing.contains("hub forget"), "{missing}");
    // ... not even with --above: a listed member must be read.
    refused(only_prod, Some(1 << 50));
    // A cluster with no membership of the space.
    let mut wrong = clusters();
    wrong.push(Reached {
        cluster: "--member-context staging".into(),
        memberships: Vec::new(),
    });
    assert!(refused(&wrong, None).contains("--member-context staging"));
    // A membership that contacted the hub, its counter Lease gone.
    let mut lost = clusters();
    lost[0].memberships[0].counter_end = None;
    assert!(refused(&lost, None).contains("counter Lease is missing"));
    // --above beyond what the counter holds.
    assert!(refused(&clusters(), Some(i64::MAX as u64)).contains("--above"));
    // A membership that never contacted the hub and has no counter bounds nothing: fine.
    let mut fresh = clusters();
    fresh[0]
        .memberships
        .push(held("shop/new", None, None, None));
    assert!(segment::recover(AT, &spec, &fresh, None).is_ok());
}

#[test]
fn rule22_forget_removes_a_segment_entry_and_a_member_still_running_only_gives_up_ranges() {
    let spec = restored();
    let (next, report) = segment::forget(AT, &spec, "prod").unwrap();
    assert!(next.registry.members.iter().all(|m| m.name != "prod"));
    assert_eq!(next.registry.members, vec![member("uid-dr", "dr", 7)]);
    assert_eq!(next.registry.revision, 41);
    // The counter does not move back: the ranges prod took are nobody else's, ever.
    assert_eq!(next.segment, spec.segment);
    assert!(report.segment && report.handed_back.is_empty());
    let table = report.table();
    assert!(table.contains("gives up the"), "{table}");
    // prod still runs, its status at generation 12: its next contact finds no entry, gives
    // its counter's ranges up and makes its entry again, as the hub's policy admits.
    let (prod, name) = (
        MemberId::new("uid-prod").unwrap(),
        MemberName::new("prod").unwrap(),
    );
    let hub = generation_of(&next.registry, &prod, &name).unwrap();
    assert_eq!(
        check_records(12, hub),
        SegmentCheck::WentBack { local: 12, hub: 0 }
    );
    // Made again at the new revision (42), above generation 12 and every other one its old
    // entry had: a snapshot of its etcd from before the forget never matches it.
    let (again, g) = count_up(&next.registry, &prod, &name).unwrap();
    assert_eq!((g, again.revision), (42, 42));
    // Its fresh range lies above every range handed out before.
    let (_, range) = take(next.segment.as_ref().unwrap(), 1 << 24).unwrap();
    assert!(range.start >= BACKUP_NEXT as u64);
    // By cluster ID too; an unknown member exits 3 naming the members.
    assert_eq!(segment::forget(AT, &spec, "uid-dr").unwrap().1.member, "dr");
    let err = segment::forget(AT, &spec, "staging").unwrap_err();
    assert_eq!(err.exit_code(), EXIT_NOT_FOUND);
    assert!(
        err.to_string().contains("its members are: dr, prod"),
        "{err}"
    );
}

#[test]
fn recover_takes_member_clusters_by_context_and_by_kubeconfig_file_each_labelled_by_its_flag() {
    use clap::Parser;

    use super::segment_read::member_clusters;
    use crate::cli::hub::HubCommand;
    use crate::cli::{Cli, Command};

    let cli = Cli::try_parse_from([
        "kubectl-kubeflake",
        "hub",
        "recover",
        "orders",
        "--kubeconfig",
        "hub.kubeconfig",
        "--member-context",
        "prod",
        "--member-context",
        "dr",
        "--member-kubeconfig",
        "eu.kubeconfig",
        "--above",
        "5000",
    ])
    .unwrap();
    let Command::Hub(hub) = cli.command else {
        panic!("hub parsed as another command");
    };
    let HubCommand::Recover(recover) = hub.command else {
        panic!("hub recover parsed as another command");
    };
    assert_eq!(recover.above, Some(5000));
    let clusters = member_clusters(&recover);
    let labels: Vec<&str> = clusters.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(
        labels,
        [
            "--member-context prod",
            "--member-context dr",
            "--member-kubeconfig eu.kubeconfig"
        ]
    );
    // A context is looked up in the hub's kubeconfig; a file with its current context.
    let (_, prod) = &clusters[0];
    assert_eq!(prod.context.as_deref(), Some("prod"));
    assert_eq!(
        prod.kubeconfig.as_deref(),
        Some(std::path::Path::new("hub.kubeconfig"))
    );
    let (_, eu) = &clusters[2];
    assert_eq!(eu.context, None);
    assert_eq!(
        eu.kubeconfig.as_deref(),
        Some(std::path::Path::new("eu.kubeconfig"))
    );
    assert!(
        Cli::try_parse_from([
            "kubectl-kubeflake",
            "hub",
            "recover",
            "orders",
            "--above",
            "x"
        ])
        .is_err()
    );
}
