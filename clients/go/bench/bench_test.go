// Package bench measures the Go client's NextID beside one HTTP request per ID and beside
// sonyflake, the best-known in-process generator in Go, in one run. A separate module so
// that the client itself depends on nothing. Not a test: nothing here asserts on timings.
//
//	KUBEFLAKE_SIDECAR_BIN=path/to/kubeflake-sidecar go test -run '^$' -bench . -benchtime 2000000x
package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	kubeflake "github.com/kubeflake/kubeflake/clients/go"
	"github.com/sony/sonyflake"
)

var socket string

func TestMain(m *testing.M) {
	bin := os.Getenv("KUBEFLAKE_SIDECAR_BIN")
	if bin == "" {
		fmt.Fprintln(os.Stderr, "bench: KUBEFLAKE_SIDECAR_BIN must name a built kubeflake-sidecar binary")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "kubeflake-bench-")
	if err != nil {
		panic(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	addr := l.Addr().String()
	l.Close()
	socket = filepath.Join(dir, "api.sock")
	cmd := exec.Command(bin, "standalone", "--listen", addr, "--listen-unix", socket, "--state-dir", dir)
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	ready := false
	for range 400 {
		if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if ready = resp.StatusCode == http.StatusOK; ready {
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	code := 2
	if ready {
		code = m.Run()
	} else {
		fmt.Fprintln(os.Stderr, "bench: the sidecar did not become ready in 20 s")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	os.RemoveAll(dir)
	os.Exit(code)
}

// timed runs next b.N times, timing each call, and reports the percentiles.
func timed(b *testing.B, next func() error) {
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if err := next(); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(float64(len(lat)-1)*p)].Nanoseconds()) }
	b.ReportMetric(pct(0.50), "p50-ns")
	b.ReportMetric(pct(0.99), "p99-ns")
	b.ReportMetric(pct(0.999), "p99.9-ns")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
}

func client(b *testing.B, s kubeflake.Settings) *kubeflake.Client {
	s.Socket = socket
	c, err := kubeflake.New(s)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	if _, err := c.NextID(ctx); err != nil { // connect and learn the mode outside the timing
		b.Fatal(err)
	}
	return c
}

// BenchmarkNextID: the buffered client, one goroutine.
func BenchmarkNextID(b *testing.B) {
	c := client(b, kubeflake.Settings{})
	ctx := context.Background()
	timed(b, func() error { _, err := c.NextID(ctx); return err })
}

// BenchmarkOneRequestPerID: the same client without a buffer, one GET /id per ID over a
// kept-alive connection on the Unix socket.
func BenchmarkOneRequestPerID(b *testing.B) {
	c := client(b, kubeflake.Settings{NoPrefetch: true})
	ctx := context.Background()
	timed(b, func() error { _, err := c.NextID(ctx); return err })
}

// BenchmarkSonyflake: sonyflake v1's NextID, in process (its layout allows 256 IDs per
// 10 ms per instance, so it sleeps past that).
func BenchmarkSonyflake(b *testing.B) {
	sf, err := sonyflake.New(sonyflake.Settings{MachineID: func() (uint16, error) { return 1, nil }})
	if err != nil {
		b.Fatal(err)
	}
	timed(b, func() error { _, err := sf.NextID(); return err })
}
