use super::*;

/// 16 pods at 100 IDs/s each (a low rate: one ID per pod per 10 ticks on average) for
/// `secs` simulated seconds, 10 s windows, 30 days after the epoch.
fn low_rate(secs: u64) -> Scenario {
    Scenario {
        pods: 16,
        ids_per_s_per_pod: 100.0,
        secs,
        window_secs: 10,
        start_tick: 30 * 86_400_000,
        seed: 1,
        equal_ranges: vec![16, 64],
        split_keys: 512,
        moduli: vec![16, 100],
    }
}

fn form(name: &str) -> Form {
    let all = forms().expect("every form of the benchmark is a valid layout");
    *all.iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no form {name}"))
}

fn equal(result: &FormResult, ranges: u64) -> &EqualSeries {
    result
        .equal
        .iter()
        .find(|e| e.ranges == ranges)
        .expect("the scenario has this range count")
}

fn modulo(result: &FormResult, n: u64) -> f64 {
    result
        .modulo
        .iter()
        .find(|m| m.n == n)
        .expect("the scenario has this modulus")
        .largest
}

#[test]
fn simulated_pods_take_positions_by_the_generators_rule_and_runs_repeat_exactly() {
    let scenario = Scenario {
        ids_per_s_per_pod: 5_000.0,
        ..low_rate(2)
    };
    let writes: Vec<Write> = Arrivals::new(&scenario, 12).collect();
    assert_eq!(writes, Arrivals::new(&scenario, 12).collect::<Vec<_>>());
    assert!(
        (150_000..170_000).contains(&writes.len()),
        "{}",
        writes.len()
    );
    let mut last = [0u64; 16];
    let mut previous_ns = 0;
    let mut later_in_a_tick = 0;
    for w in &writes {
        assert!(w.at_ns >= previous_ns, "writes come in time order");
        previous_ns = w.at_ns;
        let now_position = (scenario.start_tick + w.at_ns / TICK_NS) << 12;
        let expected = (last[w.slot as usize] + 1).max(now_position);
        assert_eq!(w.position, expected, "max(last + 1, now_tick << 12)");
        if w.position != now_position {
            later_in_a_tick += 1;
        }
        last[w.slot as usize] = w.position;
    }
    // At 5 IDs per tick per pod most IDs are not the first of their tick.
    assert!(later_in_a_tick > writes.len() / 2, "{later_in_a_tick}");
}

#[test]
fn every_form_issues_distinct_ids_that_decode_to_the_pod_and_tick_that_issued_them() {
    let scenario = low_rate(1);
    for f in forms().expect("valid forms") {
        let mut seen = std::collections::HashSet::new();
        for w in Arrivals::new(&scenario, f.layout.sequence_bits()) {
            let id = f.layout.id_at(
                w.position,
                f.layout.node_bits(DatacenterId(0), Slot(w.slot)),
            );
            let parts = f.layout.decode(id).expect("a simulated ID decodes");
            assert_eq!(parts.slot, Slot(w.slot), "{}", f.name);
            assert_eq!(parts.tick.0, w.position >> 12, "{}", f.name);
            assert!(seen.insert(id), "{}: {id} issued twice", f.name);
        }
    }
}

#[test]
fn the_split_store_splits_a_range_at_its_median_once_it_holds_more_than_its_limit() {
    let mut store = SplitStore::new(4);
    for key in [50, 10, 40, 20] {
        store.insert(key);
    }
    assert_eq!(store.starts(), [0]);
    store.insert(30);
    assert_eq!(
        store.starts(),
        [0, 30],
        "five keys split at the third smallest"
    );
    assert_eq!(store.sizes(), [2, 3]);
    for key in 31..40 {
        store.insert(key);
    }
    assert_eq!(store.sizes().iter().sum::<usize>(), 14, "no key is lost");
    assert!(store.starts().windows(2).all(|w| w[0] < w[1]));
    assert!(store.sizes().iter().all(|&n| n <= 4));
}

