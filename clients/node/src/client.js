// The client: IDs from a prefetch buffer refilled in the background (clients/SPEC.md).
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { KubeflakeError, NoSidecarError, ProtocolError, SlotLostError } from './errors.js';
import { layoutFromDecodes, toBigInt } from './layout.js';
import { Pace, RANGES_AHEAD } from './pace.js';
import { parseJSONExact, resolveEndpoint, Transport } from './transport.js';

const DEFAULTS = Object.freeze({
  prefetch: true, maxAgeMs: 1000, maxWaitMs: 5000, requestTimeoutMs: 2000, minBatch: 64, maxBatch: 10000, maxRange: 1000000, refillPeriodMs: 100,
});
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** 50 ms doubling to 1 s, after a failure that named no Retry-After. */
const backoff = (previous) => (previous <= 0 ? 50 : Math.min(previous * 2, 1000));
const now = () => performance.now();

/** A promise resolved by the next `resolve()`, then replaced: wakes every waiter at once. */
class Signal {
  constructor() { this.#arm(); }
  #arm() { this.promise = new Promise((resolve) => { this.resolve = resolve; }); }
  fire() { const resolve = this.resolve; this.#arm(); resolve(); }
}

function checkSettings(s) {
  for (const name of ['maxWaitMs', 'requestTimeoutMs', 'refillPeriodMs']) {
    if (!Number.isFinite(s[name]) || s[name] < 0) throw new RangeError(`kubeflake: ${name} must be a number of milliseconds >= 0, got ${s[name]}`);
  }
  if (!Number.isInteger(s.minBatch) || !Number.isInteger(s.maxBatch) || s.minBatch < 1 || s.minBatch > s.maxBatch) {
    throw new RangeError(`kubeflake: need whole numbers 1 <= minBatch <= maxBatch, got ${s.minBatch} and ${s.maxBatch}`);
  }
  if (!Number.isInteger(s.maxRange) || s.maxRange < s.minBatch) throw new RangeError(`kubeflake: need a whole number maxRange >= minBatch, got ${s.maxRange}`);
  if (typeof s.maxAgeMs !== 'number' || Number.isNaN(s.maxAgeMs)) throw new RangeError('kubeflake: maxAgeMs must be a number (<= 0: no limit)');
}

export class Client {
  #s;
  #http;
  // Batches in the order their answers arrived, each runs of consecutive values (a range is
  // one run): {until (when its Snowflake IDs expire: sent + maxAgeMs), runs, run (the index
  // of the one served), next, left (in it), remaining}.
  #queue = [];
  #depth = 0;
  #batchSize;
  #maxBatch;
  #maxRange;
  #noRanges = false; // the sidecar answered 404 to /range (0.1.0): refills ask /ids
  #pace = new Pace();
  #low; // refill when #depth is at or below it
  #emptySince = -1; // a caller found the buffer empty since the last refill arrived; -1: not
  #refilling = false;
  #taken = 0;
  #refillErr = null;
  #retryAt = 0;
  #lastRefill = -1;
  #filled = new Signal();
  #closed = false;
  #closing = new AbortController();
  #mode = '';
  #modeRead = null;
  #layout = undefined;
  #layoutRead = null;
  #stats = { ids: 0, refills: 0, refillSeconds: 0, refillErrors: 0, waits: 0, waitSeconds: 0, expired: 0, direct: 0, errors: {} };

  /**
   * Makes a client; it does not contact the sidecar until asked for an ID.
   * @param {import('./index.js').Options} [options]
   */
  constructor(options = {}) {
    const s = { ...DEFAULTS };
    for (const [k, v] of Object.entries(options)) if (v !== undefined) s[k] = v;
    checkSettings(s);
    this.#s = s;
    this.#http = new Transport(resolveEndpoint(s), s.requestTimeoutMs);
    this.#batchSize = s.minBatch;
    this.#maxBatch = s.maxBatch;
    this.#maxRange = s.maxRange;
    this.#low = s.minBatch >> 1;
  }

  /** How the client reaches the sidecar: "unix" or "tcp". */
  get transport() { return this.#http.kind; }

  /**
   * The next ID: from the buffer, or from the sidecar for a strict sequence or with
   * prefetch off. Waits at most maxWaitMs.
   * @returns {Promise<bigint>}
   */
  async next() {
    // The steady state: a mode known, an ID buffered, no await before it is taken.
    if (this.#mode === 'snowflake' || this.#mode === 'segment') {
      const id = this.#take();
      if (id !== undefined) {
        // A caller taking IDs in a tight loop never lets the event loop read the refill's
        // answer (awaiting a settled promise runs no I/O): while a refill is out, every
        // 64th call yields once, so that the answer lands before the buffer runs dry.
        if (this.#refilling && ++this.#taken % 64 === 0) return new Promise((resolve) => { setImmediate(resolve, id); });
        return id;
      }
    }
    if (!this.#s.prefetch) return this.#direct('/id');
    if ((await this.mode().catch((err) => { throw this.#counted(err); })) === 'strict') return this.#direct('/id');
    return this.#fromBuffer();
  }

  /** The next ID as a decimal string. */
  async nextString() { return String(await this.next()); }

  /**
   * The next ID as a number: only for a 53-bit layout, whose every ID is a safe integer.
   * Any other sequence is refused with a RangeError (a number would lose precision).
   */
  async nextNumber() {
    const layout = await this.layout();
    if (!layout || layout.totalBits !== 53) {
      throw new RangeError(`kubeflake: nextNumber() needs a sequence with totalBits: 53; this one's IDs ${layout ? `have ${layout.totalBits} bits` : 'are not Snowflake IDs of a plain layout'} and lose precision as a number above 2^53: use next() (a bigint) or nextString()`);
    }
    const id = await this.next();
    if (id > MAX_SAFE) throw new ProtocolError(`an ID of a 53-bit sequence above 2^53: ${id}`);
    return Number(id);
  }

  /**
   * An ID greater than `after`, whichever pod issued `after`. Never from the buffer: a
   * buffered ID may be below it.
   * @param {bigint | number | string} after
   */
  async nextAfter(after) {
    const x = toBigInt(after, 'after');
    return this.#direct(`/id?after=${x}`);
  }

  /**
   * `count` IDs in increasing order in one request, not from the buffer.
   * @param {number} count
   */
  async nextBatch(count) {
    if (!Number.isInteger(count) || count < 1) throw new RangeError(`kubeflake: count must be a whole number >= 1, got ${count}`);
    return this.#retrying(`/ids?count=${count}`, (path, timeout) => this.#http.ids(path, timeout)).catch((err) => { throw this.#counted(err); });
  }

  #take() {
    const queue = this.#queue;
    while (queue.length > 0) {
      const head = queue[0];
      if (head.remaining === 0) {
        queue.shift();
        continue;
      }
      if (head.until !== Infinity && now() > head.until) {
        this.#stats.expired += head.remaining;
        this.#depth -= head.remaining;
        queue.shift();
        continue;
      }
      if (head.left === 0) {
        const run = head.runs[++head.run];
        head.next = run.first;
        head.left = run.count;
      }
      const id = head.next;
      head.next = id + 1n;
      head.left--;
      head.remaining--;
      this.#depth--;
      this.#stats.ids++;
      if (this.#depth <= this.#low) this.#wantRefill();
      return id;
    }
    return undefined;
  }

  async #fromBuffer() {
    let started = 0;
    let handle;
    let bound; // resolves when maxWaitMs is over
    try {
      for (;;) {
        const id = this.#take();
        if (id !== undefined) {
          if (started) this.#stats.waitSeconds += (now() - started) / 1000;
          return id;
        }
        if (this.#closed) throw new ProtocolError('the client is closed');
        const t = now();
        if (!started) {
          started = t;
          this.#stats.waits++;
          // The mark was too low for the refills' spread: a safe distance further ahead.
          this.#pace.waited();
          this.#low = this.#mark();
          if (this.#emptySince < 0) this.#emptySince = t;
        }
        this.#wantRefill();
        const deadline = started + this.#s.maxWaitMs;
        const err = this.#refillErr;
        if ((err && (!err.retryable || this.#retryAt > deadline)) || t >= deadline) {
          // Waiting cannot help, the sidecar asked to wait past the bound, or the bound is over.
          this.#stats.waitSeconds += (t - started) / 1000;
          throw this.#counted(err ?? new NoSidecarError(`no ID from the kubeflake sidecar at ${this.#http.where} within ${this.#s.maxWaitMs} ms (maxWaitMs)`));
        }
        bound ??= new Promise((resolve) => { handle = setTimeout(resolve, deadline - t); });
        await Promise.race([this.#filled.promise, bound]);
      }
    } finally {
      clearTimeout(handle);
    }
  }

  #wantRefill() {
    if (this.#refilling || this.#closed) return;
    this.#refilling = true;
    this.#refill().catch((cause) => { // not expected: #refill types every failure itself
      this.#refillErr = new ProtocolError(`the refiller failed: ${cause}`, { cause });
      this.#filled.fire();
    });
  }

  /**
   * The one refiller: one request at a time, batches appended in the order fetched (so
   * segment values leave the buffer in order); it keeps its own waits after a refusal.
   */
  async #refill() {
    try {
      let delay = 0;
      while (!this.#closed) {
        const ranges = this.#ranges();
        const size = Math.min(this.#batchSize, this.#ceiling());
        const sent = now();
        let runs;
        try {
          if (ranges) {
            const range = await this.#http.range(size);
            if (range === null) {
              this.#noRanges = true; // a 0.1.0 sidecar: /ids from now on
              continue;
            }
            runs = [range];
          } else {
            runs = await this.#http.idRuns(`/ids?count=${size}`);
          }
        } catch (caught) {
          if (this.#closed) return;
          const err = caught instanceof KubeflakeError ? caught : new ProtocolError(String(caught), { cause: caught });
          if (err.kind === 'bad_request' && size > 1) {
            // A sidecar with a smaller --max-batch (--max-range): ask for fewer.
            if (ranges) this.#maxRange = size >> 1;
            else this.#maxBatch = size >> 1;
            this.#batchSize = Math.min(this.#batchSize, this.#ceiling());
            continue;
          }
          this.#refillErr = err;
          this.#stats.refillErrors++;
          let wait = err.retryAfterMs;
          if (!wait) wait = delay = backoff(delay);
          this.#retryAt = now() + wait;
          this.#filled.fire();
          if (!err.retryable) return;
          try {
            await sleep(wait, undefined, { signal: this.#closing.signal, ref: false });
          } catch {
            return; // closed
          }
          continue;
        }
        if (this.#closed) return;
        const done = now();
        delay = 0;
        let count = 0;
        for (const run of runs) count += run.count;
        const until = this.#mode === 'snowflake' && this.#s.maxAgeMs > 0 ? sent + this.#s.maxAgeMs : Infinity;
        this.#queue.push({ until, runs, run: 0, next: runs[0].first, left: runs[0].count, remaining: count });
        this.#depth += count;
        this.#stats.refills++;
        this.#stats.refillSeconds += (done - sent) / 1000;
        this.#batchSize = this.#nextBatchSize(done);
        this.#lastRefill = done;
        const empty = this.#emptySince < 0 ? 0 : Math.max(0, done - this.#emptySince);
        this.#emptySince = -1;
        this.#pace.arrived(done, done - sent, this.#stats.ids, empty);
        if (this.#mode === 'segment') {
          // A range costs the same whatever its length: reach one refill period at the rate at
          // once, instead of doubling from minBatch.
          const perPeriod = Math.ceil(this.#pace.ratePerMs * this.#s.refillPeriodMs);
          this.#batchSize = Math.min(Math.max(this.#batchSize, perPeriod), this.#ceiling());
        }
        this.#low = this.#mark();
        this.#refillErr = null;
        this.#filled.fire();
        if (this.#depth > this.#low) return;
      }
    } finally {
      // Cleared in the same step as the loop's last look at the buffer, not in a `.finally` on
      // this promise a few microtasks later: an ask in between was lost, and a caller that
      // then found the buffer empty (the last batch older than maxAgeMs on arrival) waited
      // out maxWaitMs with no refill coming.
      this.#refilling = false;
    }
  }

  /**
   * The low-water mark (clients/SPEC.md): a safe distance ahead, up to RANGES_AHEAD refill
   * ceilings, and in Snowflake mode within maxAgeMs (Pace.snowflakeLowWater).
   */
  #mark() {
    const ceiling = RANGES_AHEAD * this.#ceiling();
    if (this.#mode === 'segment') return this.#pace.lowWater(this.#batchSize, ceiling);
    return this.#pace.snowflakeLowWater(this.#batchSize, ceiling, this.#s.maxAgeMs);
  }

  /** Refills ask /range: segment mode, unless the sidecar answered 404 to it. */
  #ranges() { return this.#mode === 'segment' && !this.#noRanges; }

  /** The largest refill: maxRange for a /range refill, else maxBatch. */
  #ceiling() { return this.#ranges() ? this.#maxRange : this.#maxBatch; }

  /** Leaf's rule: double when the last batch lasted under half the refill period, halve when it lasted over four. */
  #nextBatchSize(done) {
    let size = this.#batchSize;
    if (this.#lastRefill >= 0) {
      const lasted = done - this.#lastRefill;
      if (lasted < this.#s.refillPeriodMs / 2) size *= 2;
      else if (lasted > this.#s.refillPeriodMs * 4) size >>= 1;
    }
    return Math.min(Math.max(size, this.#s.minBatch), this.#ceiling());
  }

  async #direct(path) {
    this.#stats.direct++;
    try {
      const ids = await this.#retrying(path, (p, timeout) => this.#http.ids(p, timeout));
      return ids[0];
    } catch (err) {
      throw this.#counted(err);
    }
  }

  /**
   * Runs one request until it succeeds, fails for good, or maxWaitMs is over; waits
   * Retry-After between refusals, and gives up at once when that wait would pass the bound.
   * @template T
   * @param {string} path
   * @param {(path: string, timeoutMs: number) => Promise<T>} attempt
   * @returns {Promise<T>}
   */
  async #retrying(path, attempt) {
    const deadline = now() + this.#s.maxWaitMs;
    let delay = 0;
    for (;;) {
      if (this.#closed) throw new ProtocolError('the client is closed');
      const timeout = Math.max(1, Math.min(this.#s.requestTimeoutMs, deadline - now()));
      try {
        return await attempt(path, timeout);
      } catch (err) {
        if (!(err instanceof KubeflakeError) || !err.retryable) throw err;
        const wait = err.retryAfterMs || (delay = backoff(delay));
        if (now() + wait > deadline) throw err;
        await sleep(wait);
      }
    }
  }

  /**
   * "snowflake", "segment" or "strict": read once from the sidecar's /readyz.
   * @returns {Promise<'snowflake' | 'segment' | 'strict'>}
   */
  async mode() {
    if (this.#mode) return this.#mode;
    this.#modeRead ??= this.#retrying('/readyz', (path, timeout) => this.#readMode(path, timeout))
      .then((mode) => { this.#mode = mode; return mode; })
      .finally(() => { this.#modeRead = null; });
    return this.#modeRead;
  }

  async #readMode(path, timeout) {
    const answer = await this.#http.exchange(path, timeout);
    let doc;
    try {
      doc = JSON.parse(answer.body);
    } catch {
      throw new ProtocolError(`${path}: the answer is not JSON (HTTP ${answer.status})`, { status: answer.status });
    }
    if (doc.phase === 'snowflake') return 'snowflake';
    if (doc.phase === 'segment' && typeof doc.strict === 'boolean') return doc.strict ? 'strict' : 'segment';
    // It answers but cannot issue yet: in a pod, it waits for a worker slot.
    const seconds = Number.parseFloat(answer.retryAfter ?? '');
    throw new SlotLostError(`the kubeflake sidecar at ${this.#http.where} cannot issue yet: ${doc.error ?? `phase ${doc.phase}`} (it waits for a worker slot; see the pod's Events)`,
      { status: answer.status, reason: doc.reason || 'no_slot', retryAfterMs: Number.isFinite(seconds) ? seconds * 1000 : 0 });
  }

  async #decodeDoc(id) {
    const body = await this.#retrying(`/decode/${id}`, (path, timeout) => this.#http.get(path, timeout));
    try {
      return parseJSONExact(body);
    } catch {
      throw new ProtocolError(`/decode/${id}: the answer is not a JSON object`);
    }
  }

  /**
   * The sequence's layout, read once from the sidecar; null in segment mode and for
   * layouts with a key form, whose IDs decode() asks the sidecar about instead.
   * @returns {Promise<import('./layout.js').Layout | null>}
   */
  async layout() {
    if (this.#layout !== undefined) return this.#layout;
    this.#layoutRead ??= this.#readLayout()
      .then((layout) => { this.#layout = layout; return layout; })
      .finally(() => { this.#layoutRead = null; });
    return this.#layoutRead;
  }

  async #readLayout() {
    const zero = await this.#decodeDoc(0n);
    if (zero.mode === 'Segment') return null;
    for (const total of [63, 53]) {
      let largest;
      try {
        largest = await this.#decodeDoc((1n << BigInt(total)) - 1n);
      } catch (err) {
        if (err instanceof KubeflakeError && err.kind === 'bad_request') continue;
        throw err;
      }
      let tickWidth;
      try { tickWidth = BigInt(largest.tick).toString(2).length; } catch { return null; }
      const oneTick = await this.#decodeDoc(1n << BigInt(total - tickWidth));
      return layoutFromDecodes(zero, largest, total, oneTick);
    }
    return null;
  }

  /**
   * An ID's fields: locally from the layout, or by the sidecar's /decode for a layout with
   * a key form. Segment values carry no fields: a TypeError.
   * @param {bigint | number | string} value
   */
  async decode(value) {
    const id = toBigInt(value);
    const layout = await this.layout();
    if (layout) return layout.decode(id);
    const doc = await this.#decodeDoc(id);
    if (doc.mode === 'Segment') throw new TypeError(`kubeflake: ${id} is a segment value: it carries no fields`);
    return { id, tick: BigInt(doc.tick), datacenter: Number(doc.datacenter), worker: Number(doc.worker),
      sequence: Number(doc.sequence), time: new Date(doc.time) };
  }

  /**
   * The ID with these fields, from the layout (a plain Snowflake layout only).
   * @param {{tick: bigint | number, datacenter?: bigint | number, worker?: bigint | number, sequence?: bigint | number}} parts
   */
  async compose(parts) {
    const layout = await this.layout();
    if (!layout) throw new TypeError('kubeflake: compose needs a Snowflake sequence with a plain layout (not segment mode or a key form)');
    return layout.compose(parts);
  }

  /** The client's counters, named as in clients/SPEC.md, "Observability". */
  stats() {
    return { ...this.#stats, errors: { ...this.#stats.errors }, bufferDepth: this.#depth, batchSize: this.#batchSize };
  }

  #counted(err) {
    if (err instanceof KubeflakeError) this.#stats.errors[err.kind] = (this.#stats.errors[err.kind] ?? 0) + 1;
    return err;
  }

  /** Stops the refiller and closes the connections; buffered IDs are dropped (gaps, never reused). */
  close() {
    if (this.#closed) return;
    this.#closed = true;
    this.#closing.abort();
    this.#queue = [];
    this.#depth = 0;
    this.#filled.fire();
    this.#http.close();
  }

  [Symbol.dispose]() { this.close(); }
}

