// The client against real standalone sidecars (test/sidecar.js).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, ClockBehindError, ExhaustedError, NoSidecarError, ProtocolError } from 'kubeflake';
import { freePort, get, startSidecar } from './sidecar.js';

const TWO_53 = 2n ** 53n;

/** A client closed when the test ends. */
function client(t, options) {
  const c = new Client(options);
  t.after(() => c.close());
  return c;
}

const increasing = (ids) => ids.every((id, i) => i === 0 || id > ids[i - 1]);

describe('a Snowflake sidecar (default layout)', () => {
  let sidecar;
  before(async () => { sidecar = await startSidecar(); });
  after(() => sidecar?.stop());

  test('next() hands out increasing bigint IDs from the buffer, far fewer requests than IDs', async (t) => {
    const ids = client(t, { socket: sidecar.socket });
    const taken = [];
    for (let i = 0; i < 5000; i++) taken.push(await ids.next());
    assert.ok(taken.every((id) => typeof id === 'bigint'));
    assert.ok(increasing(taken));
    const s = ids.stats();
    assert.equal(s.ids, 5000);
    assert.equal(s.direct, 0);
    assert.ok(s.refills >= 1 && s.refills < 100, `refills ${s.refills}`);
    assert.equal(ids.transport, 'unix');
  });

  test('an ID above 2^53 is read exactly: as a bigint and as a string, the sidecar agrees', async (t) => {
    const ids = client(t, { url: sidecar.url });
    const id = await ids.next();
    assert.ok(id > TWO_53, `${id} is not above 2^53`);
    const text = await ids.nextString();
    assert.match(text, /^[0-9]{18,19}$/);
    assert.ok(BigInt(text) > id);
    for (const value of [id, BigInt(text)]) {
      assert.equal((await sidecar.decode(value)).id, String(value)); // the sidecar reads back the same decimal
    }
    // What a lossy number would have done to IDs of this size: at least one of 64 consecutive IDs changes.
    const batch = await ids.nextBatch(64);
    assert.ok(batch.some((v) => BigInt(Number(v)) !== v), 'a number kept every ID exact: the test proves nothing');
  });

  test('nextNumber() is refused, clearly, when the layout is not 53 bits', async (t) => {
    const ids = client(t, { url: sidecar.url });
    await assert.rejects(ids.nextNumber(), (err) => err instanceof RangeError && /totalBits: 53/.test(err.message));
  });

  test('nextAfter(x) goes to the sidecar and answers above x although the buffer holds smaller IDs', async (t) => {
    const ids = client(t, { socket: sidecar.socket, minBatch: 1000 });
    const first = await ids.next();
    const layout = await ids.layout();
    const parts = layout.decode(first);
    const after = layout.compose({ tick: parts.tick + 300n, worker: parts.worker });
    const got = await ids.nextAfter(after);
    assert.ok(got > after, `${got} is not above ${after}`);
    assert.ok((await ids.next()) < after, 'the buffer still serves its smaller IDs');
    assert.equal(ids.stats().direct, 1);
  });

  test('an after an hour ahead is a ClockBehindError with the sidecar\'s Retry-After, raised at once', async (t) => {
    const ids = client(t, { url: sidecar.url, maxWaitMs: 2000 });
    const layout = await ids.layout();
    const tick = layout.tickAt(Date.now() + 3600_000);
    await assert.rejects(ids.nextAfter(layout.compose({ tick })), (err) => err instanceof ClockBehindError
      && err.status === 409 && err.reason === 'after_ahead_of_clock' && err.retryAfterMs > 3000_000);
    assert.deepEqual(ids.stats().errors, { clock_behind: 1 });
  });

  test('the batch size grows with the rate, within maxBatch', async (t) => {
    const ids = client(t, { socket: sidecar.socket, maxBatch: 2000 });
    for (let i = 0; i < 20000; i++) await ids.next();
    const s = ids.stats();
    assert.ok(s.batchSize > 64 && s.batchSize <= 2000, `batch size ${s.batchSize}`);
  });

  test('prefetch: false makes every next() one request', async (t) => {
    const ids = client(t, { url: sidecar.url, prefetch: false });
    for (let i = 0; i < 3; i++) await ids.next();
    assert.deepEqual([ids.stats().direct, ids.stats().refills, ids.stats().bufferDepth], [3, 0, 0]);
  });

  test('a closed client drops its buffer and refuses to hand out IDs', async (t) => {
    const ids = client(t, { socket: sidecar.socket });
    await ids.next();
    ids.close();
    assert.equal(ids.stats().bufferDepth, 0);
    await assert.rejects(ids.next(), ProtocolError);
  });

  test('a socket that is not there is no_sidecar, never a switch to TCP', { timeout: 10_000 }, async (t) => {
    const saved = process.env.KUBEFLAKE_URL;
    process.env.KUBEFLAKE_URL = sidecar.url; // a live sidecar the client must not fall back to
    t.after(() => { if (saved === undefined) delete process.env.KUBEFLAKE_URL; else process.env.KUBEFLAKE_URL = saved; });
    const ids = client(t, { socket: '/nonexistent/kubeflake.sock', maxWaitMs: 300 });
    await assert.rejects(ids.next(), (err) => err instanceof NoSidecarError && err.message.includes('/nonexistent/kubeflake.sock'));
  });
});

