// Command conformance-driver is the Go client's driver for the shared conformance suite:
// one JSON command a line on stdin, one JSON answer a line on stdout (the protocol:
// clients/conformance/README.md in the repository).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	kubeflake "github.com/kubeflake/kubeflake/clients/go"
)

type command struct {
	Op       string         `json:"op"`
	Settings map[string]any `json:"settings"`
	ID       string         `json:"id"`
	After    string         `json:"after"`
	Workers  int            `json:"workers"`
	Count    int            `json:"count"`
	Out      string         `json:"out"`
	Tick     int64          `json:"tick"`
	DC       int64          `json:"datacenter"`
	Worker   int64          `json:"worker"`
	Sequence int64          `json:"sequence"`
}

type driver struct {
	client *kubeflake.Client
}

func ms(v any) time.Duration { return time.Duration(v.(float64) * float64(time.Millisecond)) }

func settings(doc map[string]any) kubeflake.Settings {
	var s kubeflake.Settings
	for k, v := range doc {
		switch k {
		case "max_wait_ms":
			s.MaxWait = ms(v)
		case "request_timeout_ms":
			s.RequestTimeout = ms(v)
		case "max_age_ms":
			s.MaxAge = ms(v)
		case "min_batch":
			s.MinBatch = int(v.(float64))
		case "max_batch":
			s.MaxBatch = int(v.(float64))
		case "prefetch":
			s.NoPrefetch = !v.(bool)
		}
	}
	return s
}

func errorDoc(err error) map[string]any {
	var e *kubeflake.Error
	if !errors.As(err, &e) {
		return map[string]any{"kind": "internal", "message": err.Error()}
	}
	doc := map[string]any{"kind": string(e.Kind), "message": e.Error()}
	if e.Status != 0 {
		doc["status"] = e.Status
		doc["reason"] = e.Reason
		doc["retry_after_ms"] = e.RetryAfter.Milliseconds()
	}
	return doc
}

func (d *driver) handle(ctx context.Context, c command) (map[string]any, error) {
	switch c.Op {
	case "open":
		client, err := kubeflake.New(settings(c.Settings))
		if err != nil {
			return nil, err
		}
		d.client = client
		return map[string]any{"transport": client.Transport()}, nil
	case "next":
		id, err := d.client.NextID(ctx)
		return map[string]any{"id": strconv.FormatInt(id, 10)}, err
	case "next_after":
		after, err := strconv.ParseInt(c.After, 10, 64)
		if err != nil {
			return nil, err
		}
		id, err := d.client.NextIDAfter(ctx, after)
		return map[string]any{"id": strconv.FormatInt(id, 10)}, err
	case "decode":
		id, err := strconv.ParseInt(c.ID, 10, 64)
		if err != nil {
			return nil, err
		}
		p, err := d.client.Decompose(ctx, id)
		if err != nil {
			return nil, err
		}
		return map[string]any{"fields": map[string]any{"tick": p.Tick, "datacenter": p.Datacenter, "worker": p.Worker,
			"sequence": p.Sequence, "time_ms": p.Time.UnixMilli()}}, nil
	case "compose":
		layout, err := d.client.Layout(ctx)
		if err != nil {
			return nil, err
		}
		if layout == nil {
			return nil, fmt.Errorf("no local layout (segment mode or a key form)")
		}
		id, err := layout.Compose(c.Tick, c.DC, c.Worker, c.Sequence)
		return map[string]any{"id": strconv.FormatInt(id, 10)}, err
	case "stats":
		s := d.client.Stats()
		errs := map[string]uint64{}
		for k, v := range s.Errors {
			errs[string(k)] = v
		}
		return map[string]any{"stats": map[string]any{"ids": s.IDs, "buffer_depth": s.BufferDepth, "refills": s.Refills,
			"waits": s.Waits, "expired": s.Expired, "direct": s.Direct, "refill_errors": s.RefillErrors,
			"batch_size": s.BatchSize, "errors": errs}}, nil
	case "run":
		return d.run(ctx, c.Workers, c.Count, c.Out)
	case "close":
		if d.client != nil {
			return map[string]any{}, d.client.Close()
		}
		return map[string]any{}, nil
	}
	return nil, fmt.Errorf("unknown op %q", c.Op)
}

func (d *driver) run(ctx context.Context, workers, count int, out string) (map[string]any, error) {
	var mu sync.Mutex
	left := count
	taken := make([][]int64, workers)
	errs := map[string]int{}
	var wg sync.WaitGroup
	started := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if left <= 0 {
					mu.Unlock()
					return
				}
				left--
				mu.Unlock()
				id, err := d.client.NextID(ctx)
				if err != nil {
					mu.Lock()
					errs[errorDoc(err)["kind"].(string)]++
					mu.Unlock()
					return
				}
				taken[w] = append(taken[w], id)
			}
		}()
	}
	wg.Wait()
	seconds := time.Since(started).Seconds()
	f, err := os.Create(out)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriter(f)
	total := 0
	for n, ids := range taken {
		total += len(ids)
		for _, id := range ids {
			fmt.Fprintf(w, "%d %d\n", n, id)
		}
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return map[string]any{"count": total, "errors": errs, "seconds": seconds}, nil
}

func main() {
	d := &driver{}
	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		if len(in.Bytes()) == 0 {
			continue
		}
		var c command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			fmt.Fprintln(os.Stderr, "conformance-driver: not a command:", err)
			os.Exit(2)
		}
		result, err := d.handle(context.Background(), c)
		answer := map[string]any{"ok": err == nil}
		if err != nil {
			answer["error"] = errorDoc(err)
		} else {
			for k, v := range result {
				answer[k] = v
			}
		}
		if err := out.Encode(answer); err != nil {
			os.Exit(1)
		}
		if c.Op == "close" {
			return
		}
	}
}
