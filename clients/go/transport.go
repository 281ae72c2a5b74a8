package kubeflake

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"
)

// transport is kept-alive HTTP/1.1 to the sidecar over TCP or a Unix socket.
type transport struct {
	endpoint endpoint
	base     string
	client   *http.Client
}

func newTransport(ep endpoint, s Settings) *transport {
	dialer := &net.Dialer{Timeout: s.RequestTimeout, KeepAlive: 30 * time.Second}
	rt := &http.Transport{
		MaxIdleConns:        16,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		Proxy:               nil, // loopback only: never through an HTTP proxy
		DialContext:         dialer.DialContext,
	}
	base := "http://" + ep.host
	if ep.socket != "" {
		socket := ep.socket
		rt.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", socket)
		}
		base = "http://kubeflake"
	}
	return &transport{endpoint: ep, base: base, client: &http.Client{Transport: rt}}
}

// get does one GET and returns the body of a 200; any other answer is a typed *Error.
func (t *transport) get(ctx context.Context, path string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.base+path, nil)
	if err != nil {
		return nil, 0, &Error{Kind: KindProtocol, Message: "building the request for " + path, Err: err}
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := t.client.Do(req)
	if err != nil {
		if ctx.Err() != nil && ctx.Err() != context.DeadlineExceeded {
			return nil, 0, ctx.Err()
		}
		return nil, 0, &Error{Kind: KindNoSidecar, Err: err, Message: fmt.Sprintf(
			"no kubeflake sidecar answered at %s; check KUBEFLAKE_SOCKET / KUBEFLAKE_URL and that the sidecar runs", t.endpoint)}
	}
	defer resp.Body.Close()
	body, err := readBody(resp)
	if err != nil {
		return nil, 0, &Error{Kind: KindNoSidecar, Err: err, Message: fmt.Sprintf("the answer of the sidecar at %s to %s broke off", t.endpoint, path)}
	}
	if resp.StatusCode != http.StatusOK {
		return body, resp.StatusCode, errorFromResponse(resp.StatusCode, body, resp.Header.Get("Retry-After"), path)
	}
	return body, resp.StatusCode, nil
}

// readBody reads a whole answer; into one allocation of the announced length when there is
// one (a batch of 10,000 IDs is about 190 KB: io.ReadAll would grow and copy it ten times).
func readBody(resp *http.Response) ([]byte, error) {
	n := resp.ContentLength
	if n < 0 || n > 64<<20 {
		return io.ReadAll(resp.Body)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(resp.Body, body); err != nil {
		return nil, err
	}
	return body, nil
}

func (t *transport) getIDs(ctx context.Context, path string) ([]int64, error) {
	body, _, err := t.get(ctx, path)
	if err != nil {
		return nil, err
	}
	return parseIDs(body, path)
}

func (t *transport) ids(ctx context.Context, count int, after string) ([]int64, error) {
	path := "/ids?count=" + strconv.Itoa(count)
	if after != "" {
		path += "&after=" + after
	}
	return t.getIDs(ctx, path)
}

// parseIDs reads decimal IDs, one per line; the whole answer or an error (never a part).
// It is on the refill's path (a batch is up to 10,000 IDs of 19 digits), so it reads
// eight digits at a time (parseDecimal).
func parseIDs(body []byte, path string) ([]int64, error) {
	ids := make([]int64, 0, bytes.Count(body, []byte{'\n'})+1)
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		if len(line) == 0 {
			continue
		}
		v, ok := parseDecimal(line)
		if !ok {
			return nil, &Error{Kind: KindProtocol, Message: fmt.Sprintf("%s: the answer is not decimal IDs below 2^63, one per line", path)}
		}
		ids = append(ids, v)
	}
	if len(ids) == 0 {
		return nil, &Error{Kind: KindProtocol, Message: path + ": the answer holds no ID"}
	}
	return ids, nil
}

