package kubeflake

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// clients/SPEC.md, "Range refills are sized and timed so that no caller waits".

func TestTheLowWaterMarkIsHalfABatchUntilRefillsAreMeasured(t *testing.T) {
	var p pace
	if got := p.lowWater(1000, 1_000_000); got != 500 {
		t.Fatalf("lowWater = %d, want 500 (half the batch)", got)
	}
}

func TestTheLowWaterMarkCoversTwoRefillTimesAtTheMeasuredRate(t *testing.T) {
	var p pace
	t0 := time.Unix(1000, 0)
	p.arrived(t0, 800*time.Microsecond, 0, 0)
	// 10,000,000 values in the second since: 10M values/s; refills take 0.8 ms.
	p.arrived(t0.Add(time.Second), 800*time.Microsecond, 10_000_000, 0)
	if got := p.lowWater(10_000, 1_000_000); got != 16_000 {
		t.Fatalf("lowWater = %d, want 16000 (2 x 0.8 ms x 10M/s)", got)
	}
	if got := p.lowWater(100_000, 1_000_000); got != 50_000 {
		t.Fatalf("lowWater = %d, want 50000: never below half the batch", got)
	}
	if got := p.lowWater(10_000, 12_000); got != 12_000 {
		t.Fatalf("lowWater = %d, want 12000: never above the ceiling", got)
	}
}

func TestTheRefillTimeIsAnExponentialMeanGivingTheNewestAQuarter(t *testing.T) {
	var p pace
	t0 := time.Unix(1000, 0)
	p.arrived(t0, 4*time.Millisecond, 0, 0)
	p.arrived(t0.Add(time.Second), 0, 1000, 0)
	if p.refillTime != 3*time.Millisecond {
		t.Fatalf("refillTime = %s, want 3ms (4 ms, then a quarter of the way to 0)", p.refillTime)
	}
	p.arrived(t0.Add(3*time.Second), 0, 5000, 0)
	if p.rate != 2000 {
		t.Fatalf("rate = %v, want 2000 (4000 values in 2 s)", p.rate)
	}
}

// clients/SPEC.md, "a safe distance" (the Java client's RefillPace, ported).

func TestAWaitDoublesTheSafeDistanceOncePerEmptyBufferUpToItsBound(t *testing.T) {
	var p pace
	p.waited()
	if p.dist() != minDistance {
		t.Fatalf("distance = %d after a wait before the rate is measured; want %d (the start)", p.dist(), minDistance)
	}
	t0 := time.Unix(1000, 0)
	p.arrived(t0, time.Millisecond, 0, 0)
	p.arrived(t0.Add(time.Second), time.Millisecond, 10_000_000, 0) // 10M values/s, refills of 1 ms
	if got := p.lowWater(64, 1_000_000); got != 20_000 {
		t.Fatalf("lowWater = %d, want 20000 (2 x 1 ms x 10M/s)", got)
	}
	p.waited()
	p.waited() // another caller on the same empty buffer
	if got := p.lowWater(64, 1_000_000); got != 40_000 {
		t.Fatalf("lowWater = %d, want 40000 (4 x 1 ms x 10M/s): once per empty buffer", got)
	}
	for i := range 10 {
		p.arrived(t0.Add(2*time.Second+time.Duration(i)*time.Millisecond), time.Millisecond, 10_000_000+10_000*uint64(i+1), 0)
		p.waited()
	}
	if p.dist() != maxDistance {
		t.Fatalf("distance = %d, want the bound %d", p.dist(), maxDistance)
	}
	for i := range calmRefills {
		p.arrived(t0.Add(3*time.Second+time.Duration(i)*time.Millisecond), time.Millisecond, 20_000_000, 0)
	}
	if p.dist() != maxDistance/2 {
		t.Fatalf("distance = %d, want %d: calm refills halve it", p.dist(), maxDistance/2)
	}
}

