package bench

import "slices"

// The paced rows' histogram (paced_test.go): every call of the measured seconds, in 1 ns
// buckets below 131 us and exactly above, as Java's PacedBench.Record.

const fine = 1 << 17 // 1 ns buckets below this many ns

// record is one goroutine's (or, merged, a row's) calls.
type record struct {
	fine        []int64 // fine[ns]: calls that took ns
	coarse      []int64 // calls of fine ns or more, exactly
	calls       int64
	over1us     int64
	maxLag      int64 // the furthest behind schedule a call started, ns
	lateOver1ms int64
	lastEnd     int64 // nanotime when the last call returned
	start       int64 // nanotime when the schedule began
	err         error // the first error a call returned
	errs        int64
}

func newRecord() *record { return &record{fine: make([]int64, fine)} }

func (r *record) add(ns int64) {
	r.calls++
	if ns > 1000 {
		r.over1us++
	}
	if ns < fine {
		r.fine[max(ns, 0)]++
	} else {
		r.coarse = append(r.coarse, ns)
	}
}

func (r *record) merge(o *record) {
	for i, n := range o.fine {
		r.fine[i] += n
	}
	r.coarse = append(r.coarse, o.coarse...)
	r.calls += o.calls
	r.over1us += o.over1us
	r.maxLag = max(r.maxLag, o.maxLag)
	r.lateOver1ms += o.lateOver1ms
	r.lastEnd = max(r.lastEnd, o.lastEnd)
	r.errs += o.errs
	if r.err == nil {
		r.err = o.err
	}
}

// quantile is the latency below or at which the share q (0..1) of the calls fell: the
// ceil(q x calls)-th fastest.
func (r *record) quantile(q float64) int64 {
	if r.calls == 0 {
		return 0
	}
	rank := int64(q*float64(r.calls) + 0.999999999)
	rank = min(max(rank, 1), r.calls)
	var seen int64
	for i, n := range r.fine {
		if seen += n; seen >= rank {
			return int64(i)
		}
	}
	big := slices.Clone(r.coarse)
	slices.Sort(big)
	return big[min(int64(len(big))-1, max(0, rank-seen-1))]
}

func (r *record) max() int64 {
	if len(r.coarse) > 0 {
		return slices.Max(r.coarse)
	}
	for i := len(r.fine) - 1; i >= 0; i-- {
		if r.fine[i] > 0 {
			return int64(i)
		}
	}
	return 0
}
