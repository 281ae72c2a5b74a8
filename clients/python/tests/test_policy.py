"""Pure behaviour: where the sidecar is, how errors are typed, how batches adapt."""

import pytest

from kubeflake import errors
from kubeflake._policy import Endpoint, Settings, backoff, low_water, mode_from_readyz, next_batch_size


def test_the_socket_wins_over_the_url(monkeypatch):
    monkeypatch.setenv("KUBEFLAKE_SOCKET", "/run/kubeflake/api.sock")
    monkeypatch.setenv("KUBEFLAKE_URL", "http://127.0.0.1:7070")
    assert Endpoint.resolve() == Endpoint(socket="/run/kubeflake/api.sock")


def test_the_url_is_used_without_a_socket(monkeypatch):
    monkeypatch.delenv("KUBEFLAKE_SOCKET", raising=False)
    monkeypatch.setenv("KUBEFLAKE_URL", "http://127.0.0.1:7171")
    assert Endpoint.resolve() == Endpoint(host="127.0.0.1", port=7171)


def test_an_empty_socket_variable_counts_as_unset(monkeypatch):
    monkeypatch.setenv("KUBEFLAKE_SOCKET", "")
    monkeypatch.delenv("KUBEFLAKE_URL", raising=False)
    assert Endpoint.resolve().transport == "tcp"


def test_explicit_arguments_override_the_environment(monkeypatch):
    monkeypatch.setenv("KUBEFLAKE_SOCKET", "/from/env.sock")
    assert Endpoint.resolve(url="http://127.0.0.1:9999") == Endpoint(host="127.0.0.1", port=9999)


def test_a_url_that_is_not_plain_http_is_refused_with_an_example():
    with pytest.raises(ValueError, match="http://127.0.0.1:7070"):
        Endpoint.resolve(url="https://kubeflake:7070")


@pytest.mark.parametrize("status,reason,kind,retryable", [
    (503, "clock_before_epoch", errors.ClockBehind, True),
    (503, "ahead_of_clock", errors.ClockBehind, True),
    (409, "after_ahead_of_clock", errors.ClockBehind, True),
    (503, "no_slot", errors.SlotLost, True),
    (503, "stopped", errors.SlotLost, True),
    (503, "timestamp_exhausted", errors.Exhausted, False),
    (409, "after_above_counter", errors.Exhausted, False),
    (503, "fence_reached", errors.Refused, True),
])
def test_refusals_are_typed_by_reason(status, reason, kind, retryable):
    body = b'{"error":"why","reason":"%s"}' % reason.encode()
    e = errors.from_response(status, body, "3", "/id")
    assert type(e) is kind
    assert (e.status, e.reason, e.retry_after, e.retryable) == (status, reason, 3.0, retryable)
    assert "why" in str(e)


def test_a_400_is_a_bad_request_that_waiting_does_not_fix():
    e = errors.from_response(400, b'{"error":"count must be a whole number"}', None, "/ids?count=0")
    assert isinstance(e, errors.BadRequest) and not e.retryable
    assert "count must be a whole number" in str(e)


def test_an_answer_from_something_else_is_a_protocol_error():
    assert isinstance(errors.from_response(502, b"<html>bad gateway</html>", None, "/id"), errors.ProtocolError)


def test_retry_after_reads_seconds_and_ignores_garbage():
    assert errors.parse_retry_after("2") == 2.0
    assert errors.parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert errors.parse_retry_after(None) is None


def test_the_batch_doubles_when_a_batch_lasts_under_half_the_refill_period():
    s = Settings(min_batch=64, max_batch=1000, refill_period=0.1)
    assert next_batch_size(64, 0.01, s) == 128
    assert next_batch_size(800, 0.01, s) == 1000


def test_the_batch_halves_when_a_batch_lasts_over_four_periods_but_not_below_the_minimum():
    s = Settings(min_batch=64, max_batch=1000, refill_period=0.1)
    assert next_batch_size(512, 1.0, s) == 256
    assert next_batch_size(64, 1.0, s) == 64
    assert next_batch_size(256, 0.1, s) == 256


def test_refills_start_at_half_a_batch_and_back_off_to_a_second():
    assert low_water(1000) == 500
    waits = [0.0]
    for _ in range(8):
        waits.append(backoff(waits[-1]))
    assert waits[1] == 0.05 and waits[-1] == 1.0


def test_settings_refuse_nonsense():
    with pytest.raises(ValueError):
        Settings(min_batch=0)
    with pytest.raises(ValueError):
        Settings(max_age=0)


def test_the_mode_comes_from_readyz():
    assert mode_from_readyz({"phase": "snowflake", "status": "ready"}) == "snowflake"
    assert mode_from_readyz({"phase": "segment", "strict": True}) == "strict"
    assert mode_from_readyz({"phase": "segment", "strict": False}) == "segment"
    assert mode_from_readyz({"phase": "waiting"}) is None


def test_ids_parse_the_sidecars_lines_and_refuse_anything_else():
    from kubeflake._policy import parse_ids

    assert parse_ids(b"1\n2\n9223372036854775807\n", "/ids") == [1, 2, 2**63 - 1]
    # Forms the sidecar does not send but the line by line parse always took.
    assert parse_ids(b"7", "/id") == [7]
    assert parse_ids(b"1\n\n02\n", "/ids") == [1, 2]
    for body in (b"", b"\n", b"1\n-2\n", b"1\nx\n", b"1.5\n", b"9223372036854775808\n", b"[1]\n"):
        with pytest.raises(errors.ProtocolError):
            parse_ids(body, "/ids")