func TestTheRateLeavesOutTheTimeTheBufferWasEmptyAndFallsAQuarterOfTheWay(t *testing.T) {
	var p pace
	t0 := time.Unix(1000, 0)
	p.arrived(t0, time.Millisecond, 0, 0)
	p.arrived(t0.Add(100*time.Millisecond), time.Millisecond, 1_000_000, 0)
	if p.rate != 10_000_000 {
		t.Fatalf("rate = %v, want 1e7 (1M values in 100 ms)", p.rate)
	}
	// 1M values in the next 100 ms, 90 of which the callers waited: 100M values/s while served.
	p.arrived(t0.Add(200*time.Millisecond), time.Millisecond, 2_000_000, 90*time.Millisecond)
	if math.Abs(p.rate-100_000_000) > 1 {
		t.Fatalf("rate = %v, want 1e8: a higher rate is taken at once", p.rate)
	}
	p.arrived(t0.Add(300*time.Millisecond), time.Millisecond, 2_000_000, 0)
	if math.Abs(p.rate-75_000_000) > 1 {
		t.Fatalf("rate = %v, want 7.5e7: a quiet interval lowers it a quarter of the way", p.rate)
	}
}

func TestTheMarkCoversTheSlowestRecentRefillWhichHalvesEveryTenSeconds(t *testing.T) {
	var p pace
	t0 := time.Unix(1000, 0)
	p.arrived(t0, time.Millisecond, 0, 0)
	p.arrived(t0.Add(100*time.Millisecond), time.Millisecond, 1_000_000, 0) // 10M values/s, refills of 1 ms
	if got := p.lowWater(64, 100_000_000); got != 20_000 {
		t.Fatalf("lowWater = %d, want 20000 (2 x 1 ms x 10M/s)", got)
	}
	p.arrived(t0.Add(200*time.Millisecond), 30*time.Millisecond, 2_000_000, 0)
	if got := p.lowWater(64, 100_000_000); got != 600_000 {
		t.Fatalf("lowWater = %d, want 600000: one refill of 30 ms, 2 x 30 ms x 10M/s (not the mean)", got)
	}
	p.arrived(t0.Add(10200*time.Millisecond), time.Millisecond, 102_000_000, 0) // 10 s later, still 10M values/s
	if got := p.lowWater(64, 100_000_000); got != 300_000 {
		t.Fatalf("lowWater = %d, want 300000: 10 s on, half of it", got)
	}
}

// rangeSidecar is a segment sidecar with /range: it records each count asked, answers
// min(count, cap) values, and answers 400 to a count above max.
func rangeSidecar(t *testing.T, cap, max int) (string, func() []int) {
	var mu sync.Mutex
	var asked []int
	next := int64(1)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			fmt.Fprint(w, `{"status":"ready","mode":"Segment","strict":false,"phase":"segment"}`)
		case "/range":
			count, _ := strconv.Atoi(r.URL.Query().Get("count"))
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, count)
			if count > max {
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprintf(w, `{"error":"count must be a whole number from 1 to %d"}`, max)
				return
			}
			n := min(count, cap)
			fmt.Fprintf(w, `{"first":"%d","count":%d}`, next, n)
			next += int64(n)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(s.Close)
	return s.URL, func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), asked...)
	}
}

func TestRangeRefillsGrowPastMaxBatchUpToMaxRange(t *testing.T) {
	url, asked := rangeSidecar(t, 1<<30, 1<<30)
	c := newClient(t, Settings{URL: url, MaxBatch: 100, MaxRange: 6400})
	for i := int64(1); i <= 200_000; i++ {
		v, err := c.NextID(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if v != i {
			t.Fatalf("got %d, want %d", v, i)
		}
	}
	largest := 0
	for _, n := range asked() {
		if n > 6400 {
			t.Fatalf("asked %d, above MaxRange", n)
		}
		largest = max(largest, n)
	}
	if largest != 6400 {
		t.Fatalf("the largest range asked was %d; want MaxRange (6400), far above MaxBatch (100)", largest)
	}
}

func TestA400ToARangeHalvesMaxRangeAndTheValuesStillComeInOrder(t *testing.T) {
	url, asked := rangeSidecar(t, 1<<30, 1000)
	c := newClient(t, Settings{URL: url, MaxRange: 4096})
	for i := int64(1); i <= 100_000; i++ {
		v, err := c.NextID(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if v != i {
			t.Fatalf("got %d, want %d", v, i)
		}
	}
	refused := 0
	for _, n := range asked() {
		if n > 1000 {
			refused++
		}
	}
	if refused == 0 || refused > 3 {
		t.Fatalf("%d refused ranges; want a few halvings (4096, 2048), then none: %v", refused, asked())
	}
}