test('no sidecar listening: NoSidecarError once maxWaitMs is over', { timeout: 10_000 }, async (t) => {
  const ids = client(t, { url: `http://127.0.0.1:${await freePort()}`, maxWaitMs: 300 });
  await assert.rejects(ids.next(), (err) => err instanceof NoSidecarError && err.kind === 'no_sidecar' && err.retryable);
  assert.deepEqual(ids.stats().errors, { no_sidecar: 1 });
});

test('a buffered Snowflake ID older than maxAgeMs is dropped, never served', async (t) => {
  const sidecar = await startSidecar(); // its own: another test's burst would have run the clock ahead
  t.after(sidecar.stop);
  const ids = client(t, { socket: sidecar.socket, maxAgeMs: 100, minBatch: 1000 });
  const first = await ids.next();
  await sleep(400);
  const second = await ids.next();
  const layout = await ids.layout();
  const gap = layout.decode(second).time - layout.decode(first).time;
  assert.ok(gap >= 300, `after 400 ms idle the next ID is only ${gap} ms younger: a stale buffered ID was served`);
  assert.ok(ids.stats().expired > 0, 'no buffered ID was dropped for its age');
});

test('a refusing sidecar whose Retry-After ends past maxWaitMs: ClockBehindError with its reason, at once', { timeout: 10_000 }, async (t) => {
  const epoch = new Date(Date.now() + 30_000).toISOString().replace(/\.\d+Z$/, 'Z'); // ahead: 503 clock_before_epoch, Retry-After: 1
  const sidecar = await startSidecar([], { ready: false, sequence: 'apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\n'
    + `metadata: {name: future}\nspec:\n  epoch: "${epoch}"\n` });
  t.after(sidecar.stop);
  const ids = client(t, { socket: sidecar.socket, maxWaitMs: 300 });
  await assert.rejects(ids.next(), (err) => err instanceof ClockBehindError && err.status === 503
    && err.reason === 'clock_before_epoch' && err.retryAfterMs === 1000 && err.retryable);
  assert.equal(ids.stats().errors.clock_behind, 1);
});

test('a 53-bit layout: nextNumber() gives exact numbers; decode and compose agree with /decode', async (t) => {
  const sidecar = await startSidecar(['--worker-id', '5'], { sequence: 'apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\n'
    + 'metadata: {name: js}\nspec:\n  layout: {totalBits: 53, timestampBits: 36, datacenterBits: 0, workerBits: 7, sequenceBits: 10}\n'
    + '  timeUnit: 10ms\n' });
  t.after(sidecar.stop);
  const ids = client(t, { url: sidecar.url });
  const layout = await ids.layout();
  assert.deepEqual([layout.totalBits, layout.timestampBits, layout.datacenterBits, layout.workerBits, layout.sequenceBits, layout.timeUnitMs],
    [53, 36, 0, 7, 10, 10]);
  const numbers = [];
  for (let i = 0; i < 100; i++) numbers.push(await ids.nextNumber());
  assert.ok(numbers.every(Number.isSafeInteger) && increasing(numbers));
  for (const n of numbers.slice(0, 5)) {
    const want = await sidecar.decode(n);
    const got = await ids.decode(n);
    assert.deepEqual([String(got.tick), got.worker, got.sequence, got.time.toISOString()],
      [String(want.tick), want.worker, want.sequence, want.time]);
    assert.equal(got.worker, 5);
    assert.equal(layout.compose(got), BigInt(n));
  }
});

