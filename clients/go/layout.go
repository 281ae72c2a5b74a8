package kubeflake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"time"
)

// Layout is a sequence's bit layout, read once from the sidecar (Client.Layout).
type Layout struct {
	TotalBits                                               int // 63, or 53 (JavaScript-safe)
	TimestampBits, DatacenterBits, WorkerBits, SequenceBits int
	Epoch                                                   time.Time
	TimeUnit                                                time.Duration
}

// Parts are an ID's fields, as /decode gives them; sonyflake's Decompose in spirit.
type Parts struct {
	ID         int64
	Tick       int64
	Datacenter int64
	Worker     int64
	Sequence   int64
	Time       time.Time
}

func (l Layout) tickShift() int       { return l.SequenceBits + l.WorkerBits + l.DatacenterBits }
func (l Layout) datacenterShift() int { return l.SequenceBits + l.WorkerBits }

// Decompose splits an ID into its fields.
func (l Layout) Decompose(id int64) (Parts, error) {
	if id < 0 || (l.TotalBits < 63 && id >= 1<<l.TotalBits) {
		return Parts{}, fmt.Errorf("kubeflake: %d is not an ID of this layout: IDs are below 2^%d", id, l.TotalBits)
	}
	field := func(shift, width int) int64 { return (id >> shift) & (1<<width - 1) }
	tick := field(l.tickShift(), l.TimestampBits)
	return Parts{
		ID:         id,
		Tick:       tick,
		Datacenter: field(l.datacenterShift(), l.DatacenterBits),
		Worker:     field(l.SequenceBits, l.WorkerBits),
		Sequence:   field(0, l.SequenceBits),
		Time:       l.Epoch.Add(time.Duration(tick) * l.TimeUnit),
	}, nil
}

// Compose builds the ID with these fields; an error names a field too wide for its bits.
func (l Layout) Compose(tick, datacenter, worker, sequence int64) (int64, error) {
	for _, f := range []struct {
		name  string
		value int64
		width int
	}{{"tick", tick, l.TimestampBits}, {"datacenter", datacenter, l.DatacenterBits}, {"worker", worker, l.WorkerBits}, {"sequence", sequence, l.SequenceBits}} {
		if f.value < 0 || f.value >= 1<<f.width {
			return 0, fmt.Errorf("kubeflake: %s=%d does not fit the layout's %d bits", f.name, f.value, f.width)
		}
	}
	return tick<<l.tickShift() | datacenter<<l.datacenterShift() | worker<<l.SequenceBits | sequence, nil
}

// TickAt is the tick a time falls in: Compose(TickAt(t), 0, 0, 0) is the smallest ID of
// that tick, for range queries by time.
func (l Layout) TickAt(t time.Time) int64 {
	if t.Before(l.Epoch) {
		return 0
	}
	return int64(t.Sub(l.Epoch) / l.TimeUnit)
}

// decodeDoc is what /decode answers.
type decodeDoc struct {
	Tick, Datacenter, Worker, Sequence json.Number
	Time                               string
	Mode                               string
	Key, Shard                         json.RawMessage
}

func toDoc(m map[string]any) decodeDoc {
	raw, _ := json.Marshal(m)
	var d decodeDoc
	_ = json.Unmarshal(raw, &d)
	return d
}

// layoutFromDecodes reads a layout from /decode of 0, of the largest ID (each field at its
// maximum gives its width) and of the lowest tick bit (the time unit). nil for a layout
// with a key form (docs/layouts.md), whose fields are stored in other numbers.
func layoutFromDecodes(zero, largest decodeDoc, total int, oneTick decodeDoc) *Layout {
	if largest.Key != nil || largest.Shard != nil {
		return nil
	}
	var widths [4]int
	for i, n := range []json.Number{largest.Tick, largest.Datacenter, largest.Worker, largest.Sequence} {
		v, err := strconv.ParseUint(string(n), 10, 64)
		if err != nil || v&(v+1) != 0 { // not 2^k - 1: a rotated or reversed field
			return nil
		}
		widths[i] = bits.Len64(v)
	}
	if widths[0]+widths[1]+widths[2]+widths[3] != total {
		return nil
	}
	epoch, err1 := time.Parse(time.RFC3339Nano, zero.Time)
	next, err2 := time.Parse(time.RFC3339Nano, oneTick.Time)
	if err1 != nil || err2 != nil || string(oneTick.Tick) != "1" || !next.After(epoch) {
		return nil
	}
	return &Layout{TotalBits: total, TimestampBits: widths[0], DatacenterBits: widths[1], WorkerBits: widths[2],
		SequenceBits: widths[3], Epoch: epoch, TimeUnit: next.Sub(epoch)}
}

// Layout returns the sequence's layout, read once from the sidecar; nil (and no error)
// in segment mode and for layouts with a key form, whose IDs Decompose asks the sidecar
// about instead.
func (c *Client) Layout(ctx context.Context) (*Layout, error) {
	c.mu.Lock()
	if c.layoutRead {
		l := c.layout
		c.mu.Unlock()
		return l, nil
	}
	c.mu.Unlock()
	decode := func(id int64) (decodeDoc, error) {
		var doc map[string]any
		err := c.retrying(ctx, "/decode", func(ctx context.Context) error {
			var err error
			doc, err = c.http.decode(ctx, id)
			return err
		})
		return toDoc(doc), err
	}
	zero, err := decode(0)
	if err != nil {
		return nil, err
	}
	var layout *Layout
	if zero.Mode != "Segment" {
		for _, total := range []int{63, 53} {
			largest, err := decode(int64(1)<<total - 1)
			if errors.Is(err, ErrBadRequest) {
				continue
			}
			if err != nil {
				return nil, err
			}
			width, perr := strconv.ParseUint(string(largest.Tick), 10, 64)
			if perr != nil {
				break
			}
			oneTick, err := decode(int64(1) << (total - bits.Len64(width)))
			if err != nil {
				return nil, err
			}
			layout = layoutFromDecodes(zero, largest, total, oneTick)
			break
		}
	}
	c.mu.Lock()
	c.layout, c.layoutRead = layout, true
	c.mu.Unlock()
	return layout, nil
}

// Decompose splits an ID into its fields: locally from the layout, or by the sidecar's
// /decode for a layout with a key form. Segment values carry no fields: an error.
func (c *Client) Decompose(ctx context.Context, id int64) (Parts, error) {
	layout, err := c.Layout(ctx)
	if err != nil {
		return Parts{}, err
	}
	if layout != nil {
		return layout.Decompose(id)
	}
	var doc map[string]any
	err = c.retrying(ctx, "/decode", func(ctx context.Context) error {
		var err error
		doc, err = c.http.decode(ctx, id)
		return err
	})
	if err != nil {
		return Parts{}, err
	}
	d := toDoc(doc)
	if d.Mode == "Segment" {
		return Parts{}, fmt.Errorf("kubeflake: %d is a segment value: it carries no fields", id)
	}
	p := Parts{ID: id}
	p.Tick, _ = d.Tick.Int64()
	p.Datacenter, _ = d.Datacenter.Int64()
	p.Worker, _ = d.Worker.Int64()
	p.Sequence, _ = d.Sequence.Int64()
	p.Time, _ = time.Parse(time.RFC3339Nano, d.Time)
	return p, nil
}
