// A real standalone sidecar for the tests (KUBEFLAKE_SIDECAR_BIN; clients/node/test.sh sets
// it) on a free loopback port and a Unix socket; the caller stops it (t.after(sidecar.stop)).
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export async function freePort() {
  const server = net.createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  server.close();
  await once(server, 'close');
  return port;
}

/** GET on the sidecar itself (not through the client): status and body. */
export function get(url, path) {
  return new Promise((resolve, reject) => {
    http.get(`${url}${path}`, { agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (c) => { body += c; }).on('end', () => resolve({ status: res.statusCode, body }));
    }).on('error', reject);
  });
}

/**
 * @param {string[]} args extra arguments of `kubeflake-sidecar standalone`
 * @param {{sequence?: string, ready?: boolean}} [options] an IdSequence YAML for
 *   --sequence-file; ready: false to wait only until it answers (one that refuses for now)
 */
export async function startSidecar(args = [], { sequence, ready: mustBeReady = true } = {}) {
  const bin = process.env.KUBEFLAKE_SIDECAR_BIN;
  if (!bin) throw new Error('KUBEFLAKE_SIDECAR_BIN must name a built kubeflake-sidecar binary (clients/node/test.sh sets it)');
  const dir = mkdtempSync(join(tmpdir(), 'kubeflake-node-'));
  const socket = join(dir, 'api.sock');
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const all = ['standalone', '--listen', `127.0.0.1:${port}`, '--listen-unix', socket, '--state-dir', dir, ...args];
  if (sequence) {
    writeFileSync(join(dir, 'sequence.yaml'), sequence);
    all.push('--sequence-file', join(dir, 'sequence.yaml'));
  }
  const proc = spawn(bin, all, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.setEncoding('utf8').on('data', (c) => { log = (log + c).slice(-3000); });
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGKILL');
      await once(proc, 'exit');
    }
    rmSync(dir, { recursive: true, force: true });
  };
  for (let i = 0; i < 400; i++) { // 20 s at most
    if (proc.exitCode !== null) {
      await stop();
      throw new Error(`the sidecar exited: ${log}`);
    }
    const ready = await get(url, '/readyz').catch(() => null);
    if (ready && (ready.status === 200 || !mustBeReady)) return { url, socket, stop, decode: async (id) => JSON.parse((await get(url, `/decode/${id}`)).body) };
    await sleep(50);
  }
  await stop();
  throw new Error(`the sidecar at ${url} was not ready within 20 s: ${log}`);
}
