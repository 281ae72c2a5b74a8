//! A Segment member's entry in the hub's registry, and what it tells about the member's own
//! records (docs/safety.md rule 22, the Segment analogue of [`check_hub`]'s `LocalBehind`).
//!
//! A joined Segment sequence's counter Lease and its IdSpaceMembership's status live in the
//! member's etcd: restored from an older snapshot, they come back together, the counter's
//! `next` below values its sidecars already claimed, and nothing local can tell. So a
//! Segment member keeps an entry in `spec.registry.members` (the fields a Snowflake member
//! has, nothing new: an operator of an earlier release, in another member cluster, rewrites
//! the IdSpace through its own struct and would drop a field it does not know, which the
//! hub's policy then refuses as a change of another member's entry): its cluster ID, its
//! name, datacenter 0, and a generation. The operator counts that generation up by 1 in
//! every range it takes and in a write of its own at every contact that finds the
//! counter's `next` moved since the last count-up ([`counted_up_since`]), then records it
//! in the membership's `status.generation`, **after** the hub write.
//!
//! At each contact, before anything is taken or queued, [`check_records`] compares the
//! two: a status behind the hub's entry means the member's records went back (its etcd
//! restored; or the status write after a count-up was lost): the counter's ranges are given
//! up (the range in use and the queued one, and a range kept in the status) and fresh ones
//! taken: a gap, never a duplicate. What stays undetected: a restore from a snapshot after
//! which no contact counted up, that is values claimed within the last contact period
//! before the restore.
//!
//! The entry is made and counted up by the same transitions the hub's policy admits for a
//! Snowflake member's (a new entry under its own name at the new revision, later the same id
//! with the generation counted up by 1) and the registry's revision counted up by 1 in the
//! same write ([`count_up`]).
//!
//! [`check_hub`]: super::check_hub

use super::identity::{MemberId, MemberName};
use super::join::JoinError;
use super::registry::first_generation;
use super::resource::{MemberRecord, RegistryRecord};

/// What comparing the membership's status with the member's entry on the hub found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentCheck {
    /// The status holds the generation last written on the hub: go on.
    Current,
    /// The status and the hub's entry differ: the member's records went back (its etcd
    /// restored from an older snapshot, or a status write lost), or its entry was
    /// forgotten on the hub after it wrote. Give the counter's ranges up before taking
    /// anything, then keep the hub's generation.
    WentBack { local: u64, hub: u64 },
}

/// Compares `local` (the membership's `status.generation`) with `hub` (this member's
/// entry's generation; `None` when it has none). A member that never wrote has neither.
/// Any difference gives the ranges up: the status is only ever written after the hub, so
/// it is behind after a restore or a lost write, and ahead only when the entry was removed
/// (`hub forget`) and its numbers start again; in both cases the counter may be below
/// values already claimed, and giving its ranges up costs only a gap.
pub fn check_records(local: u64, hub: Option<u64>) -> SegmentCheck {
    let hub = hub.unwrap_or(0);
    if hub == local {
        SegmentCheck::Current
    } else {
        SegmentCheck::WentBack { local, hub }
    }
}

/// This member's entry's generation in `registry`, if it has one. Refuses an entry of its
/// cluster ID under another name and its name held by another cluster ID, as a join does.
pub fn generation_of(
    registry: &RegistryRecord,
    id: &MemberId,
    name: &MemberName,
) -> Result<Option<u64>, JoinError> {
    for m in &registry.members {
        if m.id == id.as_str() && m.name != name.as_str() {
            return Err(JoinError::DuplicateIdentity {
                id: id.clone(),
                existing: MemberName::new(&m.name).unwrap_or_else(|_| name.clone()),
                requested: name.clone(),
            });
        }
        if m.name == name.as_str() && m.id != id.as_str() {
            return Err(JoinError::NameTaken {
                name: name.clone(),
                existing: MemberId::new(&m.id).unwrap_or_else(|_| id.clone()),
                requested: id.clone(),
            });
        }
    }
    Ok(registry
        .members
        .iter()
        .find(|m| m.id == id.as_str())
        .map(|m| u64::try_from(m.generation).unwrap_or(0)))
}

