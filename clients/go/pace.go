package kubeflake

import (
	"math"
	"time"
)

// pace is when a segment buffer refills (clients/SPEC.md, "Range refills are sized and
// timed so that no caller waits"): it measures the refills' mean duration and the rate at
// which values leave the buffer, and sets the low-water mark so that a refill asked at it
// arrives while about one refill's worth of values is still left. Guarded by Client.mu.
type pace struct {
	refillTime time.Duration // exponential mean of successful refills' durations
	rate       float64       // values handed out per second between the last two arrivals
	lastAt     time.Time     // the last refill's arrival
	lastIDs    uint64        // values handed out by then
}

// arrived records a refill that took `took` and arrived at now, when handedOut values
// had left the buffer in all.
func (p *pace) arrived(now time.Time, took time.Duration, handedOut uint64) {
	if p.refillTime == 0 {
		p.refillTime = took
	} else {
		p.refillTime += (took - p.refillTime) / 4
	}
	if !p.lastAt.IsZero() {
		if elapsed := now.Sub(p.lastAt); elapsed > 0 {
			p.rate = float64(handedOut-p.lastIDs) / elapsed.Seconds()
		}
	}
	p.lastAt, p.lastIDs = now, handedOut
}

// lowWater is max(batch/2, ceil(2 x refillTime x rate)), at most ceiling.
func (p *pace) lowWater(batch, ceiling int) int {
	low := batch / 2
	need := math.Ceil(2 * p.refillTime.Seconds() * p.rate)
	if need > float64(low) {
		low = int(math.Min(need, float64(ceiling)))
	}
	return min(low, ceiling)
}
