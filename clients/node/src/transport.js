// Kept-alive HTTP/1.1 to the sidecar, over TCP or a Unix socket (clients/SPEC.md, section 1).
import http from 'node:http';
import { errorFromResponse, NoSidecarError, ProtocolError } from './errors.js';

export const DEFAULT_URL = 'http://127.0.0.1:7070';

/**
 * Where the sidecar is: explicit options first, then KUBEFLAKE_SOCKET (set and not
 * empty), then KUBEFLAKE_URL, then DEFAULT_URL. A socket, once chosen, is the only transport.
 * @param {{url?: string, socket?: string}} options
 * @param {Record<string, string | undefined>} env
 * @returns {{socket: string} | {host: string, port: number}}
 */
export function resolveEndpoint(options, env = process.env) {
  if (options.socket) return { socket: options.socket };
  let raw = options.url;
  if (!raw) {
    if (env.KUBEFLAKE_SOCKET) return { socket: env.KUBEFLAKE_SOCKET };
    raw = env.KUBEFLAKE_URL || DEFAULT_URL;
  }
  let url;
  try {
    url = new URL(raw);
  } catch {
    url = null;
  }
  if (!url || url.protocol !== 'http:' || !url.hostname || (url.pathname !== '/' && url.pathname !== '')
      || url.search || url.username) {
    throw new TypeError(`kubeflake: KUBEFLAKE_URL must look like ${DEFAULT_URL}, not ${JSON.stringify(raw)} `
      + '(the sidecar speaks plain HTTP on loopback)');
  }
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  return { host, port: url.port ? Number(url.port) : 80 };
}

export class Transport {
  /**
   * @param {{socket: string} | {host: string, port: number}} endpoint
   * @param {number} requestTimeoutMs
   */
  constructor(endpoint, requestTimeoutMs) {
    this.endpoint = endpoint;
    this.requestTimeoutMs = requestTimeoutMs;
    // A small pool of kept connections; no proxy is ever used (the sidecar is on loopback).
    this.agent = new http.Agent({ keepAlive: true, maxSockets: 16, maxFreeSockets: 16, scheduling: 'lifo' });
    this.where = 'socket' in endpoint ? `unix:${endpoint.socket}` : `http://${endpoint.host}:${endpoint.port}`;
  }

  get kind() { return 'socket' in this.endpoint ? 'unix' : 'tcp'; }

  /**
   * One GET; resolves with the status, body and Retry-After of the answer. A kept
   * connection the sidecar closed meanwhile is retried once at once on a new one.
   * @param {string} path
   * @param {number} timeoutMs
   * @param {boolean} [bytes] the body as a Buffer, not decoded into a string
   * @returns {Promise<{status: number, body: any, retryAfter: string | undefined}>}
   */
  async exchange(path, timeoutMs = this.requestTimeoutMs, bytes = false) {
    try {
      return await this.#once(path, timeoutMs, bytes);
    } catch (err) {
      if (err?.reusedSocket && (err.code === 'ECONNRESET' || err.code === 'EPIPE')) return this.#once(path, timeoutMs, bytes);
      throw err;
    }
  }

