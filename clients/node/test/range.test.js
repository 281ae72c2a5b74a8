// clients/SPEC.md, "Ranges in segment mode" and "Range refills are sized and timed so that no
// caller waits": segment refills are ranges from /range, a sidecar without /range (0.1.0, a
// 404) is asked /ids for the client's life, and the refill's size and low-water mark follow
// the measured rate.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import http from 'node:http';
import { test } from 'node:test';
import { Client, ProtocolError } from 'kubeflake';
import { Pace } from '../src/pace.js';
import { parseRange } from '../src/transport.js';
import { get, startSidecar } from './sidecar.js';

function client(t, options) {
  const c = new Client(options);
  t.after(() => c.close());
  return c;
}

/** The sidecar's count of 200 answers to `route` (its /metrics). */
async function answered(url, route) {
  const { body } = await get(url, '/metrics');
  const m = body.match(new RegExp(`kubeflake_http_requests_total\\{code="200",route="${route}"\\} (\\d+)`));
  return m ? Number(m[1]) : 0;
}

test('segment refills are ranges, and every value comes once, in order', async (t) => {
  const sidecar = await startSidecar(['--mode', 'segment', '--block-size', '700']);
  t.after(sidecar.stop);
  const ids = client(t, { socket: sidecar.socket });
  let prev = -1n;
  for (let i = 0; i < 20_000; i++) {
    const v = await ids.next();
    assert.ok(v > prev, `${v} came after ${prev}`);
    prev = v;
  }
  assert.equal(ids.stats().ids, 20_000);
  assert.ok(await answered(sidecar.url, 'range') > 0, 'the refills asked /range');
  assert.equal(await answered(sidecar.url, 'ids'), 0, 'and never /ids');
});

/**
 * A fake segment sidecar: `ranges` false is a 0.1.0 sidecar (404 to /range; /ids values with
 * a gap after every multiple of 7), else /range answers min(count, cap) values and 400 above max.
 */
async function fakeSidecar(t, { ranges, cap = 2 ** 40, max = 2 ** 40, first = 1000n }) {
  const state = { next: first, asked: [], range404s: 0 };
  const reply = (res, status, body) => { res.writeHead(status, { 'content-length': Buffer.byteLength(body) }).end(body); };
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://fake');
    const count = Number(url.searchParams.get('count') ?? 0);
    if (url.pathname === '/readyz') return reply(res, 200, '{"status":"ready","mode":"Segment","strict":false,"phase":"segment"}');
    if (url.pathname === '/range' && ranges) {
      state.asked.push(count);
      if (count > max) return reply(res, 400, JSON.stringify({ error: `count must be a whole number from 1 to ${max}` }));
      const n = Math.min(count, cap);
      reply(res, 200, JSON.stringify({ first: String(state.next), count: n }));
      state.next += BigInt(n);
      return undefined;
    }
    if (url.pathname === '/ids' && !ranges) {
      let body = '';
      for (let i = 0; i < count; i++) {
        body += `${state.next}\n`;
        state.next += state.next % 7n === 0n ? 3n : 1n;
      }
      return reply(res, 200, body);
    }
    if (url.pathname === '/range') state.range404s++;
    return reply(res, 404, JSON.stringify({ error: `no route ${url.pathname}` }));
  }).listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => { server.closeAllConnections(); server.close(); });
  return { url: `http://127.0.0.1:${server.address().port}`, state };
}

test('a sidecar without /range answering 404 is asked /ids, and its values are served in order', async (t) => {
  const fake = await fakeSidecar(t, { ranges: false });
  const ids = client(t, { url: fake.url });
  let want = 1000n;
  for (let i = 0; i < 3000; i++) {
    assert.equal(await ids.next(), want, 'the values of /ids, in their order, none skipped');
    want += want % 7n === 0n ? 3n : 1n;
  }
  assert.equal(fake.state.range404s, 1, '/range was asked once, then never again');
});

test('range refills grow past maxBatch, and a 400 halves maxRange', async (t) => {
  const fake = await fakeSidecar(t, { ranges: true, max: 1000, first: 1n });
  const ids = client(t, { url: fake.url, maxBatch: 100, maxRange: 4096 });
  for (let i = 1n; i <= 20_000n; i++) assert.equal(await ids.next(), i);
  const taken = fake.state.asked.filter((n) => n <= 1000);
  const refused = fake.state.asked.filter((n) => n > 1000);
  assert.ok(Math.max(...taken) > 100, `ranges above maxBatch were asked: ${fake.state.asked}`);
  assert.ok(refused.length >= 1 && refused.length <= 3, `a 400 halved maxRange until the sidecar took it: ${fake.state.asked}`);
});

test('a /range answer of another shape is a ProtocolError', () => {
  for (const bad of ['{"first":5,"count":3}', '{"first":"5","count":0}', '{"first":"5","count":11}', '{"first":"-5","count":3}',
    '{"first":"5"}', '{"first":"9223372036854775807","count":2}', '{"first":"9223372036854775806","count":3}', '<html>',
    '{"first":"+5","count":3}', '{"first":"5","count":1.5}', 'null']) {
    assert.throws(() => parseRange(bad, 10, '/range?count=10'), ProtocolError, bad);
  }
  const last = parseRange('{"first":"9223372036854775798","count":10}', 10, '/range');
  assert.deepEqual(last, { first: 9223372036854775798n, count: 10 }, 'the last range of the sequence ends at 2^63-1');
});

test('the low-water mark is half a batch until refills are measured', () => {
  assert.equal(new Pace().lowWater(1000, 1_000_000), 500);
});

test('the low-water mark covers two slowest recent refills at the measured rate, within [half a batch, the ceiling]', () => {
  const p = new Pace();
  p.arrived(1_000_000, 0.8, 0);
  p.arrived(1_001_000, 0.8, 10_000_000); // 10M values/s; refills take 0.8 ms
  assert.equal(p.lowWater(10_000, 1_000_000), 16_000);
  assert.equal(p.lowWater(100_000, 1_000_000), 50_000, 'never below half the batch');
  assert.equal(p.lowWater(10_000, 12_000), 12_000, 'never above the ceiling');
});

test('the refill time is an exponential mean giving the newest a quarter', () => {
  const p = new Pace();
  p.arrived(1_000_000, 4, 0);
  p.arrived(1_001_000, 0, 1000);
  assert.equal(p.refillMs, 3);
  p.arrived(1_003_000, 0, 5000);
  assert.equal(p.ratePerMs, 2);
});
