// The transport against a small loopback server that misbehaves on purpose, where a real
// sidecar would not: a kept connection closed under the client, an answer that is not IDs.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import http from 'node:http';
import { test } from 'node:test';
import { Client, NoSidecarError, ProtocolError } from 'kubeflake';
import { Transport } from '../src/transport.js';

/** A loopback server; its handler gets the request's number on its connection (1, 2, ...). */
async function server(t, handler) {
  const s = http.createServer();
  let connections = 0;
  const served = new WeakMap();
  s.on('connection', () => { connections++; });
  s.on('request', (req, res) => {
    const nth = (served.get(req.socket) ?? 0) + 1;
    served.set(req.socket, nth);
    handler(req, res, nth);
  });
  s.listen(0, '127.0.0.1');
  await once(s, 'listening');
  t.after(() => { s.closeAllConnections(); s.close(); });
  return { url: `http://127.0.0.1:${s.address().port}`, port: s.address().port, connections: () => connections };
}

test('a kept connection the server closed meanwhile is retried once, at once, on a new one', async (t) => {
  let id = 41;
  const s = await server(t, (req, res, nth) => {
    if (nth === 2) return req.socket.destroy(); // the second request on a kept connection finds it gone
    res.end(`${++id}\n`);
  });
  // The transport itself, so that the client's own retries (after a backoff) cannot hide a missing one.
  const transport = new Transport({ host: '127.0.0.1', port: s.port }, 2000);
  t.after(() => transport.close());
  assert.deepEqual(await transport.ids('/id'), [42n]);
  assert.deepEqual(await transport.ids('/id'), [43n]); // not an error: the retry went to a new connection
  assert.equal(s.connections(), 2);
});

test('a connection that breaks on a new connection is no_sidecar, retried until maxWaitMs', { timeout: 10_000 }, async (t) => {
  const s = await server(t, (req) => req.socket.destroy());
  const ids = new Client({ url: s.url, prefetch: false, maxWaitMs: 300 });
  t.after(() => ids.close());
  await assert.rejects(ids.next(), NoSidecarError);
  assert.ok(s.connections() >= 2, `only ${s.connections()} attempt(s) within maxWaitMs`);
});

test('an answer that is not decimal IDs below 2^63 is a protocol error, never a wrong ID', async (t) => {
  for (const body of ['<html>hello</html>', '9223372036854775808\n', '-1\n', '12 13\n', '']) {
    const s = await server(t, (req, res) => res.end(body));
    const ids = new Client({ url: s.url, prefetch: false, maxWaitMs: 300 });
    t.after(() => ids.close());
    await assert.rejects(ids.next(), ProtocolError, JSON.stringify(body));
  }
});
