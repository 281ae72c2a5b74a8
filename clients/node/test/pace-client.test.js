// clients/SPEC.md, "a safe distance", wired into the client (the Go client's
// TestASnowflakeCallerFindingTheBufferEmptyDoublesTheSafeDistance): every refill is measured,
// the time the buffer was empty left out, and a caller that finds the buffer empty, once the
// rate is measured, doubles the distance and moves the mark by the Snowflake rule, maxAgeMs
// included. No timing: a fake Snowflake sidecar answers two refills at once and holds the
// third until released; the client's Pace is watched through its prototype (this file's
// process only: node --test runs each file in its own). Then "Maximum age" against a real
// sidecar, however far ahead the mark keeps the buffer (the Go client's
// TestSnowflakeIDsAreNeverHandedOutOlderThanMaxAge).
import assert from 'node:assert/strict';
import { once } from 'node:events';
import http from 'node:http';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'kubeflake';
import { MIN_DISTANCE, Pace } from '../src/pace.js';
import { startSidecar } from './sidecar.js';

/** Answers /ids at once `open` times, then holds each answer until release(). */
async function gatedSnowflakeSidecar(t, open) {
  let next = 1n;
  let answered = 0;
  let release;
  const gate = new Promise((resolve) => { release = resolve; });
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://fake');
    if (url.pathname === '/readyz') return res.end('{"status":"ready","mode":"Snowflake","strict":false,"phase":"snowflake"}');
    if (url.pathname !== '/ids') return res.writeHead(404).end();
    if (++answered > open) await gate;
    let body = '';
    for (let i = Number(url.searchParams.get('count')); i > 0; i--) body += `${next++}\n`;
    return res.end(body);
  }).listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => { release(); server.closeAllConnections(); server.close(); });
  return { url: `http://127.0.0.1:${server.address().port}`, release };
}

/** Records the client's Pace, every arrival's arguments and every Snowflake mark it computes. */
function watchPace(t) {
  const seen = { pace: null, arrivals: [], marks: [] };
  const { arrived, snowflakeLowWater } = Pace.prototype;
  Pace.prototype.arrived = function watched(...args) {
    seen.pace = this;
    seen.arrivals.push(args);
    return arrived.apply(this, args);
  };
  Pace.prototype.snowflakeLowWater = function watched(...args) {
    const mark = snowflakeLowWater.apply(this, args);
    seen.marks.push(mark);
    return mark;
  };
  t.after(() => Object.assign(Pace.prototype, { arrived, snowflakeLowWater }));
  return seen;
}

test('a caller finding the buffer empty doubles the safe distance and moves the mark within maxAgeMs', async (t) => {
  const seen = watchPace(t);
  const fake = await gatedSnowflakeSidecar(t, 2);
  const ids = new Client({ url: fake.url, minBatch: 100, maxBatch: 100, maxAgeMs: 1000, maxWaitMs: 10_000 });
  t.after(() => ids.close());
  for (let i = 0; i < 200; i++) await ids.next(); // the two answered batches
  const p = seen.pace;
  assert.equal(seen.arrivals.length, 2, 'both refills measured');
  assert.equal(p.distance, MIN_DISTANCE);
  // 1,000 IDs/s and a slowest refill of 150 ms: the mark at distance 2 is 300, at 4 600, and
  // within half of maxAgeMs (1 s) at the rate, less a batch: 400.
  p.ratePerMs = 1;
  p.slowMs = 150;
  const waits = ids.stats().waits;
  const marks = seen.marks.length;
  const caller = ids.next(); // finds the buffer empty: the third refill is held
  for (let i = 0; ids.stats().waits === waits; i++) {
    assert.ok(i < 10_000, 'the caller did not wait on the held refill');
    await sleep(1);
  }
  assert.equal(p.distance, 2 * MIN_DISTANCE, 'a caller found the buffer empty: the distance doubles');
  assert.deepEqual(seen.marks.slice(marks), [400], '4 x 150 ms x 1,000/s = 600, within half of maxAgeMs at the rate less a batch');
  await sleep(20);
  fake.release();
  assert.equal(await caller, 201n);
  const [, , , emptyMs] = seen.arrivals[2];
  assert.ok(emptyMs >= 20, `the third refill arrived after the buffer was empty for at least 20 ms, measured ${emptyMs} ms`);
});

test('Snowflake IDs are never handed out older than maxAgeMs, however far ahead the mark', async (t) => {
  const sidecar = await startSidecar();
  t.after(sidecar.stop);
  const maxAgeMs = 20;
  const ids = new Client({ socket: sidecar.socket, maxAgeMs });
  t.after(() => ids.close());
  const layout = await ids.layout();
  // The age is taken when the call began: the buffer checks a batch's age (from when its
  // request was sent, before any of its IDs' times) after that moment, so the bound holds
  // however long the caller is descheduled; the slack is the ID's time unit and the clocks'
  // spread (Date.now() in whole ms), not the machine's load.
  const slackMs = layout.timeUnitMs + 5;
  for (let burst = 0; burst < 4; burst++) {
    for (let i = 0; i < 20_000; i++) {
      const began = Date.now();
      const id = await ids.next();
      const age = began - layout.decode(id).time.getTime();
      if (age > maxAgeMs + slackMs) assert.fail(`burst ${burst}: ID ${id} was ${age} ms old when its call began`);
    }
    await sleep(300);
  }
  assert.ok(ids.stats().expired > 0, 'no buffered ID expired across pauses: the test did not test the bound');
});
