#!/usr/bin/env node
// Measures (asserts nothing) the Node client's next(), in Snowflake and in segment mode,
// beside one HTTP request per ID, an in-process Snowflake generator (@sapphire/snowflake, a
// dev dependency: `npm install --no-package-lock` in clients/node first) and the layout's
// ceiling, in one run, against standalone sidecars it starts (on Unix sockets unless --tcp):
//   node clients/node/bench.js SIDECAR_BINARY [--ids 2000000] [--requests 5000] [--tcp]
// Each row: IDs/s from a pass of n calls with no clock read in the loop, then p50/p99/p99.9
// from a second pass of n calls each timed with process.hrtime.bigint() (one clock read a
// call: the interval from the read after the previous call to the read after this one, so
// one read's cost, the "clock read" row, is inside each figure).
// @sapphire/snowflake does not wait at its layout's ceiling: its 12-bit increment wraps every
// 4,096 calls whatever the millisecond, so past 4,096 IDs in one millisecond it repeats IDs;
// its row counts them in a third pass of n calls (an ID equal to the one 4,096 calls before).
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Client } from './src/index.js';
import { startSidecar } from './test/sidecar.js';

const { values, positionals } = parseArgs({ allowPositionals: true, options: {
  ids: { type: 'string', default: '2000000' }, requests: { type: 'string', default: '5000' }, tcp: { type: 'boolean', default: false },
} });
process.env.KUBEFLAKE_SIDECAR_BIN = positionals[0] ?? process.env.KUBEFLAKE_SIDECAR_BIN;
const snowflake = await startSidecar();
// The default sequence but for a 10 ms drift limit: the sidecar lends a burst of at most
// 10 ms of ticks, so even a short pass measures the rate it sustains (as Go's
// BenchmarkSnowflakeSustained; with the default 2 s, a pass of 2 million IDs is mostly lent).
const sustained = await startSidecar([], { sequence: 'apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: tight}\nspec: {clock: {maxDriftMillis: 10}}\n' });
const segment = await startSidecar(['--mode', 'segment']);
// Blocks growing from 1,000 to 1,000,000 values (--max-block-size, as the Java and Go
// benchmarks' segment rows): a /range answer never crosses a block, so only then can one
// refill bring more than 1,000 values.
const growing = await startSidecar(['--mode', 'segment', '--block-size', '1000', '--max-block-size', '1000000']);
const fmt = (x) => Math.round(x).toLocaleString('en-US');
const sapphire = await import('@sapphire/snowflake').catch(() => {
  console.error('bench.js: @sapphire/snowflake (a dev dependency) is missing: cd clients/node && npm install --no-package-lock');
  process.exit(2);
});

/** n untimed calls of take() (IDs/s), then n more each timed (percentiles). */
async function measure(name, take, n, extra = () => '') {
  for (let i = 0; i < Math.min(n, 1000); i++) await take(); // warm-up: JIT, connections, first refills
  let started = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await take();
  const rate = n / (Number(process.hrtime.bigint() - started) / 1e9);
  const lat = new BigUint64Array(n);
  let prev = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    await take();
    const now = process.hrtime.bigint();
    lat[i] = now - prev;
    prev = now;
  }
  lat.sort();
  const us = (q) => (Number(lat[Math.floor(q * (n - 1))]) / 1000).toFixed(2);
  console.log(`${name.padEnd(42)} ${fmt(rate).padStart(11)} IDs/s   p50 ${us(0.5)} us  p99 ${us(0.99)} us  p99.9 ${us(0.999)} us  `
    + `(${fmt(n)} + ${fmt(n)} calls${await extra()})`);
}

const at = (sidecar) => (values.tcp ? { url: sidecar.url } : { socket: sidecar.socket });
const n = Number(values.ids);
console.log(`node ${process.version}, sidecar ${positionals[0]} over ${values.tcp ? 'TCP' : 'Unix sockets'}, one caller`);
const bufferStats = (client) => () => {
  const s = client.stats();
  return `; ${s.refills} refills, ${(s.refillSeconds / Math.max(1, s.refills) * 1000).toFixed(2)} ms mean, ${s.waits} waits`;
};
const flake = new Client(at(snowflake));
await measure('next(), buffered, Snowflake', () => flake.next(), n, bufferStats(flake));
const tight = new Client(at(sustained));
await measure('next(), buffered, Snowflake, 10 ms lent', () => tight.next(), n, bufferStats(tight));
const seg = new Client(at(segment));
await measure('next(), buffered, segment', () => seg.next(), n, bufferStats(seg));
const grown = new Client(at(growing));
await measure('next(), buffered, segment, blocks grow', () => grown.next(), n, bufferStats(grown));
const direct = new Client({ ...at(snowflake), prefetch: false });
await measure('one HTTP request per ID (kept alive)', () => direct.next(), Number(values.requests));
// Twitter's epoch; workerId and processId (5 bits each) are the layout's 10-bit machine field.
const inProcess = new sapphire.Snowflake(1288834974657n);
const generate = () => inProcess.generate();
const sapphireVersion = JSON.parse(readFileSync(new URL('../../package.json', import.meta.resolve('@sapphire/snowflake')))).version;
await measure(`@sapphire/snowflake ${sapphireVersion}, in process`, generate, n, async () => {
  const ring = new Array(4096).fill(-1n);
  let repeats = 0;
  for (let i = 0; i < n; i++) {
    const id = await generate();
    if (id === ring[i & 4095]) repeats++;
    ring[i & 4095] = id;
  }
  return `; ${fmt(repeats)} repeated IDs in a third pass of ${fmt(n)}`;
});
await measure('clock read alone (await of nothing)', async () => {}, n);
const layout = await flake.layout();
console.log(`${'the layout\'s ceiling, one worker'.padEnd(42)} ${fmt(2 ** layout.sequenceBits * 1000 / layout.timeUnitMs).padStart(11)} IDs/s`);
for (const c of [flake, tight, seg, grown, direct]) c.close();
await snowflake.stop();
await segment.stop();
await growing.stop();
await sustained.stop();
