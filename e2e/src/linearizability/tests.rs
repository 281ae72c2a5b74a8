use super::*;

fn op(client: u32, call: u64, ret: u64, lo: u64, hi: u64) -> Op {
    Op {
        client,
        call,
        ret,
        lo,
        hi,
    }
}

#[test]
fn concurrent_operations_may_return_their_values_in_either_order() {
    // 0 and 1 overlap in time: the one called first may get the higher value.
    let ops = [
        op(0, 0, 100, 8, 8),
        op(1, 10, 90, 5, 5),
        op(2, 101, 150, 9, 11),
    ];
    assert_eq!(check(&ops), Ok(()));
}

#[test]
fn operations_whose_intervals_touch_are_concurrent() {
    let ops = [op(0, 0, 100, 8, 8), op(1, 100, 200, 5, 5)];
    assert_eq!(check(&ops), Ok(()));
}

#[test]
fn a_lower_value_called_after_a_higher_one_returned_is_a_violation() {
    let ops = [
        op(0, 0, 100, 8, 8),
        op(2, 20, 30, 1, 1),
        op(1, 101, 200, 5, 5),
    ];
    let err = check(&ops).unwrap_err();
    assert_eq!(
        err,
        Violation::RealTimeOrder {
            earlier: ops[0],
            later: ops[2]
        }
    );
    assert!(err.to_string().contains("not linearizable: 5 to client 1"));
}

#[test]
fn a_batch_must_lie_above_the_whole_run_of_one_that_returned_before() {
    // The second batch starts above the first's lo but not above its hi.
    let ops = [op(0, 0, 10, 10, 12), op(1, 20, 30, 11, 13)];
    assert!(matches!(check(&ops), Err(Violation::RealTimeOrder { .. })));
    // The same runs, concurrent: they interleave, so no order works either.
    let ops = [op(0, 0, 30, 10, 12), op(1, 20, 30, 11, 13)];
    assert!(matches!(check(&ops), Err(Violation::Overlap { .. })));
    let ops = [op(0, 0, 10, 10, 12), op(1, 20, 30, 13, 15)];
    assert_eq!(check(&ops), Ok(()));
}

#[test]
fn equal_values_are_refused_even_for_concurrent_operations() {
    let ops = [op(0, 0, 100, 7, 7), op(1, 0, 100, 7, 7)];
    let err = check(&ops).unwrap_err();
    assert!(matches!(err, Violation::Overlap { .. }), "{err}");
    assert!(
        err.to_string().starts_with("value 7 was returned twice"),
        "{err}"
    );
    // A value inside another operation's run.
    let ops = [op(0, 0, 100, 5, 9), op(1, 50, 60, 7, 7)];
    assert!(matches!(check(&ops), Err(Violation::Overlap { .. })));
}

#[test]
fn the_history_records_runs_with_one_clock_and_flags_decreasing_replies() {
    let history = History::new();
    let call = history.call(3);
    history.returned(call, &[4, 5, 6]);
    let call = history.call(1);
    history.returned(call, &[]);
    let call = history.call(2);
    history.returned(call, &[9, 8]);
    let call = history.call(4);
    history.returned(call, &[20, 20]);
    let ops = history.ops();
    assert_eq!(ops.len(), 4);
    assert_eq!((ops[0].client, ops[0].lo, ops[0].hi), (3, 4, 6));
    assert!(ops[0].call <= ops[0].ret && ops[0].ret <= ops[1].call);
    assert!(matches!(
        check(&ops),
        Err(Violation::NotIncreasingWithin(o)) if o.client == 2
    ));
    let err = check(&[ops[0], ops[2], ops[3]]).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("value 20 was returned twice: {}; {}", ops[2], ops[3])
    );
}

#[test]
fn many_clients_recording_at_once_lose_nothing() {
    let history = std::sync::Arc::new(History::new());
    let threads: Vec<_> = (0..8u32)
        .map(|c| {
            let h = history.clone();
            std::thread::spawn(move || {
                for i in 0..1000u64 {
                    let call = h.call(c);
                    h.returned(call, &[u64::from(c) * 10_000 + i]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(history.len(), 8000);
    assert!(per_client(&history.ops()).values().all(|n| *n == 1000));
}
