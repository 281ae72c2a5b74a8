package kubeflake

import (
	"math"
	"time"
)

// Bounds of a buffer's safe distance (clients/SPEC.md, "a safe distance"), as the
// Java client's RefillPace.
const (
	minDistance  = 2
	maxDistance  = 16
	calmRefills  = 1000
	slowHalfLife = 10 * time.Second
	// rangesAhead: the low-water mark is at most this many refill ceilings, so that several
	// ranges may be queued.
	rangesAhead = 8
)

// pace is when a buffer refills (clients/SPEC.md, "Range refills are sized and timed so
// that no caller waits", segment and Snowflake): it measures the refills' mean and slowest
// recent duration and the rate at which values leave the buffer, and sets the low-water
// mark a safe distance ahead: a refill asked at the mark arrives, were it as slow as the
// slowest recent one, while about distance-1 such refills' worth of values is still left.
// The distance starts at two; a caller that finds the buffer empty doubles it, up to
// maxDistance, and calmRefills refills in a row without a wait halve it again. The spread,
// not the mean, empties a buffer (docs/notes/bench-2026-11-30-java-segment-refill.md).
// A Snowflake buffer's mark is also bounded by MaxAge (snowflakeLowWater). Guarded by
// Client.mu.
type pace struct {
	refillTime time.Duration // exponential mean of successful refills' durations
	slow       float64       // the slowest recent refill, ns: a longer one at once, halving every slowHalfLife
	rate       float64       // values handed out per second, the time the buffer was empty left out
	lastAt     time.Time     // the last refill's arrival
	lastIDs    uint64        // values handed out by then
	arrivals   int           // up to 2: the rate is measured from the second
	distance   int           // the mark, in slowest recent refills at the rate; 0: minDistance
	calm       int           // refills since the last wait
	hungry     bool          // a caller waited since the last arrival
}

// arrived records a refill that took `took` and arrived at now, when handedOut values
// had left the buffer in all, which had been empty (callers waiting) for the last `empty`
// of the interval since the previous arrival. The rate is measured over the rest of the
// interval: while callers wait, values leave at the sidecar's pace, not the demand's. A
// higher rate is taken at once, a lower one a quarter of the way.
func (p *pace) arrived(now time.Time, took time.Duration, handedOut uint64, empty time.Duration) {
	if p.arrivals == 0 {
		p.refillTime = took
		p.slow = float64(took)
	} else {
		p.refillTime += (took - p.refillTime) / 4
		decay := math.Pow(0.5, float64(now.Sub(p.lastAt))/float64(slowHalfLife))
		p.slow = math.Max(float64(took), p.slow*decay)
		if busy := now.Sub(p.lastAt) - empty; busy > 0 {
			sample := float64(handedOut-p.lastIDs) / busy.Seconds()
			if sample >= p.rate {
				p.rate = sample
			} else {
				p.rate += (sample - p.rate) / 4
			}
		}
	}
	p.arrivals = min(p.arrivals+1, 2)
	p.lastAt, p.lastIDs = now, handedOut
	p.hungry = false
	if p.calm++; p.calm >= calmRefills {
		p.calm = 0
		p.distance = max(minDistance, p.dist()/2)
	}
}

// waited: a caller found the buffer empty, the mark was too low for the refills' spread.
// Doubles the distance once per empty buffer, once the rate is measured (the first
// refills' waits are the start, not a spread).
func (p *pace) waited() {
	if p.hungry || p.arrivals < 2 {
		return
	}
	p.hungry = true
	p.calm = 0
	p.distance = min(maxDistance, p.dist()*2)
}

func (p *pace) dist() int { return max(p.distance, minDistance) }

// lowWater is max(batch/2, ceil(distance x slowest recent refill x rate)), at most ceiling.
func (p *pace) lowWater(batch, ceiling int) int {
	need := math.Ceil(float64(p.dist()) * p.slow / 1e9 * p.rate)
	low := max(batch/2, int(math.Min(need, float64(ceiling))))
	return min(low, ceiling)
}

// snowflakeLowWater is a Snowflake buffer's mark: lowWater's safe distance, but Snowflake
// IDs age, so with a MaxAge (maxAge > 0) at most what the rate hands out in half of maxAge,
// less a batch (an ID asked at the mark then leaves the buffer within maxAge/2 at that
// rate instead of expiring); never below half a batch (so half a batch until the rate is
// measured). The Java client's BatchSizer.mark.
func (p *pace) snowflakeLowWater(batch, ceiling int, maxAge time.Duration) int {
	bound := float64(ceiling)
	if maxAge > 0 {
		bound = math.Min(bound, math.Floor(p.rate*maxAge.Seconds()/2)-float64(batch))
	}
	if bound <= float64(batch/2) {
		return batch / 2
	}
	return p.lowWater(batch, int(bound))
}

// mark is the low-water mark (clients/SPEC.md): a safe distance ahead, up to rangesAhead
// refill ceilings, and in Snowflake mode within MaxAge (pace.snowflakeLowWater); c.mu is held.
func (c *Client) mark() int {
	if c.mode == "segment" {
		return c.pace.lowWater(c.batchSize, rangesAhead*c.ceiling())
	}
	return c.pace.snowflakeLowWater(c.batchSize, rangesAhead*c.ceiling(), c.settings.MaxAge)
}
