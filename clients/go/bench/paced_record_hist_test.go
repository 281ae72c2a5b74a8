package bench

import "testing"

// The paced row's percentiles are ranks over every call: the ceil(q x calls)-th fastest,
// across the 1 ns buckets and the exact values above them, merged across goroutines.
func TestPacedHistogramRanksEveryCallAcrossBucketsAndExactValues(t *testing.T) {
	a, b := newRecord(), newRecord()
	for i := range 998 {
		a.add(int64(i % 100)) // 0..99 ns
	}
	b.add(200_000) // above the 1 ns buckets
	b.add(150_000)
	a.merge(b)
	if a.calls != 1000 || a.over1us != 2 {
		t.Fatalf("calls %d, over 1 us %d; want 1000 and 2", a.calls, a.over1us)
	}
	cases := []struct {
		q    float64
		want int64
	}{
		{0.5, 49},        // the 500th fastest
		{0.998, 99},      // the 998th: the last one in the buckets
		{0.999, 150_000}, // the 999th: the first exact value
		{1, 200_000},
	}
	for _, c := range cases {
		if got := a.quantile(c.q); got != c.want {
			t.Errorf("quantile(%v) = %d, want %d", c.q, got, c.want)
		}
	}
	if got := a.max(); got != 200_000 {
		t.Errorf("max = %d, want 200000", got)
	}
	if got := newRecord().quantile(0.999); got != 0 {
		t.Errorf("an empty record's quantile = %d, want 0", got)
	}
}

// The schedule: goroutine t of T makes call k at start + (k x T + t) / rate; none are due
// at or after the end, and with no call to make, every due call is timed.
func TestPacedRunMakesEveryDueCallOfItsShare(t *testing.T) {
	const rate = 1_000_000.0 // 1 us apart: 2,000 calls due in 2 ms across both goroutines
	start := nanotime() + 1_000_000
	end := start + 2_000_000
	total := int64(0)
	for g := range 2 {
		r := newRecord()
		calls := 0
		pacedRun(r, func() (int64, error) { calls++; return 0, nil }, g, 2, rate, start, end)
		if r.calls != 1000 || calls != 1000 {
			t.Errorf("goroutine %d: %d timed, %d made; want 1000", g, r.calls, calls)
		}
		if r.lastEnd < start+int64(999*2+g)*1000 {
			t.Errorf("goroutine %d: the last call returned before it was due", g)
		}
		total += r.calls
	}
	if total != 2000 {
		t.Errorf("%d calls in all, want 2000", total)
	}
}
