// Package kubeflake takes IDs from the kubeflake sidecar in the pod, from a prefetch
// buffer, so that NextID is a memory read in a steady state. The behaviour is the one
// every kubeflake client shares: clients/SPEC.md in the repository.
//
//	ids, err := kubeflake.New(kubeflake.Settings{}) // KUBEFLAKE_SOCKET, else KUBEFLAKE_URL
//	id, err := ids.NextID(ctx)
//
// A sonyflake user will recognise NextID and Decompose; unlike sonyflake's, the worker
// slot and the clock's safety are the sidecar's (no machine ID to choose).
package kubeflake

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// batch is IDs from one refill: a list from /ids, or, in segment mode, the range
// [first, first+n) from /range (clients/SPEC.md, "Ranges in segment mode"), whose values
// are computed, never stored.
type batch struct {
	fetchedAt time.Time // when the request that got it was sent
	ids       []int64
	first     int64
	n         int
}

func (b *batch) len() int {
	if b.ids != nil {
		return len(b.ids)
	}
	return b.n
}

func (b *batch) at(i int) int64 {
	if b.ids != nil {
		return b.ids[i]
	}
	return b.first + int64(i)
}

// cursor is the batch NextID takes IDs from without the lock: each caller claims the next
// index with one atomic add, so two callers never get the same index and a segment batch
// leaves in the order of its claims. Only the holder of c.mu replaces the head cursor.
type cursor struct {
	batch
	taken   atomic.Int64 // indexes claimed so far; past len() once used up
	expires time.Time    // Snowflake with MaxAge: no claim after this; zero: none
}

// usedUp is what taken is swapped to when the slow path drops a cursor's rest.
const usedUp = int64(1) << 62

// Client hands out IDs; safe for concurrent use. Close it when done.
type Client struct {
	settings Settings
	endpoint endpoint
	http     *transport

	// NextID's fast path reads head, depth, low and handed without the lock; c.mu guards
	// the rest, and only its holder replaces head.
	head        atomic.Pointer[cursor]
	depth       atomic.Int64  // IDs in the buffer: the head's unclaimed ones and the queue's
	low         atomic.Int64  // refill when depth is at or below it
	handed      atomic.Uint64 // IDs handed out from the buffer (Stats.IDs)
	mu          sync.Mutex
	queue       []batch
	batchSize   int
	maxBatch    int
	maxRange    int       // the ceiling of a /range refill (segment mode)
	pace        pace      // refill times and the rate, for the low-water mark (Client.mark)
	emptySince  time.Time // a caller found the buffer empty since the last arrival; zero: not
	refillErr   *Error
	retryAt     time.Time
	lastRefill  time.Time
	filled      chan struct{} // closed and replaced after every refill attempt
	mode        string
	noRanges    bool                   // the sidecar answered 404 to /range (0.1.0): refills ask /ids
	knownMode   atomic.Pointer[string] // mode once read: NextID takes no lock for it
	layout      *Layout
	layoutRead  bool
	stats       Stats
	closed      bool
	want        chan struct{}
	done        chan struct{}
	refillerRun sync.Once
	stopped     chan struct{}
}

// Stats are a client's counters, named as in clients/SPEC.md, "Observability".
type Stats struct {
	IDs          uint64        // IDs handed out from the buffer
	BufferDepth  int           // IDs in the buffer now
	BatchSize    int           // the next refill's size
	Refills      uint64        // successful refills
	RefillTime   time.Duration // their total duration
	RefillErrors uint64        // failed refills
	Waits        uint64        // NextID calls that found the buffer empty and waited
	WaitTime     time.Duration // the time they waited
	Expired      uint64        // buffered IDs dropped as older than MaxAge
	Direct       uint64        // requests that bypass the buffer
	Errors       map[Kind]uint64
}

// New makes a client; it does not contact the sidecar until asked for an ID.
func New(s Settings) (*Client, error) {
	s, err := s.withDefaults()
	if err != nil {
		return nil, err
	}
	ep, err := resolveEndpoint(s)
	if err != nil {
		return nil, err
	}
	c := &Client{
		settings:  s,
		endpoint:  ep,
		http:      newTransport(ep, s),
		batchSize: s.MinBatch,
		maxBatch:  s.MaxBatch,
		maxRange:  s.MaxRange,
		filled:    make(chan struct{}),
		want:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		stopped:   make(chan struct{}),
		stats:     Stats{Errors: map[Kind]uint64{}},
	}
	c.stats.BatchSize = c.batchSize
	c.low.Store(int64(lowWater(s.MinBatch)))
	return c, nil
}

