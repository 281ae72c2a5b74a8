package kubeflakeprom

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kubeflake "github.com/kubeflake/kubeflake/clients/go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

type fixed kubeflake.Stats

func (f fixed) Stats() kubeflake.Stats { return kubeflake.Stats(f) }

// Every counter of Stats comes out under its clients/SPEC.md name, with its value.
func TestEveryCounterUnderItsName(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(fixed{
		IDs: 1000, BufferDepth: 96, BatchSize: 128, Refills: 7, RefillTime: 350 * time.Millisecond,
		RefillErrors: 2, Waits: 3, WaitTime: 1500 * time.Millisecond, Expired: 40, Direct: 5,
		Errors: map[kubeflake.Kind]uint64{kubeflake.KindNoSidecar: 2, kubeflake.KindBadRequest: 1},
	}, "orders"))
	want := `
# HELP kubeflake_client_batch_size The size of the next refill.
# TYPE kubeflake_client_batch_size gauge
kubeflake_client_batch_size{client="orders"} 128
# HELP kubeflake_client_buffer_depth IDs in the prefetch buffer now.
# TYPE kubeflake_client_buffer_depth gauge
kubeflake_client_buffer_depth{client="orders"} 96
# HELP kubeflake_client_direct_requests_total Requests that bypass the buffer.
# TYPE kubeflake_client_direct_requests_total counter
kubeflake_client_direct_requests_total{client="orders"} 5
# HELP kubeflake_client_errors_total Errors returned to the app, by kind.
# TYPE kubeflake_client_errors_total counter
kubeflake_client_errors_total{client="orders",kind="bad_request"} 1
kubeflake_client_errors_total{client="orders",kind="no_sidecar"} 2
# HELP kubeflake_client_expired_total Buffered IDs dropped as older than MaxAge.
# TYPE kubeflake_client_expired_total counter
kubeflake_client_expired_total{client="orders"} 40
# HELP kubeflake_client_ids_total IDs handed out from the buffer.
# TYPE kubeflake_client_ids_total counter
kubeflake_client_ids_total{client="orders"} 1000
# HELP kubeflake_client_refill_errors_total Refills that failed.
# TYPE kubeflake_client_refill_errors_total counter
kubeflake_client_refill_errors_total{client="orders"} 2
# HELP kubeflake_client_refill_seconds_total Time spent in successful refills.
# TYPE kubeflake_client_refill_seconds_total counter
kubeflake_client_refill_seconds_total{client="orders"} 0.35
# HELP kubeflake_client_refills_total Successful refills of the buffer.
# TYPE kubeflake_client_refills_total counter
kubeflake_client_refills_total{client="orders"} 7
# HELP kubeflake_client_wait_seconds_total Time NextID calls spent waiting for a refill.
# TYPE kubeflake_client_wait_seconds_total counter
kubeflake_client_wait_seconds_total{client="orders"} 1.5
# HELP kubeflake_client_waits_total NextID calls that found the buffer empty and waited.
# TYPE kubeflake_client_waits_total counter
kubeflake_client_waits_total{client="orders"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

// Two clients in one registry: the client label keeps them apart.
func TestTwoClientsRegisterSideBySide(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(fixed{IDs: 1}, "a"), NewCollector(fixed{IDs: 2}, "b"))
	if n, err := testutil.GatherAndCount(reg, "kubeflake_client_ids_total"); err != nil || n != 2 {
		t.Fatalf("got %d series, %v; want 2", n, err)
	}
	if err := reg.Register(NewCollector(fixed{}, "a")); err == nil {
		t.Fatal("a second collector named a registered; want a duplicate error")
	}
}

// A real client against a real sidecar: after 1,000 NextIDs the gathered counters say so.
func TestARealClientsCounters(t *testing.T) {
	bin := os.Getenv("KUBEFLAKE_SIDECAR_BIN")
	if bin == "" {
		t.Skip("KUBEFLAKE_SIDECAR_BIN is not set (clients/test.sh sets it)")
	}
	dir := t.TempDir()
	socket := filepath.Join(dir, "api.sock")
	cmd := exec.Command(bin, "standalone", "--listen", "127.0.0.1:0", "--listen-unix", socket, "--state-dir", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ids, err := kubeflake.New(kubeflake.Settings{Socket: socket, MaxWait: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ids.Close()
	for range 400 { // the socket appears when the sidecar listens
		if _, err := os.Stat(socket); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	ctx := context.Background()
	for range 1000 {
		if _, err := ids.NextID(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ids.NextIDAfter(ctx, 1); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(ids, "default"))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			got[f.GetName()] = value(m)
		}
	}
	stats := ids.Stats()
	if got["kubeflake_client_ids_total"] != 1000 || got["kubeflake_client_direct_requests_total"] != 1 {
		t.Fatalf("ids_total %v, direct_requests_total %v; want 1000 and 1", got["kubeflake_client_ids_total"], got["kubeflake_client_direct_requests_total"])
	}
	if got["kubeflake_client_refills_total"] < 1 || got["kubeflake_client_refills_total"] > float64(stats.Refills) {
		t.Fatalf("refills_total %v; want at least 1 and at most %d", got["kubeflake_client_refills_total"], stats.Refills)
	}
	if got["kubeflake_client_refill_seconds_total"] <= 0 {
		t.Fatalf("refill_seconds_total %v; want the time of at least one refill", got["kubeflake_client_refill_seconds_total"])
	}
	if got["kubeflake_client_batch_size"] < 64 || got["kubeflake_client_buffer_depth"] < 0 {
		t.Fatalf("batch_size %v, buffer_depth %v", got["kubeflake_client_batch_size"], got["kubeflake_client_buffer_depth"])
	}
	if _, ok := got["kubeflake_client_waits_total"]; !ok {
		t.Fatal("no kubeflake_client_waits_total")
	}
}

func value(m *dto.Metric) float64 {
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}
