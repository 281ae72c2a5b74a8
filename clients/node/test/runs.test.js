// parseIDRuns, what the buffer holds of an /ids answer: the same IDs and errors as
// parseIDs (from the answer's bytes), as runs of consecutive values.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ProtocolError } from 'kubeflake';
import { parseIDRuns, parseIDs } from '../src/transport.js';

const expand = (runs) => runs.flatMap(({ first, count }) => Array.from({ length: count }, (_, i) => first + BigInt(i)));

test('runs hold exactly the IDs of the lines, one run per stretch of consecutive values', () => {
  const tick = (t) => (BigInt(t) << 22n) | (5n << 12n);
  const ids = [];
  for (let i = 0; i < 10000; i++) ids.push(tick(1_900_000_000_000 + Math.floor(i / 4096)) + BigInt(i % 4096));
  const body = `${ids.join('\n')}\n`;
  const runs = parseIDRuns(Buffer.from(body), '/ids');
  assert.equal(runs.length, 3);
  assert.deepEqual(expand(runs), ids);
  assert.deepEqual(expand(runs), parseIDs(body, '/ids'));
});

test('a line is one more than the previous only by its whole value, never by its last digits alone', () => {
  const cases = [
    ['999999999\n1000000000\n1000000001\n', [[999999999n, 1], [1000000000n, 2]]], // 9 to 10 digits
    ['1999999999\n2000000000\n', [[1999999999n, 1], [2000000000n, 1]]], // a carry past the last 9 digits
    ['1000000005\n2000000006\n', [[1000000005n, 1], [2000000006n, 1]]], // the last 9 digits one more, the rest not
    ['7\n8\n8\n9\n', [[7n, 2], [8n, 2]]],
    ['5\n3\n4', [[5n, 1], [3n, 2]]], // no trailing newline, not in order: as written
    ['1\n\n2\n', [[1n, 2]]],
    ['9223372036854775806\n9223372036854775807\n', [[9223372036854775806n, 2]]],
  ];
  for (const [body, want] of cases) {
    const runs = parseIDRuns(Buffer.from(body), '/ids');
    assert.deepEqual(runs.map(({ first, count }) => [first, count]), want, body);
    assert.deepEqual(expand(runs), parseIDs(body, '/ids'), body);
  }
});

test('anything but decimal IDs below 2^63, one per line, is a protocol error', () => {
  for (const body of ['', '\n', '1\n-2\n', '1\nx\n', '1.5\n', ' 1\n', '9223372036854775808\n', '12345678901234567890\n', '[1]\n']) {
    assert.throws(() => parseIDRuns(Buffer.from(body), '/ids'), ProtocolError, JSON.stringify(body));
    assert.throws(() => parseIDs(body, '/ids'), ProtocolError, JSON.stringify(body));
  }
});