// Transport says how the client reaches the sidecar: "unix" or "tcp".
func (c *Client) Transport() string { return c.endpoint.transport() }

// NextID returns the next ID: from the buffer, or from the sidecar directly for a strict
// sequence or with NoPrefetch. It waits at most MaxWait (and no longer than ctx allows);
// errors are *Error, matched with errors.Is(err, kubeflake.ErrNoSidecar) and the like.
func (c *Client) NextID(ctx context.Context) (int64, error) {
	if c.settings.NoPrefetch {
		return c.direct(ctx, "/id")
	}
	mode, err := c.Mode(ctx)
	if err != nil {
		c.count(err)
		return 0, err
	}
	if mode == "strict" {
		return c.direct(ctx, "/id")
	}
	// The steady state: one atomic add on the head batch, no lock.
	if id, ok := c.fromHead(); ok {
		return id, nil
	}
	var started time.Time
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		c.mu.Lock()
		if c.advance() {
			c.mu.Unlock()
			if id, ok := c.fromHead(); ok {
				if !started.IsZero() {
					c.mu.Lock()
					c.stats.WaitTime += time.Since(started)
					c.mu.Unlock()
				}
				return id, nil
			}
			continue // other callers took the rest first
		}
		if c.closed {
			c.mu.Unlock()
			return 0, &Error{Kind: KindProtocol, Message: "the client is closed"}
		}
		now := time.Now()
		if started.IsZero() {
			started = now
			c.stats.Waits++
			// The mark was too low for the refills' spread: a safe distance further ahead.
			c.pace.waited()
			c.low.Store(int64(c.mark()))
			if c.emptySince.IsZero() {
				c.emptySince = now
			}
		}
		c.askRefill()
		refillErr, retryAt, filled := c.refillErr, c.retryAt, c.filled
		deadline := started.Add(c.settings.MaxWait)
		if refillErr != nil && (!refillErr.Retryable() || retryAt.After(deadline)) || !now.Before(deadline) {
			// Waiting cannot help, the sidecar asked to wait past the bound, or the bound is over.
			c.stats.WaitTime += now.Sub(started)
			err := error(refillErr)
			if refillErr == nil {
				err = &Error{Kind: KindNoSidecar, Message: fmt.Sprintf("no ID from the kubeflake sidecar at %s within %s (MaxWait)", c.endpoint, c.settings.MaxWait)}
			}
			c.countLocked(err)
			c.mu.Unlock()
			return 0, err
		}
		c.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(deadline.Sub(now))
		}
		select {
		case <-filled:
		case <-timer.C:
			timer = time.NewTimer(0) // the next pass sees the bound is over
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// fromHead claims the next ID of the head batch without the lock: false when there is no
// head, it is used up, or its IDs are older than MaxAge (the slow path then moves on).
func (c *Client) fromHead() (int64, bool) {
	h := c.head.Load()
	if h == nil || !h.expires.IsZero() && time.Now().After(h.expires) {
		return 0, false
	}
	i := h.taken.Add(1) - 1
	if i >= int64(h.len()) {
		return 0, false
	}
	id := h.at(int(i))
	c.handed.Add(1)
	if c.depth.Add(-1) <= c.low.Load() {
		c.askRefill()
	}
	return id, true
}

// advance makes the head a batch with IDs left, taking the queue's next batch when the
// head is used up or older than MaxAge (its rest dropped and counted as expired); false
// when the buffer has no ID. c.mu is held.
func (c *Client) advance() bool {
	for {
		h := c.head.Load()
		if h != nil {
			expired := !h.expires.IsZero() && time.Now().After(h.expires)
			if !expired && h.taken.Load() < int64(h.len()) {
				return true
			}
			if expired {
				// Claims made before the swap are counted by their callers; none after.
				if left := int64(h.len()) - min(h.taken.Swap(usedUp), int64(h.len())); left > 0 {
					c.stats.Expired += uint64(left)
					c.depth.Add(-left)
				}
			}
		}
		if len(c.queue) == 0 {
			return false
		}
		next := &cursor{batch: c.queue[0]}
		c.queue[0] = batch{}
		c.queue = c.queue[1:]
		if c.mode == "snowflake" && c.settings.MaxAge > 0 {
			next.expires = next.fetchedAt.Add(c.settings.MaxAge)
		}
		c.head.Store(next)
	}
}

// askRefill wakes the refiller (starting it the first time); safe without c.mu.
func (c *Client) askRefill() {
	c.refillerRun.Do(func() { go c.refill() })
	select {
	case c.want <- struct{}{}:
	default:
	}
}

// refill is the one goroutine that fills the buffer, one request at a time, appending
// batches in the order fetched (so segment values leave the buffer in order).
func (c *Client) refill() {
	defer close(c.stopped)
	var delay time.Duration
	for {
		select {
		case <-c.done:
			return
		case <-c.want:
		}
		if c.depth.Load() > c.low.Load() { // asked while the last refill was out
			continue
		}
		for {
			select {
			case <-c.done:
				return
			default:
			}
			c.mu.Lock()
			askRange := c.mode == "segment" && !c.noRanges
			size := min(c.batchSize, c.ceiling())
			c.mu.Unlock()
			sent := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), c.settings.RequestTimeout)
			got := batch{fetchedAt: sent}
			var err error
			if askRange {
				got.first, got.n, err = c.http.rangeOf(ctx, size)
			} else {
				got.ids, err = c.http.ids(ctx, size, "")
			}
			cancel()
			c.mu.Lock()
			if err == errNoRange {
				c.noRanges = true // a 0.1.0 sidecar: /ids from now on
				c.mu.Unlock()
				continue
			}
			if err != nil {
				e, _ := asError(err)
				if e.Kind == KindBadRequest && size > 1 {
					// A sidecar with a smaller --max-batch (--max-range): ask for fewer.
					if askRange {
						c.maxRange = size / 2
					} else {
						c.maxBatch = size / 2
					}
					c.batchSize = min(c.batchSize, c.ceiling())
					c.mu.Unlock()
					continue
				}
				c.refillErr = e
				c.stats.RefillErrors++
				wait := e.RetryAfter
				if wait == 0 {
					delay = backoff(delay)
					wait = delay
				}
				c.retryAt = time.Now().Add(wait)
				c.broadcast()
				c.mu.Unlock()
				if !e.Retryable() {
					break
				}
				select { // wait as asked; NextID calls do not cut it short
				case <-c.done:
					return
				case <-time.After(wait):
				}
				continue
			}
			done := time.Now()
			delay = 0
			c.queue = append(c.queue, got)
			c.depth.Add(int64(got.len()))
			c.stats.Refills++
			c.stats.RefillTime += done.Sub(sent)
			c.batchSize = nextBatchSize(c.batchSize, done.Sub(c.lastRefill), !c.lastRefill.IsZero(), c.settings, c.ceiling())
			c.stats.BatchSize = c.batchSize
			c.lastRefill = done
			c.refillErr = nil
			var empty time.Duration
			if !c.emptySince.IsZero() {
				empty = done.Sub(c.emptySince)
				c.emptySince = time.Time{}
			}
			c.pace.arrived(done, done.Sub(sent), c.handed.Load(), empty)
			if c.mode == "segment" {
				// A range costs the same whatever its length: reach one refill period at the
				// rate at once, instead of doubling from MinBatch.
				perPeriod := math.Ceil(c.pace.rate * c.settings.RefillPeriod.Seconds())
				c.batchSize = min(max(c.batchSize, int(math.Min(perPeriod, float64(c.ceiling())))), c.ceiling())
				c.stats.BatchSize = c.batchSize
			}
			low := c.mark()
			c.low.Store(int64(low))
			wantMore := c.depth.Load() <= int64(low)
			c.broadcast()
			c.mu.Unlock()
			if !wantMore {
				break
			}
		}
	}
}

