package kubeflake

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// sidecar starts a standalone sidecar (KUBEFLAKE_SIDECAR_BIN; clients/test.sh sets it)
// on a free loopback port and a Unix socket, and stops it when the test ends.
func sidecar(t *testing.T, args ...string) (url, socket string) {
	t.Helper()
	bin := os.Getenv("KUBEFLAKE_SIDECAR_BIN")
	if bin == "" {
		t.Fatal("KUBEFLAKE_SIDECAR_BIN must name a built kubeflake-sidecar binary (clients/test.sh finds or builds one)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	socket = filepath.Join(dir, "api.sock")
	cmd := exec.Command(bin, append([]string{"standalone", "--listen", addr, "--listen-unix", socket, "--state-dir", dir}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url = "http://" + addr
	for range 400 {
		if resp, err := http.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, socket
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the sidecar at %s did not become ready in 20 s", url)
	return "", ""
}

func newClient(t *testing.T, s Settings) *Client {
	t.Helper()
	c, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestTheSocketWinsOverTheURL(t *testing.T) {
	t.Setenv("KUBEFLAKE_SOCKET", "/run/kubeflake/api.sock")
	t.Setenv("KUBEFLAKE_URL", "http://127.0.0.1:7070")
	ep, err := resolveEndpoint(Settings{})
	if err != nil || ep.transport() != "unix" || ep.socket != "/run/kubeflake/api.sock" {
		t.Fatalf("got %v, %v; want the socket", ep, err)
	}
}

func TestTheURLIsUsedWithoutASocket(t *testing.T) {
	t.Setenv("KUBEFLAKE_SOCKET", "")
	t.Setenv("KUBEFLAKE_URL", "http://127.0.0.1:7171")
	ep, err := resolveEndpoint(Settings{})
	if err != nil || ep.transport() != "tcp" || ep.host != "127.0.0.1:7171" {
		t.Fatalf("got %v, %v; want 127.0.0.1:7171 over TCP", ep, err)
	}
}

func TestAURLThatIsNotPlainHTTPIsRefusedWithAnExample(t *testing.T) {
	_, err := New(Settings{URL: "https://kubeflake:7070"})
	if err == nil || !strings.Contains(err.Error(), DefaultURL) {
		t.Fatalf("got %v; want an error showing %s", err, DefaultURL)
	}
}

func TestRefusalsAreTypedByReason(t *testing.T) {
	cases := []struct {
		status    int
		reason    string
		sentinel  error
		retryable bool
	}{
		{503, "clock_before_epoch", ErrClockBehind, true},
		{409, "after_ahead_of_clock", ErrClockBehind, true},
		{503, "no_slot", ErrSlotLost, true},
		{503, "timestamp_exhausted", ErrExhausted, false},
		{409, "after_above_counter", ErrExhausted, false},
		{503, "fence_reached", ErrRefused, true},
	}
	for _, c := range cases {
		e := errorFromResponse(c.status, []byte(`{"error":"why","reason":"`+c.reason+`"}`), "3", "/id")
		if !errors.Is(e, c.sentinel) || !errors.Is(e, ErrRefused) || e.Retryable() != c.retryable || e.RetryAfter != 3*time.Second {
			t.Errorf("%d %s: got %+v; want %v, retryable %v, Retry-After 3 s", c.status, c.reason, e, c.sentinel, c.retryable)
		}
	}
	if e := errorFromResponse(400, []byte(`{"error":"count must be a whole number"}`), "", "/ids"); !errors.Is(e, ErrBadRequest) || errors.Is(e, ErrRefused) || e.Retryable() {
		t.Errorf("a 400: got %+v; want a bad request that waiting does not fix", e)
	}
}

func TestTheBatchDoublesUnderDemandAndHalvesWhenIdle(t *testing.T) {
	s, _ := Settings{MinBatch: 64, MaxBatch: 1000}.withDefaults()
	if got := nextBatchSize(64, 10*time.Millisecond, true, s, 1000); got != 128 {
		t.Errorf("a batch used in 10 ms: next %d, want 128", got)
	}
	if got := nextBatchSize(800, 10*time.Millisecond, true, s, 1000); got != 1000 {
		t.Errorf("capped: next %d, want 1000", got)
	}
	if got := nextBatchSize(512, time.Second, true, s, 1000); got != 256 {
		t.Errorf("a batch that lasted 1 s: next %d, want 256", got)
	}
	if got := nextBatchSize(64, time.Second, true, s, 1000); got != 64 {
		t.Errorf("never below MinBatch: next %d, want 64", got)
	}
}

func TestParseIDsTakesTheWholeAnswerOrNone(t *testing.T) {
	ids, err := parseIDs([]byte("1\n9223372036854775807\n"), "/ids")
	if err != nil || !slices.Equal(ids, []int64{1, 1<<63 - 1}) {
		t.Fatalf("got %v, %v", ids, err)
	}
	for _, bad := range []string{"", "12\nx\n", "9223372036854775808\n"} {
		if _, err := parseIDs([]byte(bad), "/ids"); !errors.Is(err, ErrProtocol) {
			t.Errorf("%q: got %v; want a protocol error", bad, err)
		}
	}
}

// parseDecimal (eight digits at a time) agrees with strconv on every length, digit and
// position of a non-digit, and on the edges of 2^63.
func TestParseDecimalAgreesWithStrconv(t *testing.T) {
	want := func(s string) (int64, bool) {
		if s == "" || s[0] == '+' || s[0] == '-' || len(s) > 19 {
			return 0, false
		}
		v, err := strconv.ParseInt(s, 10, 64)
		return v, err == nil
	}
	cases := []string{"0", "7", "00000000", "12345678", "123456789", "9223372036854775807",
		"9223372036854775808", "9999999999999999999", "10000000000000000000", "0009223372036854775807",
		"252763575603429376", "25276357560342937/", "2527635756034:9376", "+1", "-1", " 1", "1 "}
	rnd := uint64(1)
	for range 20000 {
		rnd = rnd*6364136223846793005 + 1442695040888963407
		n := 1 + int(rnd>>59)%21
		b := make([]byte, n)
		for i := range b {
			rnd = rnd*6364136223846793005 + 1442695040888963407
			b[i] = '0' + byte(rnd>>60)%10
		}
		if rnd>>32%4 == 0 { // a byte that is not a digit, at any position
			rnd = rnd*6364136223846793005 + 1442695040888963407
			b[int(rnd>>33)%n] = byte(rnd >> 50)
		}
		cases = append(cases, string(b))
	}
	for _, c := range cases {
		got, ok := parseDecimal([]byte(c))
		if w, wok := want(c); got != w && ok || ok != wok {
			t.Fatalf("%q: got %d, %v; want %d, %v", c, got, ok, w, wok)
		}
	}
}

func TestLayoutComposeAndDecomposeAreInverse(t *testing.T) {
	l := Layout{TotalBits: 63, TimestampBits: 41, DatacenterBits: 2, WorkerBits: 8, SequenceBits: 12,
		Epoch: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), TimeUnit: 10 * time.Millisecond}
	id, err := l.Compose(123456, 1, 200, 4000)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := l.Decompose(id)
	if p.Tick != 123456 || p.Datacenter != 1 || p.Worker != 200 || p.Sequence != 4000 || !p.Time.Equal(l.Epoch.Add(1234560*time.Millisecond)) {
		t.Fatalf("got %+v", p)
	}
	if _, err := l.Compose(1, 0, 256, 0); err == nil {
		t.Fatal("a worker of 256 in 8 bits was accepted")
	}
}

func TestIDsFromTheBufferAreUniqueAndIncreasePerGoroutine(t *testing.T) {
	_, socket := sidecar(t, "--worker-id", "7")
	c := newClient(t, Settings{Socket: socket})
	var wg sync.WaitGroup
	taken := make([][]int64, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5000 {
				id, err := c.NextID(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				taken[g] = append(taken[g], id)
			}
		}()
	}
	wg.Wait()
	seen := map[int64]bool{}
	for g, ids := range taken {
		if !slices.IsSorted(ids) {
			t.Errorf("goroutine %d got IDs out of order", g)
		}
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("%d was handed out twice", id)
			}
			seen[id] = true
		}
	}
	if s := c.Stats(); s.IDs != 80000 || s.Refills == 0 || s.Refills > 80000/64 || s.BatchSize <= 64 {
		t.Errorf("stats %+v: want 80,000 IDs from fewer refills, the batch grown", s)
	}
}

func TestNextIDAfterIsAboveAfterAndBypassesTheBuffer(t *testing.T) {
	url, _ := sidecar(t)
	c := newClient(t, Settings{URL: url})
	ctx := context.Background()
	first, err := c.NextID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Layout(ctx)
	if err != nil || l == nil {
		t.Fatalf("layout %v, %v", l, err)
	}
	p, _ := l.Decompose(first)
	after, _ := l.Compose(p.Tick+200, 0, 1023, 4095)
	got, err := c.NextIDAfter(ctx, after)
	if err != nil || got <= after {
		t.Fatalf("NextIDAfter(%d) = %d, %v", after, got, err)
	}
	if c.Stats().Direct != 1 {
		t.Errorf("NextIDAfter did not bypass the buffer: %+v", c.Stats())
	}
}

func TestDecomposeAgreesWithTheSidecar(t *testing.T) {
	url, _ := sidecar(t, "--worker-id", "5")
	c := newClient(t, Settings{URL: url})
	ctx := context.Background()
	id, err := c.NextID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Decompose(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := c.http.decode(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	d := toDoc(doc)
	if d.Tick.String() != strconv.FormatInt(p.Tick, 10) || d.Worker.String() != "5" || p.Worker != 5 || d.Sequence.String() != strconv.FormatInt(p.Sequence, 10) {
		t.Fatalf("local %+v, /decode %+v", p, d)
	}
}

func TestNoSidecarIsATypedErrorWithinTheBound(t *testing.T) {
	c := newClient(t, Settings{Socket: filepath.Join(t.TempDir(), "absent.sock"), MaxWait: 300 * time.Millisecond})
	_, err := c.NextID(context.Background())
	if !errors.Is(err, ErrNoSidecar) || !strings.Contains(err.Error(), "absent.sock") {
		t.Fatalf("got %v; want ErrNoSidecar naming the socket", err)
	}
	if c.Stats().Errors[KindNoSidecar] != 1 {
		t.Errorf("stats %+v: the error was not counted", c.Stats())
	}
}

func TestACancelledContextEndsTheWait(t *testing.T) {
	c := newClient(t, Settings{Socket: filepath.Join(t.TempDir(), "absent.sock"), MaxWait: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.NextID(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v; want context.Canceled", err)
	}
}

func TestSegmentValuesComeOutInOrder(t *testing.T) {
	_, socket := sidecar(t, "--mode", "segment", "--block-size", "500")
	c := newClient(t, Settings{Socket: socket})
	var values []int64
	for range 3000 {
		v, err := c.NextID(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		values = append(values, v)
	}
	if !slices.IsSorted(values) || len(slices.Compact(slices.Clone(values))) != len(values) {
		t.Fatal("segment values out of order or repeated")
	}
	if l, err := c.Layout(context.Background()); l != nil || err != nil {
		t.Fatalf("a segment sequence has no layout: got %v, %v", l, err)
	}
}

// A fake sidecar, for the one answer a standalone sidecar never gives: a pod's sidecar
// that waits for the operator to give it a worker slot.
func TestASidecarWaitingForASlotIsSlotLostNotNoSidecar(t *testing.T) {
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"status":"not ready","phase":"waiting","reason":"no_slot","error":"no worker slot yet"}`))
	}))
	defer fake.Close()
	c := newClient(t, Settings{URL: fake.URL, MaxWait: 500 * time.Millisecond})
	_, err := c.NextID(context.Background())
	var e *Error
	if !errors.Is(err, ErrSlotLost) || !errors.As(err, &e) || e.Reason != "no_slot" || e.RetryAfter != time.Second || !strings.Contains(err.Error(), "no worker slot yet") {
		t.Fatalf("got %v; want slot_lost, reason no_slot, Retry-After 1 s", err)
	}
}

// Buffered IDs are never handed out older than MaxAge (clients/SPEC.md, "Maximum age"),
// however far ahead the mark keeps the buffer: bursts of calls with pauses longer than
// MaxAge between them, and every ID's time (from the sidecar's layout) within MaxAge of
// the moment NextID returned. 100 ms of slack for a caller descheduled between the age
// check and its return (a shared machine); the pauses are 300 ms, so an ID kept past
// MaxAge would be about 180 ms older than allowed.
func TestSnowflakeIDsAreNeverHandedOutOlderThanMaxAge(t *testing.T) {
	_, socket := sidecar(t)
	const maxAge = 20 * time.Millisecond
	c := newClient(t, Settings{Socket: socket, MaxAge: maxAge})
	ctx := context.Background()
	layout, err := c.Layout(ctx)
	if err != nil || layout == nil {
		t.Fatalf("layout: %v, %v", layout, err)
	}
	for burst := range 4 {
		for range 20_000 {
			// The age is taken when the call began: the buffer checks a batch's age (from
			// when its request was sent, before any of its IDs' times) after that moment, so
			// the bound holds however long this caller is descheduled before or after; the
			// slack is the ID's time unit and the clock reads' spread, not the machine's load.
			began := time.Now()
			id, err := c.NextID(ctx)
			if err != nil {
				t.Fatal(err)
			}
			p, err := layout.Decompose(id)
			if err != nil {
				t.Fatal(err)
			}
			if age := began.Sub(p.Time); age > maxAge+layout.TimeUnit+5*time.Millisecond {
				t.Fatalf("burst %d: ID %d was %s old when its call began; MaxAge is %s", burst, id, age, maxAge)
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	if c.Stats().Expired == 0 {
		t.Fatal("no buffered ID expired across pauses longer than MaxAge: the test did not test the bound")
	}
}