test('decode and compose agree with /decode on a non-default layout (datacenter 1, worker 3)', async (t) => {
  const sidecar = await startSidecar(['--worker-id', '3'], { sequence: 'apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\n'
    + 'metadata: {name: dc}\nspec:\n  layout: {timestampBits: 41, datacenterBits: 2, workerBits: 8, sequenceBits: 12}\n  datacenterId: 1\n' });
  t.after(sidecar.stop);
  const ids = client(t, { url: sidecar.url });
  const samples = [0n, 1n, 4096n, 2n ** 63n - 1n, await ids.next(), await ids.next()];
  for (const id of samples) {
    const want = await sidecar.decode(id);
    const got = await ids.decode(id);
    assert.deepEqual([String(got.tick), got.datacenter, got.worker, got.sequence, got.time.getTime()],
      [String(want.tick), want.datacenter, want.worker, want.sequence, Date.parse(want.time)], String(id));
    assert.equal(await ids.compose(got), id);
  }
  const layout = await ids.layout();
  const now = await ids.next();
  const tick = layout.decode(now).tick;
  assert.ok(layout.compose({ tick: layout.tickAt(layout.decode(now).time) }) <= now);
  assert.throws(() => layout.compose({ tick, datacenter: 4 }), RangeError);
});

test('segment values leave the buffer in order: concurrent callers each see them increase, none twice', async (t) => {
  const sidecar = await startSidecar(['--mode', 'segment', '--block-size', '1000']);
  t.after(sidecar.stop);
  const ids = client(t, { socket: sidecar.socket });
  const perTask = await Promise.all(Array.from({ length: 8 }, async () => {
    const mine = [];
    for (let i = 0; i < 2000; i++) mine.push(await ids.next());
    return mine;
  }));
  assert.ok(perTask.every(increasing));
  assert.equal(new Set(perTask.flat()).size, 16000);
  assert.equal(await ids.layout(), null);
  await assert.rejects(ids.decode(1n), TypeError);
  await assert.rejects(ids.nextNumber(), RangeError);
});

test('a strict sequence bypasses the buffer: every next() is a request', async (t) => {
  const sidecar = await startSidecar(['--mode', 'segment', '--strict']);
  t.after(sidecar.stop);
  const ids = client(t, { socket: sidecar.socket });
  const values = [];
  for (let i = 0; i < 4; i++) values.push(await ids.next());
  assert.ok(increasing(values));
  assert.equal(await ids.mode(), 'strict');
  assert.deepEqual([ids.stats().direct, ids.stats().refills], [4, 0]);
});

test('a sidecar with a smaller --max-batch: a 400 to a refill halves the batch and IDs still come', async (t) => {
  const sidecar = await startSidecar(['--max-batch', '100']);
  t.after(sidecar.stop);
  const ids = client(t, { url: sidecar.url, minBatch: 400, maxBatch: 1000 });
  const taken = [];
  for (let i = 0; i < 500; i++) taken.push(await ids.next());
  assert.ok(increasing(taken));
  assert.ok(ids.stats().batchSize <= 100, `batch size ${ids.stats().batchSize}`);
});

test('a used-up sequence is an ExhaustedError, raised at once, after the values it had', { timeout: 20_000 }, async (t) => {
  const sidecar = await startSidecar(['--mode', 'segment', '--segment-start', '9223372036854775800', '--block-size', '5']);
  t.after(sidecar.stop);
  const ids = client(t, { url: sidecar.url, minBatch: 1, maxWaitMs: 60_000 });
  const values = [];
  let error;
  for (let i = 0; i < 20 && !error; i++) {
    try { values.push(await ids.next()); } catch (err) { error = err; }
  }
  assert.ok(error instanceof ExhaustedError && error.status === 503 && !error.retryable, String(error));
  assert.ok(increasing(values) && values.length > 0 && values.at(-1) <= 2n ** 63n - 1n);
  assert.equal((await get(sidecar.url, '/healthz')).status, 200);
});