// ceiling is the largest refill: MaxRange for a /range refill, else MaxBatch; c.mu is held.
func (c *Client) ceiling() int {
	if c.mode == "segment" && !c.noRanges {
		return c.maxRange
	}
	return c.maxBatch
}

// broadcast wakes every waiting NextID; c.mu is held.
func (c *Client) broadcast() {
	close(c.filled)
	c.filled = make(chan struct{})
}

func (c *Client) direct(ctx context.Context, path string) (int64, error) {
	c.mu.Lock()
	c.stats.Direct++
	c.mu.Unlock()
	var ids []int64
	err := c.retrying(ctx, path, func(ctx context.Context) error {
		var err error
		ids, err = c.http.getIDs(ctx, path)
		return err
	})
	if err != nil {
		c.count(err)
		return 0, err
	}
	return ids[0], nil
}

// NextIDAfter returns an ID greater than after, whichever pod issued after (docs/api.md,
// `after`). Never from the buffer: a buffered ID may be below after.
func (c *Client) NextIDAfter(ctx context.Context, after int64) (int64, error) {
	if after < 0 {
		return 0, &Error{Kind: KindBadRequest, Message: fmt.Sprintf("after must be an ID (>= 0), got %d", after)}
	}
	return c.direct(ctx, fmt.Sprintf("/id?after=%d", after))
}