/// The registry with this member's entry counted up, and its new generation: made at the
/// new revision when it has none (above every generation an earlier entry of this cluster
/// reached, so a copy from before a `hub forget` never matches it), else counted up by 1;
/// the revision counted up by 1.
/// Every other entry and every block unchanged (the hub's policy admits exactly this).
pub fn count_up(
    registry: &RegistryRecord,
    id: &MemberId,
    name: &MemberName,
) -> Result<(RegistryRecord, u64), JoinError> {
    let mut next = registry.clone();
    next.revision = next.revision.saturating_add(1);
    let generation = match generation_of(registry, id, name)? {
        Some(g) => g.saturating_add(1),
        None => {
            next.members.push(MemberRecord {
                id: id.to_string(),
                name: name.to_string(),
                datacenter_id: 0,
                generation: 0,
            });
            first_generation(u64::try_from(next.revision).unwrap_or(0))
        }
    };
    for m in next.members.iter_mut().filter(|m| m.id == id.as_str()) {
        m.generation = i64::try_from(generation).unwrap_or(i64::MAX);
    }
    Ok((next, generation))
}

/// Whether a contact must count the member's generation up: the counter's `next` is not
/// the one read before the last count-up (`None`: none since this operator started). Values
/// claimed since then are covered once the hub holds a generation above every status a
/// snapshot of before their claim can hold.
pub fn counted_up_since(last: Option<u64>, next: u64) -> bool {
    last != Some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> MemberId {
        MemberId::new(s).unwrap()
    }
    fn name(s: &str) -> MemberName {
        MemberName::new(s).unwrap()
    }

    #[test]
    fn rule22_a_status_behind_the_members_entry_on_the_hub_means_its_records_went_back() {
        assert_eq!(check_records(0, None), SegmentCheck::Current, "never wrote");
        assert_eq!(check_records(7, Some(7)), SegmentCheck::Current);
        // A snapshot taken before the last count-up (or the status write after it lost).
        assert_eq!(
            check_records(6, Some(7)),
            SegmentCheck::WentBack { local: 6, hub: 7 }
        );
        // A snapshot taken before the first contact wrote.
        assert_eq!(
            check_records(0, Some(1)),
            SegmentCheck::WentBack { local: 0, hub: 1 }
        );
        // The entry forgotten on the hub after this member wrote: its numbers start again.
        assert_eq!(
            check_records(9, None),
            SegmentCheck::WentBack { local: 9, hub: 0 }
        );
    }

    #[test]
    fn rule22_the_first_count_up_makes_the_entry_at_the_new_revision_and_each_later_one_adds_1() {
        let (prod, dr) = (id("uid-prod"), id("uid-dr"));
        let other = RegistryRecord {
            revision: 4,
            members: vec![MemberRecord {
                id: "uid-dr".into(),
                name: "dr".into(),
                datacenter_id: 0,
                generation: 3,
            }],
            blocks: Vec::new(),
        };
        assert_eq!(generation_of(&other, &prod, &name("prod")).unwrap(), None);
        let (once, g1) = count_up(&other, &prod, &name("prod")).unwrap();
        // Made at the new revision: above every generation an earlier entry of this
        // cluster can have had (a generation counts up with the revision, never faster).
        assert_eq!((g1, once.revision), (5, 5));
        let (twice, g2) = count_up(&once, &prod, &name("prod")).unwrap();
        assert_eq!((g2, twice.revision), (6, 6));
        assert_eq!(
            generation_of(&twice, &prod, &name("prod")).unwrap(),
            Some(6)
        );
        assert_eq!(
            twice.members.iter().find(|m| m.id == "uid-prod").unwrap(),
            &MemberRecord {
                id: "uid-prod".into(),
                name: "prod".into(),
                datacenter_id: 0,
                generation: 6
            }
        );
        // The other member's entry is untouched (the hub's policy refuses any change).
        assert_eq!(
            generation_of(&twice, &dr, &name("dr")).unwrap(),
            Some(3),
            "{twice:?}"
        );
        assert_eq!(twice.members.len(), 2);
    }

    #[test]
    fn rule22_a_count_up_refuses_a_cluster_known_under_another_name_and_a_name_taken() {
        let registry = RegistryRecord {
            revision: 1,
            members: vec![MemberRecord {
                id: "uid-prod".into(),
                name: "prod".into(),
                datacenter_id: 0,
                generation: 1,
            }],
            blocks: Vec::new(),
        };
        assert!(matches!(
            count_up(&registry, &id("uid-prod"), &name("eu")),
            Err(JoinError::DuplicateIdentity { .. })
        ));
        assert!(matches!(
            count_up(&registry, &id("uid-other"), &name("prod")),
            Err(JoinError::NameTaken { .. })
        ));
    }

    #[test]
    fn rule22_a_contact_counts_up_whenever_the_counter_moved_since_the_last_count_up() {
        assert!(counted_up_since(None, 0), "first contact since the start");
        assert!(!counted_up_since(Some(5_000), 5_000), "nothing claimed");
        assert!(counted_up_since(Some(5_000), 5_001), "claimed since");
        assert!(
            counted_up_since(Some(5_000), 4_000),
            "the counter went back: counted up as well"
        );
    }
}
