package kubeflake

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// clients/SPEC.md, "Ranges in segment mode".

// answered is the sidecar's count of 200 answers to route (its /metrics).
func answered(t *testing.T, url, route string) int {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`kubeflake_http_requests_total\{code="200",route="` + route + `"\} (\d+)`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

func TestSegmentRefillsAreRangesAndEveryValueComesOnceInOrder(t *testing.T) {
	url, socket := sidecar(t, "--mode", "segment", "--block-size", "700")
	c := newClient(t, Settings{Socket: socket})
	prev := int64(-1)
	for range 20_000 {
		v, err := c.NextID(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if v <= prev {
			t.Fatalf("%d came after %d", v, prev)
		}
		prev = v
	}
	if got := c.Stats().IDs; got != 20_000 {
		t.Fatalf("Stats().IDs = %d, want 20000", got)
	}
	if answered(t, url, "range") == 0 || answered(t, url, "ids") != 0 {
		t.Fatalf("refills asked /range %d times and /ids %d times; want /range only",
			answered(t, url, "range"), answered(t, url, "ids"))
	}
}

func TestASidecarWithoutRangeAnswering404IsAskedForIdsAndItsRunsServedInOrder(t *testing.T) {
	// A 0.1.0 sidecar in segment mode: no /range; /ids values with a gap after every multiple of 7.
	var rangeAsked atomic.Int32
	var mu sync.Mutex
	next := int64(1000)
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/readyz":
			fmt.Fprint(w, `{"status":"ready","mode":"Segment","strict":false,"phase":"segment"}`)
		case r.URL.Path == "/ids":
			count, _ := strconv.Atoi(r.URL.Query().Get("count"))
			var b strings.Builder
			mu.Lock()
			for range count {
				fmt.Fprintf(&b, "%d\n", next)
				next += map[bool]int64{true: 3, false: 1}[next%7 == 0]
			}
			mu.Unlock()
			fmt.Fprint(w, b.String())
		default:
			if r.URL.Path == "/range" {
				rangeAsked.Add(1)
			}
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"error":"no route %s"}`, r.URL.Path)
		}
	}))
	defer old.Close()
	c := newClient(t, Settings{URL: old.URL})
	want := int64(1000)
	for range 3000 {
		v, err := c.NextID(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if v != want {
			t.Fatalf("got %d, want %d: the values of /ids, in their order, none skipped", v, want)
		}
		want += map[bool]int64{true: 3, false: 1}[want%7 == 0]
	}
	if n := rangeAsked.Load(); n != 1 {
		t.Fatalf("/range was asked %d times, want once then never again", n)
	}
}

func TestParseRangeTakesOnlyTheDocumentedShape(t *testing.T) {
	for _, bad := range []string{`{"first":5,"count":3}`, `{"first":"5","count":0}`, `{"first":"5","count":11}`,
		`{"first":"-5","count":3}`, `{"first":"5"}`, `{"first":"9223372036854775807","count":2}`, `{"first":"9223372036854775806","count":3}`, `<html>`,
		`{"first":"+5","count":3}`} {
		if _, _, err := parseRange([]byte(bad), 10, "/range?count=10"); err == nil {
			t.Errorf("%s was accepted", bad)
		}
	}
	// The last range of the sequence ends at 2^63-1.
	first, n, err := parseRange([]byte(`{"first":"9223372036854775798","count":10}`), 10, "/range")
	if err != nil || first != 9223372036854775798 || n != 10 {
		t.Fatalf("got %d, %d, %v", first, n, err)
	}
}
