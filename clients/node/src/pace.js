// When a buffer refills (clients/SPEC.md, "Range refills are sized and timed so that no caller
// waits", "a safe distance", and "Snowflake refills keep a safe distance too, bounded by the
// age"), as the Java client's RefillPace and the Go client's pace: pure, the clock given by
// the caller (ms, performance.now() in the client).
//
// The low-water mark covers `distance` times the slowest recent refill at the rate values
// leave the buffer: a refill asked at the mark arrives, were it as slow as that one, while
// about distance - 1 such refills' worth of values is still left. The refills' spread, not
// their mean, empties a buffer (docs/notes/bench-2026-11-30-java-segment-refill.md).

export const MIN_DISTANCE = 2;
export const MAX_DISTANCE = 16;
/** Refills in a row without a wait that halve the distance. */
export const CALM_REFILLS = 1000;
/** The slowest recent refill halves every this many ms. */
export const SLOW_HALF_LIFE_MS = 10_000;
/** The mark is at most this many refill ceilings, so that several ranges may be queued. */
export const RANGES_AHEAD = 8;

const half = (n) => Math.floor(n / 2);

export class Pace {
  /** Exponential mean of successful refills' durations, in ms (weight 1/4 to the newest). */
  refillMs = 0;
  /** The slowest recent refill, in ms: a longer one is taken at once, and it halves every SLOW_HALF_LIFE_MS. */
  slowMs = 0;
  /** Values handed out per ms, the time the buffer was empty left out. */
  ratePerMs = 0;
  /** The mark, in slowest recent refills at the rate. */
  distance = MIN_DISTANCE;
  #lastAt = 0;
  #lastHandedOut = 0;
  #arrivals = 0; // up to 2: the rate is measured from the second
  #calm = 0; // refills since the last wait
  #hungry = false; // a caller waited since the last arrival

  /**
   * A refill that took `tookMs` arrived at `nowMs`, when `handedOut` values had left the
   * buffer in all, and the buffer had been empty (callers waiting) for the last `emptyMs` of
   * the interval since the previous arrival. The rate is measured over the rest of it: while
   * callers wait, values leave at the sidecar's pace, not the demand's, and a rate measured
   * then would lower the mark just when it proved too low. A higher rate is taken at once, a
   * lower one a quarter of the way.
   */
  arrived(nowMs, tookMs, handedOut, emptyMs = 0) {
    if (this.#arrivals === 0) {
      this.refillMs = tookMs;
      this.slowMs = tookMs;
    } else {
      this.refillMs += (tookMs - this.refillMs) / 4;
      this.slowMs = Math.max(tookMs, this.slowMs * 0.5 ** ((nowMs - this.#lastAt) / SLOW_HALF_LIFE_MS));
      const busy = nowMs - this.#lastAt - emptyMs;
      if (busy > 0) {
        const sample = (handedOut - this.#lastHandedOut) / busy;
        this.ratePerMs = sample >= this.ratePerMs ? sample : this.ratePerMs + (sample - this.ratePerMs) / 4;
      }
    }
    this.#arrivals = Math.min(this.#arrivals + 1, 2);
    this.#lastAt = nowMs;
    this.#lastHandedOut = handedOut;
    this.#hungry = false;
    if (++this.#calm >= CALM_REFILLS) {
      this.#calm = 0;
      this.distance = Math.max(MIN_DISTANCE, half(this.distance));
    }
  }

  /**
   * A caller found the buffer empty: the mark was too low for the refills' spread. Doubles
   * the distance once per empty buffer (however many callers wait), once the rate is
   * measured (the first refills' waits are the start, not a spread).
   */
  waited() {
    if (this.#hungry || this.#arrivals < 2) return;
    this.#hungry = true;
    this.#calm = 0;
    this.distance = Math.min(MAX_DISTANCE, this.distance * 2);
  }

  /** max(batch / 2, ceil(distance x slowest recent refill x rate)), at most `ceiling`. */
  lowWater(batch, ceiling) {
    const need = Math.ceil(this.distance * this.slowMs * this.ratePerMs);
    return Math.min(Math.max(half(batch), Math.min(need, ceiling)), ceiling);
  }

  /**
   * A Snowflake buffer's mark: lowWater's, but Snowflake IDs age, so with a `maxAgeMs` (<= 0:
   * forever) at most what the rate hands out in half of it, less a batch (an ID asked at the
   * mark then leaves the buffer within maxAgeMs / 2 at that rate instead of expiring); never
   * below half a batch (so half a batch until the rate is measured, and when maxAgeMs leaves
   * no room).
   */
  snowflakeLowWater(batch, ceiling, maxAgeMs) {
    let bound = ceiling;
    if (maxAgeMs > 0) bound = Math.min(bound, Math.floor((this.ratePerMs * maxAgeMs) / 2) - batch);
    if (bound <= half(batch)) return half(batch);
    return this.lowWater(batch, bound);
  }
}