  #once(path, timeoutMs, bytes) {
    return new Promise((resolve, reject) => {
      const headers = 'socket' in this.endpoint ? { accept: 'text/plain', host: 'kubeflake' } : { accept: 'text/plain' };
      const options = { ...this.#target(), path, method: 'GET', agent: this.agent, headers };
      let settled = false;
      const fail = (err) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(err);
      };
      const req = http.request(options, (res) => {
        const chunks = [];
        if (!bytes) res.setEncoding('utf8');
        res.on('data', (chunk) => chunks.push(chunk));
        res.on('error', (cause) => fail(this.#broke(path, cause)));
        res.on('aborted', () => fail(this.#broke(path, new Error('aborted'))));
        res.on('end', () => {
          if (settled) return;
          if (!res.complete) return fail(this.#broke(path, new Error('incomplete answer')));
          settled = true;
          clearTimeout(timer);
          resolve({ status: res.statusCode ?? 0, body: bytes ? Buffer.concat(chunks) : chunks.join(''), retryAfter: res.headers['retry-after'] });
        });
      });
      const timer = setTimeout(() => {
        const err = new NoSidecarError(`no answer from the kubeflake sidecar at ${this.where} to ${path} within ${timeoutMs} ms (requestTimeout)`);
        fail(err);
        req.destroy(err);
      }, Math.max(1, timeoutMs));
      req.on('error', (cause) => {
        if (settled) return;
        const err = new NoSidecarError(`no kubeflake sidecar answered at ${this.where}; check KUBEFLAKE_SOCKET / KUBEFLAKE_URL and that the sidecar runs`, { cause });
        Object.assign(err, { reusedSocket: req.reusedSocket, code: cause?.code });
        fail(err);
      });
      req.end();
    });
  }

  #target() {
    return 'socket' in this.endpoint ? { socketPath: this.endpoint.socket } : { host: this.endpoint.host, port: this.endpoint.port };
  }

  #broke(path, cause) {
    return new NoSidecarError(`the answer of the sidecar at ${this.where} to ${path} broke off`, { cause });
  }

  /**
   * GET that must answer 200; any other answer is a typed error.
   * @param {string} path
   * @param {number} [timeoutMs]
   */
  async get(path, timeoutMs) {
    const answer = await this.exchange(path, timeoutMs);
    if (answer.status !== 200) throw errorFromResponse(answer.status, answer.body, answer.retryAfter, path);
    return answer.body;
  }

  /**
   * IDs from /id or /ids: the whole answer or an error, never a part.
   * @param {string} path
   * @param {number} [timeoutMs]
   * @returns {Promise<bigint[]>}
   */
  async ids(path, timeoutMs) {
    return parseIDs(await this.get(path, timeoutMs), path);
  }

  /**
   * IDs from /ids as runs of consecutive values (parseIDRuns): what the buffer holds.
   * @param {string} path
   * @param {number} [timeoutMs]
   * @returns {Promise<{first: bigint, count: number}[]>}
   */
  async idRuns(path, timeoutMs) {
    const answer = await this.exchange(path, timeoutMs, true);
    if (answer.status !== 200) throw errorFromResponse(answer.status, answer.body.toString('utf8'), answer.retryAfter, path);
    return parseIDRuns(answer.body, path);
  }

  /**
   * A segment range from /range?count=N: `{first, count}` for the values first to
   * first + count - 1; null when the sidecar has no /range (a 404: a 0.1.0 sidecar).
   * @param {number} size
   * @param {number} [timeoutMs]
   * @returns {Promise<{first: bigint, count: number} | null>}
   */
  async range(size, timeoutMs) {
    const path = `/range?count=${size}`;
    const answer = await this.exchange(path, timeoutMs);
    if (answer.status === 404) return null;
    if (answer.status !== 200) throw errorFromResponse(answer.status, answer.body, answer.retryAfter, path);
    return parseRange(answer.body, size, path);
  }

  close() { this.agent.destroy(); }
}

/**
 * A /range answer, `{"first":"F","count":n}` with 1 <= n <= asked and F + n - 1 below 2^63;
 * anything else is a ProtocolError.
 * @param {string} body
 * @param {number} asked
 * @param {string} path
 */
export function parseRange(body, asked, path) {
  let doc;
  try { doc = JSON.parse(body); } catch { doc = null; }
  const first = doc?.first;
  const count = doc?.count;
  if (typeof first !== 'string' || !DECIMAL.test(first) || !Number.isInteger(count) || count < 1 || count > asked) {
    throw new ProtocolError(`${path}: the answer is not {"first":"F","count":n} with 1 <= n <= ${asked}`);
  }
  const start = BigInt(first);
  if (start + BigInt(count) - 1n > MAX_ID) throw new ProtocolError(`${path}: the range from ${first} of ${count} values passes 2^63-1`);
  return { first: start, count };
}

const MAX_ID = (1n << 63n) - 1n;
const DECIMAL = /^[0-9]{1,19}$/;

/**
 * Decimal IDs, one per line.
 * @param {string} body
 * @param {string} path
 * @returns {bigint[]}
 */
export function parseIDs(body, path) {
  const ids = [];
  for (const line of body.split('\n')) {
    if (line === '') continue;
    const id = DECIMAL.test(line) ? BigInt(line) : -1n;
    if (id < 0n || id > MAX_ID) throw new ProtocolError(`${path}: the answer is not decimal IDs below 2^63, one per line`);
    ids.push(id);
  }
  if (ids.length === 0) throw new ProtocolError(`${path}: the answer holds no ID`);
  return ids;
}

/**
 * Decimal IDs, one per line, as runs of consecutive values: `{first, count}` stands for
 * first, first + 1, ... first + count - 1, in the answer's order. The same IDs as parseIDs
 * and the same errors, but read from the answer's bytes (no text decoded) and a BigInt
 * made per run, not per line (most of a Snowflake batch's lines are the previous plus one:
 * one run per millisecond). A line continues the run when it has the previous line's
 * length and all but its last 9 digits, and those 9 digits read one more (no carry is
 * possible below 10^9, so the whole value is one more). Every byte is checked to be a
 * digit on the way: a run's first line in full, the next ones' last 9 (the rest equals
 * the previous line's). A line that does not continue the run starts a new one, even
 * if it is the previous value plus one in another length (999 then 1000): the same IDs.
 * @param {Buffer} bytes
 * @param {string} path
 * @returns {{first: bigint, count: number}[]}
 */
export function parseIDRuns(bytes, path) {
  const bad = () => new ProtocolError(`${path}: the answer is not decimal IDs below 2^63, one per line`);
  const runs = [];
  let run = null;
  let prevStart = 0;
  let prevLength = 0;
  let prevLow = -2;
  for (let start = 0, end = 0; start < bytes.length; start = end + 1) {
    // Most lines continue the run: try the previous line's length first, without a scan.
    end = start + prevLength;
    if (run !== null && (end === bytes.length || bytes[end] === 10)) {
      const cut = end - Math.min(prevLength, 9);
      let low = 0;
      for (let i = cut; i < end && low >= 0; i++) {
        const digit = bytes[i] - 48;
        low = digit < 0 || digit > 9 ? -1 : low * 10 + digit;
      }
      let same = low === prevLow + 1;
      for (let i = 0; same && i < cut - start; i++) same = bytes[start + i] === bytes[prevStart + i];
      if (same) {
        run.count++;
        prevStart = start;
        prevLow = low;
        continue;
      }
    }
    end = start;
    while (end < bytes.length && bytes[end] !== 10) end++;
    const length = end - start;
    if (length > 19) throw bad();
    if (length === 0) continue;
    for (let i = start; i < end; i++) if (bytes[i] < 48 || bytes[i] > 57) throw bad();
    const cut = end - Math.min(length, 9);
    let low = 0;
    for (let i = cut; i < end; i++) low = low * 10 + bytes[i] - 48;
    runs.push(run = { first: BigInt(bytes.toString('latin1', start, end)), count: 1 });
    prevStart = start;
    prevLength = length;
    prevLow = low;
  }
  if (runs.length === 0) throw new ProtocolError(`${path}: the answer holds no ID`);
  for (const r of runs) if (r.first + BigInt(r.count - 1) > MAX_ID) throw bad();
  return runs;
}

/**
 * JSON whose long integers stay exact: integers of 16 digits or more become strings.
 * @param {string} text
 */
export function parseJSONExact(text) {
  return JSON.parse(text.replace(/([:\[,]\s*)(-?\d{16,})(?=\s*[,}\]])/g, '$1"$2"'));
}
