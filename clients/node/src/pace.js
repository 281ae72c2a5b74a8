// When a segment buffer refills (clients/SPEC.md, "Range refills are sized and timed so that
// no caller waits"): the refills' mean duration and the rate at which values leave the
// buffer set the low-water mark, so that a refill asked at it arrives while about one
// refill's worth of values is still left.

export class Pace {
  /** Exponential mean of successful refills' durations, in ms (weight 1/4 to the newest); -1 until one. */
  refillMs = -1;
  /** Values handed out per ms between the last two arrivals. */
  ratePerMs = 0;
  #lastAt = -1;
  #lastHandedOut = 0;

  /**
   * A refill that took `tookMs` arrived at `nowMs`, when `handedOut` values had left the
   * buffer in all.
   */
  arrived(nowMs, tookMs, handedOut) {
    this.refillMs = this.refillMs < 0 ? tookMs : this.refillMs + (tookMs - this.refillMs) / 4;
    if (this.#lastAt >= 0 && nowMs > this.#lastAt) this.ratePerMs = (handedOut - this.#lastHandedOut) / (nowMs - this.#lastAt);
    this.#lastAt = nowMs;
    this.#lastHandedOut = handedOut;
  }

  /** max(batch / 2, ceil(2 x refill time x rate)), at most `ceiling`. */
  lowWater(batch, ceiling) {
    const need = Math.ceil(2 * Math.max(0, this.refillMs) * this.ratePerMs);
    return Math.min(Math.max(batch >> 1, Math.min(need, ceiling)), ceiling);
  }
}
