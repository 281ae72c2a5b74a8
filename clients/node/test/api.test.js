import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import * as kubeflake from 'kubeflake';

test('the package exports exactly the names its declarations (src/index.d.ts) declare', () => {
  const dts = readFileSync(new URL('../src/index.d.ts', import.meta.url), 'utf8');
  const declared = [...dts.matchAll(/^export (?:class|const) (\w+)/gm)].map((m) => m[1]).sort();
  assert.deepEqual(Object.keys(kubeflake).sort(), declared);
});

test('a URL that is not plain http://host:port is refused when the client is made, with an example', () => {
  for (const url of ['https://127.0.0.1:7070', 'kubeflake:7070', 'http://127.0.0.1:7070/api']) {
    assert.throws(() => new kubeflake.Client({ url }), (err) => err instanceof TypeError && err.message.includes(kubeflake.DEFAULT_URL), url);
  }
});

test('KUBEFLAKE_SOCKET, when set and not empty, wins over KUBEFLAKE_URL; an explicit option wins over both', (t) => {
  const saved = { socket: process.env.KUBEFLAKE_SOCKET, url: process.env.KUBEFLAKE_URL };
  t.after(() => {
    for (const [k, v] of [['KUBEFLAKE_SOCKET', saved.socket], ['KUBEFLAKE_URL', saved.url]]) {
      if (v === undefined) delete process.env[k]; else process.env[k] = v;
    }
  });
  process.env.KUBEFLAKE_URL = 'http://127.0.0.1:7171';
  process.env.KUBEFLAKE_SOCKET = '/run/kubeflake/api.sock';
  assert.equal(new kubeflake.Client().transport, 'unix');
  assert.equal(new kubeflake.Client({ url: 'http://127.0.0.1:7272' }).transport, 'tcp');
  process.env.KUBEFLAKE_SOCKET = '';
  assert.equal(new kubeflake.Client().transport, 'tcp');
  assert.equal(new kubeflake.Client({ socket: '/tmp/x.sock' }).transport, 'unix');
});

test('settings out of range are refused when the client is made', () => {
  assert.throws(() => new kubeflake.Client({ minBatch: 100, maxBatch: 10 }), RangeError);
  assert.throws(() => new kubeflake.Client({ maxWaitMs: -1 }), RangeError);
});