#[test]
fn time_ordered_ids_put_every_write_on_one_range_with_or_without_a_rotating_start() {
    let scenario = low_rate(60);
    for name in ["default (time-ordered)", "sequenceStart Rotating"] {
        let r = simulate(&scenario, &form(name));
        assert!((90_000..102_000).contains(&r.ids), "{name}: {} IDs", r.ids);
        assert!(equal(&r, 16).median > 0.999, "{name}: {:?}", r.equal);
        assert!(equal(&r, 64).median > 0.999, "{name}: {:?}", r.equal);
        assert!(r.split.median > 0.999, "{name}: {:?}", r.split);
        assert!(
            r.split.ranges_at_end > 50,
            "the store did split: {:?}",
            r.split
        );
    }
}

#[test]
fn shard_bits_bring_the_hottest_range_down_from_all_writes_to_about_one_in_two_to_the_k() {
    let scenario = low_rate(60);
    for (name, k) in [("shardBits 2", 2), ("shardBits 4", 4), ("shardBits 8", 8)] {
        let r = simulate(&scenario, &form(name));
        for ranges in [16u64, 64] {
            // The floor is one shard's share, or one range's when there are fewer ranges.
            let ideal = 1.0 / (ranges.min(1 << k) as f64);
            let hottest = equal(&r, ranges).median;
            assert!(
                hottest < 1.5 * ideal && hottest > 0.9 * ideal,
                "{name}, {ranges} equal ranges: {hottest} against {ideal}"
            );
        }
        // The split store starts as one range (every write on it) and spreads as it splits.
        assert_eq!(r.split.hottest[0], 1.0, "{name}");
        let last = r.split.hottest[r.split.hottest.len() - 1];
        let bound = 2.0 / f64::from(1u32 << k.min(5));
        assert!(last < bound, "{name}, split store: {:?}", r.split);
    }
}

#[test]
fn bit_reversed_ids_crowd_the_top_bits_at_a_low_rate_unless_the_sequence_start_rotates() {
    let scenario = low_rate(60);
    let plain = simulate(&scenario, &form("bitReversed"));
    let rotating = simulate(&scenario, &form("bitReversed + Rotating"));
    // At one ID per tick the sequence field is 0, and reversed it is the ID's top 12 bits.
    assert!(equal(&plain, 16).median > 0.9, "{:?}", plain.equal);
    assert!(
        equal(&rotating, 16).median < 1.5 / 16.0,
        "{:?}",
        rotating.equal
    );
    // Ranges split at the keys actually written spread both.
    for r in [&plain, &rotating] {
        assert!(r.split.median < 0.1, "{}: {:?}", r.form, r.split);
    }
}

#[test]
fn a_rotating_sequence_start_spreads_id_mod_16_at_a_low_rate_where_the_default_does_not() {
    let scenario = low_rate(60);
    let default = simulate(&scenario, &form("default (time-ordered)"));
    assert!(modulo(&default, 16) > 0.9, "{:?}", default.modulo);
    for name in ["sequenceStart Rotating", "shardBits 4 + Rotating"] {
        let r = simulate(&scenario, &form(name));
        assert!(modulo(&r, 16) < 1.3 / 16.0, "{name}: {:?}", r.modulo);
        assert!(modulo(&r, 100) < 1.5 / 100.0, "{name}: {:?}", r.modulo);
    }
    // Shard bits on top leave the low bits, and `id % 16` with them, as they were.
    let shard = simulate(&scenario, &form("shardBits 4"));
    assert!(modulo(&shard, 16) > 0.9, "{:?}", shard.modulo);
}

#[test]
fn the_median_skips_the_first_window() {
    assert_eq!(median_after_first(&[1.0, 0.2, 0.4, 0.3]), 0.3);
    assert!((median_after_first(&[1.0, 0.2, 0.4]) - 0.3).abs() < 1e-12);
    assert_eq!(median_after_first(&[0.5]), 0.5);
}
