package kubeflake

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Kind names what went wrong; the same names in every kubeflake client (clients/SPEC.md).
type Kind string

const (
	KindBadRequest  Kind = "bad_request"  // 400: the request is wrong; the message says what to fix
	KindRefused     Kind = "refused"      // 503 or 409: not now, for a reason below or another
	KindClockBehind Kind = "clock_behind" // the sidecar's clock is behind what it must issue; clears by itself
	KindSlotLost    Kind = "slot_lost"    // the sidecar holds no worker slot (waiting, lost, stopping)
	KindExhausted   Kind = "exhausted"    // the sequence can issue no more: waiting does not help
	KindNoSidecar   Kind = "no_sidecar"   // nothing answered within the wait bound
	KindProtocol    Kind = "protocol"     // an answer the sidecar's API does not promise
)

// Sentinels for errors.Is: errors.Is(err, kubeflake.ErrClockBehind). ErrRefused matches
// every refusal (clock behind, slot lost, exhausted and the others).
var (
	ErrBadRequest  = &Error{Kind: KindBadRequest}
	ErrRefused     = &Error{Kind: KindRefused}
	ErrClockBehind = &Error{Kind: KindClockBehind}
	ErrSlotLost    = &Error{Kind: KindSlotLost}
	ErrExhausted   = &Error{Kind: KindExhausted}
	ErrNoSidecar   = &Error{Kind: KindNoSidecar}
	ErrProtocol    = &Error{Kind: KindProtocol}
)

// Error is every error a Client returns, but a context's own.
type Error struct {
	Kind       Kind
	Status     int           // the HTTP status, 0 when none came
	Reason     string        // the sidecar's reason for a refusal (docs/openapi.yaml)
	RetryAfter time.Duration // the sidecar's Retry-After, 0 when it sent none
	Message    string
	Err        error // the transport's error, for no_sidecar
}

func (e *Error) Error() string {
	msg := e.Message
	if e.Reason != "" {
		msg += " (reason " + e.Reason + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return "kubeflake: " + msg
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches the sentinel of the same kind; ErrRefused matches every refusal.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || t.Message != "" || t.Status != 0 {
		return false
	}
	if t.Kind == KindRefused {
		return e.refusal()
	}
	return t.Kind == e.Kind
}

func (e *Error) refusal() bool {
	switch e.Kind {
	case KindRefused, KindClockBehind, KindSlotLost, KindExhausted:
		return true
	}
	return false
}

// Retryable says whether asking again later may succeed with nothing changed by the caller.
func (e *Error) Retryable() bool {
	return e.Kind == KindNoSidecar || (e.refusal() && e.Kind != KindExhausted)
}

func kindOfReason(reason string) Kind {
	switch reason {
	case "ahead_of_clock", "clock_before_epoch", "after_ahead_of_clock":
		return KindClockBehind
	case "no_slot", "stopped", "stopping":
		return KindSlotLost
	case "timestamp_exhausted", "exhausted", "after_above_counter":
		return KindExhausted
	}
	return KindRefused
}

// errorFromResponse types a non-200 answer to path.
func errorFromResponse(status int, body []byte, retryAfter string, path string) *Error {
	var doc struct {
		Error  string `json:"error"`
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(body, &doc)
	msg := doc.Error
	if msg == "" {
		msg = strings.TrimSpace(string(body))
	}
	if msg == "" {
		msg = fmt.Sprintf("HTTP %d", status)
	}
	e := &Error{Status: status, Reason: doc.Reason, Message: path + ": " + msg}
	switch status {
	case 400:
		e.Kind = KindBadRequest
	case 409, 503:
		e.Kind = kindOfReason(doc.Reason)
		if secs, err := strconv.ParseFloat(strings.TrimSpace(retryAfter), 64); err == nil && secs >= 0 {
			e.RetryAfter = time.Duration(secs * float64(time.Second))
		}
	default:
		e.Kind = KindProtocol
		e.Message = fmt.Sprintf("%s: unexpected HTTP %d: %s", path, status, msg)
	}
	return e
}

func asError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
