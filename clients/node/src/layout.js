// A sequence's bit layout, read once from the sidecar (clients/SPEC.md, section 6), and the
// local decode and compose it allows.

/** @param {bigint | number | string} value @param {string} what */
export function toBigInt(value, what = 'id') {
  if (typeof value === 'bigint') return value;
  if (typeof value === 'number' && Number.isSafeInteger(value)) return BigInt(value);
  if (typeof value === 'string' && /^[0-9]{1,19}$/.test(value)) return BigInt(value);
  throw new TypeError(`kubeflake: ${what} must be a bigint, a safe integer or a decimal string, got ${typeof value} ${String(value)}`);
}

export class Layout {
  /**
   * @param {{totalBits: number, timestampBits: number, datacenterBits: number, workerBits: number,
   *   sequenceBits: number, epoch: Date, timeUnitMs: number}} fields
   */
  constructor(fields) {
    this.totalBits = fields.totalBits;
    this.timestampBits = fields.timestampBits;
    this.datacenterBits = fields.datacenterBits;
    this.workerBits = fields.workerBits;
    this.sequenceBits = fields.sequenceBits;
    this.epoch = fields.epoch;
    this.timeUnitMs = fields.timeUnitMs;
    Object.freeze(this);
  }

  get #workerShift() { return BigInt(this.sequenceBits); }
  get #datacenterShift() { return BigInt(this.sequenceBits + this.workerBits); }
  get #tickShift() { return BigInt(this.sequenceBits + this.workerBits + this.datacenterBits); }

  /**
   * An ID's fields.
   * @param {bigint | number | string} value
   */
  decode(value) {
    const id = toBigInt(value);
    if (id < 0n || id >= 1n << BigInt(this.totalBits)) {
      throw new RangeError(`kubeflake: ${id} is not an ID of this layout: IDs are below 2^${this.totalBits}`);
    }
    const field = (shift, width) => (id >> shift) & ((1n << BigInt(width)) - 1n);
    const tick = field(this.#tickShift, this.timestampBits);
    const timeMs = this.epoch.getTime() + Number(tick) * this.timeUnitMs;
    return {
      id,
      tick,
      datacenter: Number(field(this.#datacenterShift, this.datacenterBits)),
      worker: Number(field(this.#workerShift, this.workerBits)),
      sequence: Number(field(0n, this.sequenceBits)),
      time: new Date(timeMs),
    };
  }

  /**
   * The ID with these fields; a RangeError names a field too wide for its bits.
   * @param {{tick: bigint | number, datacenter?: bigint | number, worker?: bigint | number, sequence?: bigint | number}} parts
   */
  compose({ tick, datacenter = 0, worker = 0, sequence = 0 }) {
    const fields = [['tick', tick, this.timestampBits], ['datacenter', datacenter, this.datacenterBits],
      ['worker', worker, this.workerBits], ['sequence', sequence, this.sequenceBits]];
    const [t, d, w, s] = fields.map(([name, value, width]) => {
      const v = toBigInt(value, name);
      if (v < 0n || v >= 1n << BigInt(width)) throw new RangeError(`kubeflake: ${name}=${v} does not fit the layout's ${width} bits`);
      return v;
    });
    return (t << this.#tickShift) | (d << this.#datacenterShift) | (w << this.#workerShift) | s;
  }

  /**
   * The tick a time falls in: compose({tick: tickAt(t)}) is the smallest ID of that tick,
   * for range queries by time.
   * @param {Date | number} time
   */
  tickAt(time) {
    const ms = typeof time === 'number' ? time : time.getTime();
    const since = ms - this.epoch.getTime();
    return since <= 0 ? 0n : BigInt(Math.floor(since / this.timeUnitMs));
  }
}

const isMask = (v) => v >= 0n && (v & (v + 1n)) === 0n;
const bitLength = (v) => v.toString(2).replace(/^0+/, '').length;

/**
 * A layout from /decode of 0, of the largest ID and of the lowest tick bit; null for a
 * layout with a key form (docs/layouts.md), whose fields are stored in other numbers.
 */
export function layoutFromDecodes(zero, largest, totalBits, oneTick) {
  if (largest.key !== undefined || largest.shard !== undefined) return null;
  const widths = [];
  for (const name of ['tick', 'datacenter', 'worker', 'sequence']) {
    let v;
    try { v = BigInt(largest[name]); } catch { return null; }
    if (!isMask(v)) return null; // not 2^k - 1: a rotated or reversed field
    widths.push(bitLength(v));
  }
  if (widths.reduce((a, b) => a + b, 0) !== totalBits) return null;
  const epoch = Date.parse(zero.time);
  const next = Date.parse(oneTick.time);
  if (!Number.isFinite(epoch) || !Number.isFinite(next) || String(oneTick.tick) !== '1' || next <= epoch) return null;
  return new Layout({ totalBits, timestampBits: widths[0], datacenterBits: widths[1], workerBits: widths[2],
    sequenceBits: widths[3], epoch: new Date(epoch), timeUnitMs: next - epoch });
}
