"""Typed errors: what went wrong, and whether waiting helps (clients/SPEC.md, "Errors")."""

from __future__ import annotations

import json

# The sidecar's `reason` values (docs/openapi.yaml, Error.reason), by the error they raise.
CLOCK_REASONS = frozenset({"ahead_of_clock", "clock_before_epoch", "after_ahead_of_clock"})
SLOT_REASONS = frozenset({"no_slot", "stopped", "stopping"})
EXHAUSTED_REASONS = frozenset({"timestamp_exhausted", "exhausted", "after_above_counter"})


class KubeflakeError(Exception):
    """Base of every error this package raises."""

    kind = "error"
    #: Whether asking again later may succeed with nothing changed by the caller.
    retryable = False


class BadRequest(KubeflakeError):
    """The sidecar answered 400: the request is wrong (an `after` not of this sequence,
    a count above the sidecar's --max-batch). The message says what to fix."""

    kind = "bad_request"


class NoSidecar(KubeflakeError):
    """No sidecar answered within the wait bound: nothing listens at the address, or it
    accepted and never answered. Check KUBEFLAKE_SOCKET / KUBEFLAKE_URL and that the pod
    is labelled with its IdSequence."""

    kind = "no_sidecar"
    retryable = True


class ProtocolError(KubeflakeError):
    """The answer was not what the sidecar's API promises (a proxy in the way, another
    server on the port)."""

    kind = "protocol"


class Refused(KubeflakeError):
    """The sidecar refused for now (503, or 409 for `after`). `reason` is the sidecar's;
    `retry_after` the seconds it asked to wait, or None."""

    kind = "refused"
    retryable = True

    def __init__(self, message: str, *, status: int, reason: str | None,
                 retry_after: float | None):
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


class ClockBehind(Refused):
    """The sidecar's clock is behind what it must issue next (it stepped back, demand
    outran the layout, the epoch is ahead, or an `after` lies ahead of the clock). Clears
    by itself once the clock has caught up."""

    kind = "clock_behind"


class SlotLost(Refused):
    """The sidecar holds no worker slot (waiting for one, lost it, or stopping). Clears
    when the operator gives it a slot or the pod's new sidecar starts."""

    kind = "slot_lost"


class Exhausted(Refused):
    """The sequence can issue no more (timestamp bits used up, segment counter at its end,
    or an `after` above the counter). Waiting does not help: create a new IdSequence."""

    kind = "exhausted"
    retryable = False


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header in its delay-seconds form; None if absent or not
    a number (the sidecar sends only seconds)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def from_response(status: int, body: bytes, retry_after: str | None, what: str) -> KubeflakeError:
    """The typed error for a non-200 answer of the sidecar to `what` (the request path)."""
    try:
        doc = json.loads(body.decode("utf-8", "replace") or "{}")
    except ValueError:
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    message = doc.get("error") or body.decode("utf-8", "replace").strip() or f"HTTP {status}"
    reason = doc.get("reason")
    text = f"{what}: {message}" + (f" (reason {reason})" if reason else "")
    if status == 400:
        return BadRequest(text)
    if status in (409, 503):
        kind = Refused
        if reason in CLOCK_REASONS:
            kind = ClockBehind
        elif reason in SLOT_REASONS:
            kind = SlotLost
        elif reason in EXHAUSTED_REASONS:
            kind = Exhausted
        return kind(text, status=status, reason=reason, retry_after=parse_retry_after(retry_after))
    return ProtocolError(f"{what}: unexpected HTTP {status}: {message}")


def not_ready_yet(where: str, status: int, doc: dict, retry_after: str | None) -> SlotLost:
    """A sidecar that answered /readyz but cannot say its mode yet: in a pod, it waits for
    the operator to give it a worker slot."""
    why = doc.get("error") or doc.get("reason") or f"phase {doc.get('phase')!r}"
    return SlotLost(f"the kubeflake sidecar at {where} cannot issue yet: {why} (it waits for a worker slot; "
                    "see the pod's Events)", status=status, reason=doc.get("reason") or "no_slot",
                    retry_after=parse_retry_after(retry_after))
