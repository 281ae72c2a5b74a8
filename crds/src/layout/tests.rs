use super::*;

fn parts(tick: u64, dc: u32, slot: u32, sequence: u32) -> IdParts {
    IdParts {
        tick: Tick(tick),
        datacenter: DatacenterId(dc),
        slot: Slot(slot),
        sequence,
    }
}

#[test]
fn default_layout_is_41_0_10_12() {
    let l = Layout::default();
    assert_eq!(Layout::new(41, 0, 10, 12, 63), Ok(l));
    assert_eq!(l.slot_count(), 1024);
    assert_eq!(l.ids_per_tick(), 4096);
}

#[test]
fn layout_rejects_bits_that_do_not_add_up_to_the_total() {
    let err = Layout::new(41, 0, 10, 11, 63).unwrap_err();
    assert_eq!(err, LayoutError::BadSum { sum: 62, total: 63 });
    assert!(
        err.to_string().contains("must add up to totalBits = 63"),
        "{err}"
    );
    assert!(Layout::new(41, 0, 10, 12, 53).is_err());
    assert!(Layout::new(36, 0, 7, 10, 53).is_ok());
}

#[test]
fn layout_rejects_each_field_out_of_range_naming_it() {
    let cases = [
        (Layout::new(29, 0, 10, 24, 63), "timestampBits"),
        (Layout::new(56, 0, 5, 2, 63), "timestampBits"),
        (Layout::new(41, -1, 11, 12, 63), "datacenterBits"),
        (Layout::new(31, 11, 10, 11, 63), "datacenterBits"),
        (Layout::new(41, 0, 0, 22, 63), "workerBits"),
        (Layout::new(30, 0, 17, 16, 63), "workerBits"),
        (Layout::new(30, 0, 10, 23, 63), "sequenceBits"),
        (Layout::new(41, 0, 10, -1, 63), "sequenceBits"),
    ];
    for (result, field) in cases {
        let err = result.unwrap_err();
        assert!(matches!(err, LayoutError::BitsOutOfRange { field: f, .. } if f == field));
        assert!(err.to_string().contains(field), "{err}");
    }
    assert_eq!(
        Layout::new(41, 0, 10, 12, 64),
        Err(LayoutError::BadTotal(64))
    );
}

#[test]
fn encode_decode_round_trips_including_extremes() {
    let layouts = [
        Layout::default(),
        Layout::new(36, 0, 7, 10, 53).unwrap(),
        Layout::new(39, 5, 5, 14, 63).unwrap(),
        Layout::new(30, 10, 1, 22, 63).unwrap(),
        Layout::new(55, 0, 8, 0, 63).unwrap(),
    ];
    for l in layouts {
        let max_dc = (1u32 << l.datacenter_bits()) - 1;
        let max_slot = (1u32 << l.worker_bits()) - 1;
        let max_seq = (1u32 << l.sequence_bits()) - 1;
        for p in [
            parts(0, 0, 0, 0),
            parts(l.max_tick().0, max_dc, max_slot, max_seq),
            parts(1, 0, max_slot, 0),
            parts(l.max_tick().0 / 2, max_dc / 2, 1.min(max_slot), max_seq / 3),
        ] {
            let id = l.encode(p).unwrap();
            assert_eq!(l.decode(id).unwrap(), p, "layout {l:?}");
            assert!(id.get() < (1u64 << l.total_bits()));
        }
        let all_ones = l
            .encode(parts(l.max_tick().0, max_dc, max_slot, max_seq))
            .unwrap();
        assert_eq!(
            all_ones.get(),
            (1u64 << l.total_bits()) - 1,
            "max ID fills the layout"
        );
    }
}

#[test]
fn encode_rejects_fields_that_do_not_fit() {
    let l = Layout::default();
    assert!(l.encode(parts(1 << 41, 0, 0, 0)).is_err());
    assert!(l.encode(parts(0, 1, 0, 0)).is_err(), "datacenterBits is 0");
    assert!(l.encode(parts(0, 0, 1024, 0)).is_err());
    assert!(l.encode(parts(0, 0, 0, 4096)).is_err());
}

