package kubeflake

import (
	"fmt"
	"net/url"
	"os"
	"time"
)

// DefaultURL is where a sidecar listens when neither KUBEFLAKE_SOCKET nor KUBEFLAKE_URL is set.
const DefaultURL = "http://127.0.0.1:7070"

// Settings configures a Client; the zero value is the defaults of clients/SPEC.md.
type Settings struct {
	// URL and Socket override KUBEFLAKE_URL and KUBEFLAKE_SOCKET. A socket, when chosen,
	// is the only transport: no fallback to TCP.
	URL    string
	Socket string
	// NoPrefetch makes every NextID one request.
	NoPrefetch bool
	// MaxAge is how long a buffered Snowflake ID may wait (default 1 s); negative: forever.
	MaxAge time.Duration
	// MaxWait bounds one call, retries and waits included (default 5 s).
	MaxWait time.Duration
	// RequestTimeout bounds one HTTP exchange (default 2 s).
	RequestTimeout time.Duration
	// MinBatch and MaxBatch bound the refill size (defaults 64 and 10,000).
	MinBatch, MaxBatch int
	// MaxRange bounds a segment refill from /range instead of MaxBatch (default 1,000,000,
	// the sidecar's default --max-range): a range costs the same whatever its length.
	MaxRange int
	// RefillPeriod is what the batch size aims at: one refill per period (default 100 ms).
	RefillPeriod time.Duration
}

func (s Settings) withDefaults() (Settings, error) {
	if s.MaxAge == 0 {
		s.MaxAge = time.Second
	}
	if s.MaxWait == 0 {
		s.MaxWait = 5 * time.Second
	}
	if s.RequestTimeout == 0 {
		s.RequestTimeout = 2 * time.Second
	}
	if s.MinBatch == 0 {
		s.MinBatch = 64
	}
	if s.MaxBatch == 0 {
		s.MaxBatch = 10000
	}
	if s.MaxRange == 0 {
		s.MaxRange = 1_000_000
	}
	if s.RefillPeriod == 0 {
		s.RefillPeriod = 100 * time.Millisecond
	}
	if s.MinBatch < 1 || s.MinBatch > s.MaxBatch {
		return s, fmt.Errorf("kubeflake: need 1 <= MinBatch <= MaxBatch, got %d and %d", s.MinBatch, s.MaxBatch)
	}
	if s.MaxRange < s.MinBatch {
		return s, fmt.Errorf("kubeflake: need MinBatch <= MaxRange, got %d and %d", s.MinBatch, s.MaxRange)
	}
	if s.MaxWait < 0 || s.RequestTimeout < 0 {
		return s, fmt.Errorf("kubeflake: MaxWait and RequestTimeout must not be negative")
	}
	return s, nil
}

// endpoint is where the sidecar answers.
type endpoint struct {
	socket string // a Unix socket path, or ""
	host   string // host:port when socket is ""
}

func (e endpoint) String() string {
	if e.socket != "" {
		return "unix:" + e.socket
	}
	return "http://" + e.host
}

// Transport is "unix" or "tcp".
func (e endpoint) transport() string {
	if e.socket != "" {
		return "unix"
	}
	return "tcp"
}

// resolveEndpoint: explicit settings first, then KUBEFLAKE_SOCKET (set and not empty),
// then KUBEFLAKE_URL, then DefaultURL.
func resolveEndpoint(s Settings) (endpoint, error) {
	if s.Socket != "" {
		return endpoint{socket: s.Socket}, nil
	}
	raw := s.URL
	if raw == "" {
		if sock := os.Getenv("KUBEFLAKE_SOCKET"); sock != "" {
			return endpoint{socket: sock}, nil
		}
		raw = os.Getenv("KUBEFLAKE_URL")
	}
	if raw == "" {
		raw = DefaultURL
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return endpoint{}, fmt.Errorf("kubeflake: KUBEFLAKE_URL must look like %s, not %q (the sidecar speaks plain HTTP on loopback)", DefaultURL, raw)
	}
	host := u.Host
	if u.Port() == "" {
		host += ":80"
	}
	return endpoint{host: host}, nil
}

// nextBatchSize is Leaf's rule: double when the last batch lasted under half the refill
// period, halve when it lasted over four periods; within [MinBatch, max].
func nextBatchSize(current int, lasted time.Duration, known bool, s Settings, max int) int {
	size := current
	if known {
		if lasted < s.RefillPeriod/2 {
			size = current * 2
		} else if lasted > s.RefillPeriod*4 {
			size = current / 2
		}
	}
	if size > max {
		size = max
	}
	if size < s.MinBatch {
		size = s.MinBatch
	}
	if size > max {
		size = max
	}
	return size
}

// lowWater: refill when the buffer holds half a batch or less: the mark until the first
// refill arrives, and its floor after (Client.mark).
func lowWater(batch int) int { return batch / 2 }

// backoff: 50 ms doubling to 1 s, after a failure that named no Retry-After.
func backoff(previous time.Duration) time.Duration {
	if previous <= 0 {
		return 50 * time.Millisecond
	}
	if previous*2 > time.Second {
		return time.Second
	}
	return previous * 2
}