// NextIDs returns count IDs in increasing order in one request, not from the buffer.
func (c *Client) NextIDs(ctx context.Context, count int) ([]int64, error) {
	var ids []int64
	err := c.retrying(ctx, fmt.Sprintf("/ids?count=%d", count), func(ctx context.Context) error {
		var err error
		ids, err = c.http.ids(ctx, count, "")
		return err
	})
	return ids, err
}

// retrying runs one request until it succeeds, fails for good, or MaxWait is over; it
// waits Retry-After between refusals, and returns at once when that wait would pass
// the bound.
func (c *Client) retrying(ctx context.Context, path string, do func(context.Context) error) error {
	deadline := time.Now().Add(c.settings.MaxWait)
	var delay time.Duration
	for {
		timeout := min(c.settings.RequestTimeout, time.Until(deadline))
		if timeout < time.Millisecond {
			timeout = time.Millisecond
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		err := do(rctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		e, ok := asError(err)
		if !ok || !e.Retryable() {
			return err
		}
		wait := e.RetryAfter
		if wait == 0 {
			delay = backoff(delay)
			wait = delay
		}
		if time.Now().Add(wait).After(deadline) {
			return err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Mode returns "snowflake", "segment" or "strict", read once from the sidecar's /readyz.
func (c *Client) Mode(ctx context.Context) (string, error) {
	if known := c.knownMode.Load(); known != nil {
		return *known, nil
	}
	deadline := time.Now().Add(c.settings.MaxWait)
	var delay time.Duration
	for {
		rctx, cancel := context.WithTimeout(ctx, c.settings.RequestTimeout)
		mode, err := c.http.mode(rctx)
		cancel()
		if err == nil {
			c.mu.Lock()
			c.mode = mode
			c.mu.Unlock()
			c.knownMode.Store(&mode)
			return mode, nil
		}
		e, ok := asError(err)
		if !ok || !e.Retryable() {
			return "", err
		}
		delay = backoff(delay)
		wait := delay
		if e.RetryAfter > 0 {
			wait = e.RetryAfter
		}
		if time.Now().Add(wait).After(deadline) {
			return "", err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// Stats returns a copy of the client's counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.IDs = c.handed.Load()
	s.BufferDepth = int(c.depth.Load())
	s.Errors = make(map[Kind]uint64, len(c.stats.Errors))
	for k, v := range c.stats.Errors {
		s.Errors[k] = v
	}
	return s
}

func (c *Client) count(err error) {
	c.mu.Lock()
	c.countLocked(err)
	c.mu.Unlock()
}

func (c *Client) countLocked(err error) {
	if e, ok := asError(err); ok {
		c.stats.Errors[e.Kind]++
	}
}

// Close stops the refiller; buffered IDs are dropped (gaps, never reused).
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	started := false
	c.refillerRun.Do(func() { close(c.stopped) }) // no refiller ever ran
	select {
	case <-c.stopped:
	default:
		started = true
	}
	close(c.done)
	c.broadcast()
	c.mu.Unlock()
	if started {
		<-c.stopped
	}
	c.http.close()
	return nil
}