#[test]
fn decode_rejects_ids_wider_than_the_layout() {
    let js = Layout::new(36, 0, 7, 10, 53).unwrap();
    let err = js.decode(Id::new(1 << 53).unwrap()).unwrap_err();
    assert!(err.to_string().contains("at most 53 bits"), "{err}");
    assert!(Id::new(1 << 63).is_err(), "bit 63 is never set");
}

#[test]
fn ids_order_by_time_first() {
    let l = Layout::default();
    let early = l.encode(parts(5, 0, 1023, 4095)).unwrap();
    let late = l.encode(parts(6, 0, 0, 0)).unwrap();
    assert!(early < late);
}

#[test]
fn id_range_of_tick_covers_every_worker_and_sequence() {
    let l = Layout::default();
    let (lo, hi) = l.id_range_of_tick(Tick(7)).unwrap();
    assert_eq!(l.decode(lo).unwrap(), parts(7, 0, 0, 0));
    assert_eq!(l.decode(hi).unwrap(), parts(7, 0, 1023, 4095));
}

// ---- Key forms (docs/layouts.md): each is one-to-one, so uniqueness never depends on it.

/// A 63-bit layout with `timestamp_bits` and 10 worker and 12 sequence bits, in a key form.
fn on_default_fields(timestamp_bits: i64, spread: Spread, start: SequenceStart) -> Layout {
    Layout::with_form([timestamp_bits, 0, 10, 12], 63, spread, start).unwrap()
}

/// Every key form over a few base layouts, for the tests below.
fn formed_layouts() -> Vec<Layout> {
    let mut out = Vec::new();
    for (bits, total) in [
        ([41, 0, 10, 12], 63),
        ([36, 0, 7, 10], 53),
        ([41, 3, 5, 14], 63),
    ] {
        for start in [SequenceStart::Zero, SequenceStart::Rotating] {
            for spread in [Spread::TimeOrdered, Spread::BitReversed] {
                out.push(Layout::with_form(bits, total, spread, start).unwrap());
            }
            let mut shard_bits = bits;
            shard_bits[0] -= 4;
            out.push(
                Layout::with_form(shard_bits, total, Spread::ShardBits { bits: 4 }, start).unwrap(),
            );
        }
    }
    out
}

#[test]
fn no_duplicate_every_key_form_gives_distinct_ids_to_distinct_fields() {
    // Exhaustive over 64 ticks x 8 slots x 64 sequence numbers x 2 datacenters (where the
    // layout has them): no two field tuples share an ID, and each ID decodes back to its
    // fields. A form that lost a bit would map two tuples to one ID here.
    for l in formed_layouts() {
        let mut seen = std::collections::HashSet::new();
        let dcs = if l.datacenter_bits() > 0 { 2 } else { 1 };
        for tick in (0..64).map(|t| t * 9_973) {
            for dc in 0..dcs {
                for slot in 0..8 {
                    for seq in 0..64 {
                        let p = parts(tick, dc, slot, seq);
                        let id = l.encode(p).unwrap();
                        assert!(id.get() < 1 << l.total_bits(), "{l:?}: {id} too wide");
                        assert_eq!(l.decode(id).unwrap(), p, "{l:?}");
                        assert!(seen.insert(id), "{l:?}: {p:?} repeats {id}");
                    }
                }
            }
        }
    }
}

#[test]
fn every_key_form_round_trips_the_extreme_fields() {
    for l in formed_layouts() {
        let max_dc = (1u32 << l.datacenter_bits()) - 1;
        let max_slot = (1u32 << l.worker_bits()) - 1;
        let max_seq = (1u32 << l.sequence_bits()) - 1;
        for p in [
            parts(0, 0, 0, 0),
            parts(l.max_tick().0, max_dc, max_slot, max_seq),
            parts(l.max_tick().0, 0, 0, 0),
        ] {
            let id = l.encode(p).unwrap();
            assert_eq!(l.decode(id).unwrap(), p, "{l:?}");
        }
    }
}

#[test]
fn shard_bits_take_from_the_total_and_must_be_between_1_and_10() {
    let shard = |bits, ts| {
        Layout::with_form(
            [ts, 0, 10, 12],
            63,
            Spread::ShardBits { bits },
            SequenceStart::Zero,
        )
    };
    assert_eq!(shard(5, 36).unwrap().total_bits(), 63);
    assert_eq!(shard(5, 36).unwrap().timestamp_bits(), 36);
    let err = shard(5, 41).unwrap_err();
    assert!(err.to_string().contains("shardBits"), "{err}");
    assert!(matches!(err, LayoutError::BadSum { sum: 68, total: 63 }));
    assert_eq!(
        shard(11, 30).unwrap_err(),
        LayoutError::ShardBitsOutOfRange(11)
    );
    assert_eq!(
        shard(0, 41).unwrap_err(),
        LayoutError::ShardBitsOutOfRange(0)
    );
}

