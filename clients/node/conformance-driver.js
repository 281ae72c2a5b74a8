#!/usr/bin/env node
// The Node client's driver for the shared conformance suite: one JSON command a line on
// stdin, one JSON answer a line on stdout (clients/conformance/README.md in the repository).
import { createWriteStream } from 'node:fs';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { Client, KubeflakeError } from './src/index.js';

const SETTINGS = { max_wait_ms: 'maxWaitMs', request_timeout_ms: 'requestTimeoutMs', max_age_ms: 'maxAgeMs',
  min_batch: 'minBatch', max_batch: 'maxBatch', prefetch: 'prefetch' };

/** A field as a JSON number when exact, else as a decimal string. */
const num = (v) => (typeof v === 'bigint' && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : typeof v === 'bigint' ? String(v) : v);

function errorDoc(err) {
  if (!(err instanceof KubeflakeError)) return { kind: 'internal', message: String(err?.stack ?? err) };
  const doc = { kind: err.kind, message: err.message };
  if (err.status) Object.assign(doc, { status: err.status, reason: err.reason, retry_after_ms: err.retryAfterMs });
  return doc;
}

let client;

async function run(workers, count, out) {
  let left = count;
  const taken = Array.from({ length: workers }, () => []);
  const errors = {};
  const started = performance.now();
  await Promise.all(taken.map(async (mine) => {
    while (left > 0) {
      left--;
      try {
        mine.push(await client.next());
      } catch (err) {
        const kind = errorDoc(err).kind;
        errors[kind] = (errors[kind] ?? 0) + 1;
        return;
      }
    }
  }));
  const seconds = (performance.now() - started) / 1000;
  const file = createWriteStream(out);
  let total = 0;
  for (const [w, ids] of taken.entries()) {
    total += ids.length;
    if (!file.write(ids.map((id) => `${w} ${id}\n`).join(''))) await once(file, 'drain');
  }
  file.end();
  await once(file, 'finish');
  return { count: total, errors, seconds };
}

async function handle(c) {
  switch (c.op) {
    case 'open': {
      const options = {};
      for (const [k, v] of Object.entries(c.settings ?? {})) if (k in SETTINGS) options[SETTINGS[k]] = v;
      client = new Client(options);
      return { transport: client.transport };
    }
    case 'next': return { id: String(await client.next()) };
    case 'next_after': return { id: String(await client.nextAfter(c.after)) };
    case 'decode': {
      const p = await client.decode(c.id);
      return { fields: { tick: num(p.tick), datacenter: p.datacenter, worker: p.worker, sequence: p.sequence, time_ms: p.time.getTime() } };
    }
    case 'compose': return { id: String(await client.compose(c)) };
    case 'stats': {
      const s = client.stats();
      return { stats: { ids: s.ids, buffer_depth: s.bufferDepth, refills: s.refills, waits: s.waits, expired: s.expired,
        direct: s.direct, refill_errors: s.refillErrors, batch_size: s.batchSize, errors: s.errors } };
    }
    case 'run': return run(c.workers, c.count, c.out);
    case 'close': client?.close(); return {};
    default: throw new Error(`unknown op ${JSON.stringify(c.op)}`);
  }
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  const command = JSON.parse(line);
  let answer;
  try {
    answer = { ok: true, ...(await handle(command)) };
  } catch (err) {
    answer = { ok: false, error: errorDoc(err) };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
  if (command.op === 'close') break;
}
client?.close();
process.stdin.destroy(); // the runner keeps its end open: stop reading, so that the process ends