// parseDecimal reads 1 to 19 ASCII digits (no sign) as a value below 2^63. 19 digits fit
// a uint64 without overflow; the leading len%8 digits go one at a time, then eight at a
// time in one 64-bit word: a check that all eight bytes are '0'..'9', and three
// multiply-and-shift steps that join digit pairs, then pairs of pairs, then the halves.
func parseDecimal(s []byte) (int64, bool) {
	if len(s) == 0 || len(s) > 19 {
		return 0, false
	}
	var v uint64
	head := len(s) % 8
	for _, ch := range s[:head] {
		d := ch - '0'
		if d > 9 {
			return 0, false
		}
		v = v*10 + uint64(d)
	}
	for s = s[head:]; len(s) >= 8; s = s[8:] {
		x := binary.LittleEndian.Uint64(s) // the first digit in the lowest byte
		if x&0xF0F0F0F0F0F0F0F0|(x+0x0606060606060606)&0xF0F0F0F0F0F0F0F0>>4 != 0x3333333333333333 {
			return 0, false
		}
		x -= 0x3030303030303030
		x = (x*10 + x>>8) & 0x00FF00FF00FF00FF
		x = (x*100 + x>>16) & 0x0000FFFF0000FFFF
		x = (x*10000 + x>>32) & 0xFFFFFFFF
		v = v*100000000 + x
	}
	if v > math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}

// errNoRange is rangeOf's answer from a sidecar without /range (0.1.0, a 404).
var errNoRange = &Error{Kind: KindProtocol, Message: "the sidecar has no /range (0.1.0); ask /ids"}

// rangeOf asks /range?count=N (segment mode) and returns the first value and how many
// follow it (1 to count, consecutive); errNoRange on a 404.
func (t *transport) rangeOf(ctx context.Context, count int) (int64, int, error) {
	path := "/range?count=" + strconv.Itoa(count)
	body, status, err := t.get(ctx, path)
	if status == http.StatusNotFound {
		return 0, 0, errNoRange
	}
	if err != nil {
		return 0, 0, err
	}
	return parseRange(body, count, path)
}

// parseRange reads {"first":"F","count":n}: F decimal below 2^63, 1 <= n <= count, and
// F+n-1 below 2^63.
func parseRange(body []byte, count int, path string) (int64, int, error) {
	var doc struct {
		First *string `json:"first"`
		Count *int64  `json:"count"`
	}
	bad := &Error{Kind: KindProtocol, Message: fmt.Sprintf(
		"%s: the answer is not {\"first\":\"F\",\"count\":n} with F below 2^63 and n from 1 to %d: %.200s", path, count, body)}
	if json.Unmarshal(body, &doc) != nil || doc.First == nil || doc.Count == nil {
		return 0, 0, bad
	}
	first, ok := parseDecimal([]byte(*doc.First))
	n := *doc.Count
	if !ok || n < 1 || n > int64(count) || first > math.MaxInt64-(n-1) {
		return 0, 0, bad
	}
	return first, int(n), nil
}

// mode reads /readyz: "snowflake", "segment" or "strict"; a slot_lost error while the
// sidecar cannot tell (it waits for a slot, or a segment sidecar is not ready).
func (t *transport) mode(ctx context.Context) (string, error) {
	body, status, err := t.get(ctx, "/readyz")
	if err != nil && status != http.StatusServiceUnavailable {
		return "", err
	}
	var doc struct {
		Phase  string `json:"phase"`
		Strict *bool  `json:"strict"`
		Reason string `json:"reason"`
		Error  string `json:"error"`
	}
	if json.Unmarshal(body, &doc) != nil {
		return "", &Error{Kind: KindProtocol, Message: "/readyz: the answer is not JSON"}
	}
	switch {
	case doc.Phase == "snowflake":
		return "snowflake", nil
	case doc.Phase == "segment" && doc.Strict != nil && *doc.Strict:
		return "strict", nil
	case doc.Phase == "segment" && doc.Strict != nil:
		return "segment", nil
	}
	// It answers but cannot issue yet: in a pod, it waits for a worker slot.
	e := &Error{Kind: KindSlotLost, Status: status, Reason: doc.Reason, Message: fmt.Sprintf(
		"the kubeflake sidecar at %s cannot issue yet: %s (it waits for a worker slot; see the pod's Events)", t.endpoint, doc.Error)}
	if err != nil {
		if prev, ok := asError(err); ok {
			e.RetryAfter = prev.RetryAfter
		}
	}
	if e.Reason == "" {
		e.Reason = "no_slot"
	}
	return "", e
}

func (t *transport) decode(ctx context.Context, id int64) (map[string]any, error) {
	body, _, err := t.get(ctx, "/decode/"+strconv.FormatInt(id, 10))
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if d.Decode(&doc) != nil {
		return nil, &Error{Kind: KindProtocol, Message: "/decode: the answer is not a JSON object"}
	}
	return doc, nil
}

func (t *transport) close() { t.client.CloseIdleConnections() }
