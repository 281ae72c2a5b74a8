import assert from 'node:assert/strict';
import { test } from 'node:test';
import { errorFromResponse } from '../src/errors.js';
import {
  BadRequestError, ClockBehindError, ExhaustedError, KubeflakeError, ProtocolError, RefusedError, SlotLostError,
} from '../src/index.js';

test('refusals are typed by their reason and carry status, reason and Retry-After', () => {
  const cases = [
    [503, 'clock_before_epoch', ClockBehindError, 'clock_behind', true],
    [503, 'ahead_of_clock', ClockBehindError, 'clock_behind', true],
    [409, 'after_ahead_of_clock', ClockBehindError, 'clock_behind', true],
    [503, 'no_slot', SlotLostError, 'slot_lost', true],
    [503, 'stopping', SlotLostError, 'slot_lost', true],
    [503, 'timestamp_exhausted', ExhaustedError, 'exhausted', false],
    [409, 'after_above_counter', ExhaustedError, 'exhausted', false],
    [503, 'fence_reached', RefusedError, 'refused', true],
  ];
  for (const [status, reason, Class, kind, retryable] of cases) {
    const err = errorFromResponse(status, JSON.stringify({ error: 'why', reason }), '3', '/id');
    assert.ok(err instanceof Class && err instanceof RefusedError && err instanceof KubeflakeError, `${reason}: ${err.name}`);
    assert.deepEqual([err.kind, err.status, err.reason, err.retryAfterMs, err.retryable], [kind, status, reason, 3000, retryable], reason);
    assert.match(err.message, /why/);
  }
});

test('a 400 is a bad request, not a refusal, and not retried', () => {
  const err = errorFromResponse(400, '{"error":"count must be a whole number"}', undefined, '/ids');
  assert.ok(err instanceof BadRequestError && !(err instanceof RefusedError));
  assert.equal(err.retryable, false);
  assert.match(err.message, /count must be a whole number/);
});

test('an answer the API does not promise is a protocol error', () => {
  const err = errorFromResponse(502, '<html>Bad Gateway</html>', undefined, '/id');
  assert.ok(err instanceof ProtocolError);
  assert.equal(err.kind, 'protocol');
});
