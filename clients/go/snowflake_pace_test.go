package kubeflake

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// clients/SPEC.md, "Range refills are sized and timed so that no caller waits", for
// Snowflake buffers (the Java client's SnowflakePacingTest, with the same figures): the
// low-water mark keeps a safe distance of (slowest recent) refills at the measured rate, as
// a segment buffer's, but never holds more IDs than the rate hands out in half of MaxAge
// (less a batch), so that buffered IDs are handed out young instead of expiring
// (docs/notes/bench-2026-11-30-go-paced.md: with half a batch, four goroutines at 0.9x the
// default layout's ceiling found the buffer empty at nearly every refill).

// measuredSnowflake: refills of took, 3,690,000 IDs/s between them.
func measuredSnowflake(took time.Duration) *pace {
	var p pace
	t0 := time.Unix(1000, 0)
	p.arrived(t0, took, 0, 0)
	p.arrived(t0.Add(100*time.Millisecond), took, 369_000, 0)
	return &p
}

// The Snowflake mark for batches of 10,000 and the default ceiling (8 batches).
func snowflakeMark(p *pace, maxAge time.Duration) int {
	return p.snowflakeLowWater(10_000, rangesAhead*10_000, maxAge)
}

func TestTheSnowflakeMarkIsHalfABatchUntilTheRateIsMeasured(t *testing.T) {
	var p pace
	p.arrived(time.Unix(1000, 0), 5*time.Millisecond, 0, 0)
	if got := snowflakeMark(&p, time.Second); got != 5_000 {
		t.Fatalf("mark = %d, want 5000 (half a batch: one refill, no rate yet)", got)
	}
}

func TestTheSnowflakeMarkCoversTwoSlowestRefillsAtTheRateUpToEightBatches(t *testing.T) {
	if got := snowflakeMark(measuredSnowflake(5*time.Millisecond), time.Second); got != 36_900 {
		t.Fatalf("mark = %d, want 36900 (2 x 5 ms x 3.69M/s), not half a batch", got)
	}
	if got := snowflakeMark(measuredSnowflake(50*time.Millisecond), time.Second); got != 80_000 {
		t.Fatalf("mark = %d, want 80000: at most 8 batches", got)
	}
}

func TestTheSnowflakeMarkNeverHoldsMoreThanHalfOfMaxAgeAtTheRateLessABatch(t *testing.T) {
	p := measuredSnowflake(5 * time.Millisecond)
	for _, c := range []struct {
		maxAge time.Duration
		want   int
		why    string
	}{
		{20 * time.Millisecond, 26_900, "3.69M/s x 10 ms, less a batch"},
		{10 * time.Millisecond, 8_450, "3.69M/s x 5 ms, less a batch"},
		{5 * time.Millisecond, 5_000, "half a batch when MaxAge leaves no room (9,225 - 10,000)"},
		{-1, 36_900, "no MaxAge (negative: forever): no bound but 8 batches"},
	} {
		if got := snowflakeMark(p, c.maxAge); got != c.want {
			t.Errorf("MaxAge %s: mark = %d, want %d (%s)", c.maxAge, got, c.want, c.why)
		}
	}
}

func TestASnowflakeWaitDoublesTheDistanceWithinMaxAge(t *testing.T) {
	p := measuredSnowflake(5 * time.Millisecond)
	p.waited()
	if p.dist() != 4 {
		t.Fatalf("distance = %d after a wait, want 4", p.dist())
	}
	if got := snowflakeMark(p, time.Second); got != 73_800 {
		t.Fatalf("mark = %d, want 73800 (4 x 5 ms x 3.69M/s)", got)
	}
	if got := snowflakeMark(p, 20*time.Millisecond); got != 26_900 {
		t.Fatalf("mark = %d, want 26900: still within half of MaxAge", got)
	}
}

// gatedSnowflakeSidecar answers /ids at once `open` times, then holds each answer until
// release is called; requests says how many /ids requests it has received.
func gatedSnowflakeSidecar(t *testing.T, open int) (url string, release func(), requests func() int) {
	var mu sync.Mutex
	next, answered := int64(1), 0
	gate := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			fmt.Fprint(w, `{"status":"ready","mode":"Snowflake","strict":false,"phase":"snowflake"}`)
		case "/ids":
			mu.Lock()
			answered++
			held := answered > open
			mu.Unlock()
			if held {
				select {
				case <-gate:
				case <-r.Context().Done():
					return
				}
			}
			count, _ := strconv.Atoi(r.URL.Query().Get("count"))
			mu.Lock()
			ids := make([]string, count)
			for i := range ids {
				ids[i] = strconv.FormatInt(next, 10)
				next++
			}
			mu.Unlock()
			fmt.Fprint(w, strings.Join(ids, "\n")+"\n")
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(func() { release(); s.Close() })
	return s.URL, release, func() int {
		mu.Lock()
		defer mu.Unlock()
		return answered
	}
}

