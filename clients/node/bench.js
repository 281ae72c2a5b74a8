#!/usr/bin/env node
// Measures (asserts nothing) the Node client's next() against one HTTP request per ID, in
// one run, against a standalone sidecar it starts on a Unix socket:
//   node clients/node/bench.js SIDECAR_BINARY [--ids 1000000] [--requests 5000] [--tcp]
import { parseArgs } from 'node:util';
import { Client } from './src/index.js';
import { startSidecar } from './test/sidecar.js';

const { values, positionals } = parseArgs({ allowPositionals: true, options: {
  ids: { type: 'string', default: '1000000' }, requests: { type: 'string', default: '5000' }, tcp: { type: 'boolean', default: false },
} });
process.env.KUBEFLAKE_SIDECAR_BIN = positionals[0] ?? process.env.KUBEFLAKE_SIDECAR_BIN;
const sidecar = await startSidecar();

/** n calls of take(), each timed: IDs/s and latency percentiles. */
async function measure(name, take, n) {
  const lat = new Float64Array(n);
  for (let i = 0; i < Math.min(n, 1000); i++) await take(); // warm-up: JIT, connections, first refills
  const started = performance.now();
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await take();
    lat[i] = performance.now() - t;
  }
  const seconds = (performance.now() - started) / 1000;
  lat.sort();
  const us = (q) => (lat[Math.min(n - 1, Math.floor(q * n))] * 1000).toFixed(2);
  console.log(`${name.padEnd(34)} ${Math.round(n / seconds).toLocaleString('en-US').padStart(11)} IDs/s   `
    + `p50 ${us(0.5)} us  p99 ${us(0.99)} us  p99.9 ${us(0.999)} us  (${n.toLocaleString('en-US')} IDs)`);
}

const where = values.tcp ? { url: sidecar.url } : { socket: sidecar.socket };
const buffered = new Client(where);
const direct = new Client({ ...where, prefetch: false });
console.log(`node ${process.version}, sidecar ${positionals[0]} over ${values.tcp ? 'TCP' : 'the Unix socket'}, one caller`);
await measure('next() (buffered)', () => buffered.next(), Number(values.ids));
await measure('one HTTP request per ID (kept)', () => direct.next(), Number(values.requests));
const s = buffered.stats();
console.log(`buffered: ${s.refills} refills (${(s.refillSeconds / s.refills * 1000).toFixed(2)} ms mean), ${s.waits} waits, batch ${s.batchSize}`);
const layout = await buffered.layout();
console.log(`the layout's ceiling for one worker: ${(2 ** layout.sequenceBits * 1000 / layout.timeUnitMs).toLocaleString('en-US')} IDs/s`);
buffered.close();
direct.close();
await sidecar.stop();
