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