// The client's wiring of the rule in Snowflake mode: every refill is measured, and a caller
// that finds the buffer empty (once the rate is measured) doubles the distance and moves
// the mark by the Snowflake rule, MaxAge included. No timing: two refills answered at
// once, the third held until a caller waits on it; the measures are then set by hand
// (1,000 IDs/s, a slowest refill of 150 ms), so that the mark at distance 2 is 300, at 4
// 600, and within half of MaxAge (1 s) 500 less a batch: 400.
func TestASnowflakeCallerFindingTheBufferEmptyDoublesTheSafeDistance(t *testing.T) {
	url, release, _ := gatedSnowflakeSidecar(t, 2)
	c := newClient(t, Settings{URL: url, MinBatch: 100, MaxBatch: 100, MaxAge: time.Second, MaxWait: 10 * time.Second})
	ctx := context.Background()
	for range 200 { // the two answered batches
		if _, err := c.NextID(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	arrivals, dist, waits := c.pace.arrivals, c.pace.dist(), c.stats.Waits
	c.pace.rate, c.pace.slow = 1000, float64(150*time.Millisecond)
	c.low.Store(300)
	c.mu.Unlock()
	if arrivals != 2 || dist != minDistance {
		t.Fatalf("after two refills: %d measured arrivals, distance %d; want 2 and %d", arrivals, dist, minDistance)
	}
	got := make(chan error, 1)
	go func() { _, err := c.NextID(ctx); got <- err }() // finds the buffer empty: the third refill is held
	for {
		c.mu.Lock()
		waited := c.stats.Waits > waits
		dist, low := c.pace.dist(), c.low.Load()
		c.mu.Unlock()
		if waited {
			if dist != 2*minDistance {
				t.Errorf("distance = %d after a caller found the buffer empty; want %d", dist, 2*minDistance)
			}
			if low != 400 {
				t.Errorf("the mark is %d after the wait; want 400 (4 x 150 ms x 1,000/s = 600, within half of MaxAge at the rate less a batch)", low)
			}
			break
		}
		select {
		case err := <-got:
			t.Fatalf("the caller returned (%v) without waiting, though the third refill is held", err)
		case <-time.After(time.Millisecond):
		}
	}
	release()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// The third refill's arrival sets the mark by the same rule: the slowest refill is still
	// about 150 ms and the rate at least 750 IDs/s (a quarter of the way down from 1,000,
	// and down again only for the refills made while the buffer is at or under the mark),
	// so not half a batch.
	if low := c.low.Load(); low <= 50 {
		t.Errorf("the mark is %d after the held refill arrived; want the Snowflake rule's, above half a batch", low)
	}
}

// A refill asked for while the previous one was out is not made once that one has filled
// the buffer above the mark (it was: the buffer then grew by a batch a time; the test that
// the buffer held at most one and a half batches pinned it while the mark was half a batch).
// No timing: the first refill is held while two callers wait on it, so the second caller's
// ask is pending when it arrives; the mark is then half a batch (the rate is measured from
// the second refill), and the batch of 100 leaves 98 after the two callers.
func TestARefillAskedWhileOneWasOutIsNotMadeOnceTheBufferIsAboveTheMark(t *testing.T) {
	url, release, requests := gatedSnowflakeSidecar(t, 0)
	c := newClient(t, Settings{URL: url, MinBatch: 100, MaxBatch: 100, MaxWait: 10 * time.Second})
	ctx := context.Background()
	got := make(chan error, 2)
	call := func() { _, err := c.NextID(ctx); got <- err }
	go call()
	until := func(what string, done func() bool) {
		for deadline := time.Now().Add(10 * time.Second); !done(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s in 10 s", what)
			}
		}
	}
	until("first refill", func() bool { return requests() == 1 })
	go call() // waits too, asking for a refill while the first is out
	until("second wait", func() bool { return c.Stats().Waits == 2 })
	release()
	for range 2 {
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // time for a refill the client should not make
	if n, s := requests(), c.Stats(); n != 1 || s.BufferDepth != 98 {
		t.Fatalf("%d refills asked, %d IDs buffered; want 1 and 98: none while 98 IDs are above the mark of 50", n, s.BufferDepth)
	}
}