#[test]
fn a_rotating_start_needs_sequence_bits() {
    let err = Layout::with_form(
        [51, 0, 12, 0],
        63,
        Spread::TimeOrdered,
        SequenceStart::Rotating,
    )
    .unwrap_err();
    assert_eq!(err, LayoutError::NothingToRotate);
    assert!(err.to_string().contains("sequenceBits"), "{err}");
}

#[test]
fn an_id_whose_shard_bits_do_not_match_is_refused_not_decoded() {
    let l = on_default_fields(36, Spread::ShardBits { bits: 5 }, SequenceStart::Zero);
    let id = l.encode(parts(123_456, 0, 7, 9)).unwrap();
    let shard = l.shard(id).unwrap();
    let other = (id.get() & ((1 << 58) - 1)) | (u64::from((shard + 1) % 32) << 58);
    let err = l.decode(Id::new(other).unwrap()).unwrap_err();
    assert!(
        matches!(err, LayoutError::ShardMismatch { shard_bits: 5, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("copied whole"), "{err}");
}

#[test]
fn consecutive_ids_of_one_pod_spread_over_every_shard() {
    let l = on_default_fields(38, Spread::ShardBits { bits: 3 }, SequenceStart::Zero);
    let node = l.node_bits(DatacenterId(0), Slot(5));
    let mut counts = [0u32; 8];
    for position in 1_000_000u64..1_000_800 {
        counts[l.shard(l.id_at(position, node)).unwrap() as usize] += 1;
    }
    assert!(counts.iter().all(|c| (60..=140).contains(c)), "{counts:?}");
}

#[test]
fn a_rotating_start_spreads_id_mod_n_at_one_id_per_tick() {
    // One ID per tick, as at low traffic: with sequence numbers starting at 0 every ID is
    // a multiple of 4,096, so `id % 16` is always 0; rotating, every residue is hit.
    for (start, spreads) in [
        (SequenceStart::Zero, false),
        (SequenceStart::Rotating, true),
    ] {
        let l = on_default_fields(41, Spread::TimeOrdered, start);
        let node = l.node_bits(DatacenterId(0), Slot(0));
        let mut residues = std::collections::HashSet::new();
        for tick in 5_000u64..5_400 {
            residues.insert(l.id_at(tick << 12, node).get() % 16);
        }
        assert_eq!(residues.len() == 16, spreads, "{start:?}: {residues:?}");
    }
}

#[test]
fn only_time_ordered_spreads_have_one_id_range_per_tick() {
    let rotating = on_default_fields(41, Spread::TimeOrdered, SequenceStart::Rotating);
    let (lo, hi) = rotating.id_range_of_tick(Tick(99)).unwrap();
    for seq in [0, 1, 4095] {
        let id = rotating.encode(parts(99, 0, 1023, seq)).unwrap();
        assert!(lo <= id && id <= hi);
    }
    let reversed = on_default_fields(41, Spread::BitReversed, SequenceStart::Zero);
    let err = reversed.id_range_of_tick(Tick(99)).unwrap_err();
    assert!(err.to_string().contains("time-ordered key"), "{err}");
    let sharded = on_default_fields(37, Spread::ShardBits { bits: 4 }, SequenceStart::Zero);
    assert!(sharded.id_range_of_tick(Tick(99)).is_err());
    for (slot, seq) in [(0, 0), (3, 17), (1023, 4095)] {
        let id = sharded.encode(parts(99, 0, slot, seq)).unwrap();
        let (lo, hi) = sharded
            .shard_range_of_tick(Tick(99), sharded.shard(id).unwrap())
            .unwrap();
        assert!(lo <= id && id <= hi, "{id} in shard range");
        let (vlo, vhi) = sharded.value_range_of_tick(Tick(99)).unwrap();
        let v = sharded.time_ordered_value(id).unwrap();
        assert!(vlo <= v && v <= vhi);
    }
}
