// clients/SPEC.md, "a safe distance" and "Snowflake refills keep a safe distance too, bounded
// by the age": src/pace.js, pure, with the clock given (the Go client's pace_test.go and
// snowflake_pace_test.go, the Java client's RangePacingTest and SnowflakePacingTest, with the
// same figures; times in ms).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CALM_REFILLS, MAX_DISTANCE, MIN_DISTANCE, Pace, RANGES_AHEAD } from '../src/pace.js';

const T0 = 1_000_000;

test('a wait doubles the safe distance once per empty buffer, up to its bound; calm refills halve it', () => {
  const p = new Pace();
  p.waited();
  assert.equal(p.distance, MIN_DISTANCE, 'a wait before the rate is measured is the start, not a spread');
  p.arrived(T0, 1, 0);
  p.arrived(T0 + 1000, 1, 10_000_000); // 10M values/s, refills of 1 ms
  assert.equal(p.lowWater(64, 1_000_000), 20_000, '2 x 1 ms x 10M/s');
  p.waited();
  p.waited(); // another caller on the same empty buffer
  assert.equal(p.lowWater(64, 1_000_000), 40_000, '4 x 1 ms x 10M/s: once per empty buffer');
  for (let i = 0; i < 10; i++) {
    p.arrived(T0 + 2000 + i, 1, 10_000_000 + 10_000 * (i + 1));
    p.waited();
  }
  assert.equal(p.distance, MAX_DISTANCE);
  for (let i = 0; i < CALM_REFILLS; i++) p.arrived(T0 + 3000 + i, 1, 20_000_000);
  assert.equal(p.distance, MAX_DISTANCE / 2, 'calm refills halve it');
});

test('the rate leaves out the time the buffer was empty, and falls a quarter of the way', () => {
  const p = new Pace();
  p.arrived(T0, 1, 0);
  p.arrived(T0 + 100, 1, 1_000_000);
  assert.equal(p.ratePerMs, 10_000, '1M values in 100 ms');
  // 1M values in the next 100 ms, 90 of which the callers waited: 100M values/s while served.
  p.arrived(T0 + 200, 1, 2_000_000, 90);
  assert.equal(p.ratePerMs, 100_000, 'a higher rate is taken at once');
  p.arrived(T0 + 300, 1, 2_000_000);
  assert.equal(p.ratePerMs, 75_000, 'a quiet interval lowers it a quarter of the way');
});

test('the mark covers the slowest recent refill, which halves every ten seconds', () => {
  const p = new Pace();
  p.arrived(T0, 1, 0);
  p.arrived(T0 + 100, 1, 1_000_000); // 10M values/s, refills of 1 ms
  assert.equal(p.lowWater(64, 100_000_000), 20_000);
  p.arrived(T0 + 200, 30, 2_000_000);
  assert.equal(p.lowWater(64, 100_000_000), 600_000, 'one refill of 30 ms: 2 x 30 ms x 10M/s (not the mean)');
  p.arrived(T0 + 10_200, 1, 102_000_000); // 10 s later, still 10M values/s
  assert.equal(p.lowWater(64, 100_000_000), 300_000, '10 s on, half of it');
});

/** Refills of `tookMs`, 3,690,000 IDs/s between them. */
function measuredSnowflake(tookMs) {
  const p = new Pace();
  p.arrived(T0, tookMs, 0);
  p.arrived(T0 + 100, tookMs, 369_000);
  return p;
}

/** The Snowflake mark for batches of 10,000 and the default ceiling (8 batches). */
const snowflakeMark = (p, maxAgeMs) => p.snowflakeLowWater(10_000, RANGES_AHEAD * 10_000, maxAgeMs);

test('the Snowflake mark is half a batch until the rate is measured', () => {
  const p = new Pace();
  p.arrived(T0, 5, 0);
  assert.equal(snowflakeMark(p, 1000), 5_000);
});

test('the Snowflake mark covers two slowest refills at the rate, up to eight batches', () => {
  assert.equal(snowflakeMark(measuredSnowflake(5), 1000), 36_900, '2 x 5 ms x 3.69M/s, not half a batch');
  assert.equal(snowflakeMark(measuredSnowflake(50), 1000), 80_000, 'at most 8 batches');
});

test('the Snowflake mark never holds more than half of maxAgeMs at the rate, less a batch', () => {
  const p = measuredSnowflake(5);
  for (const [maxAgeMs, want, why] of [
    [20, 26_900, '3.69M/s x 10 ms, less a batch'],
    [10, 8_450, '3.69M/s x 5 ms, less a batch'],
    [5, 5_000, 'half a batch when maxAgeMs leaves no room (9,225 - 10,000)'],
    [0, 36_900, 'no maxAgeMs (<= 0: forever): no bound but 8 batches'],
  ]) assert.equal(snowflakeMark(p, maxAgeMs), want, `maxAgeMs ${maxAgeMs}: ${why}`);
});

test('a Snowflake wait doubles the distance within maxAgeMs', () => {
  const p = measuredSnowflake(5);
  p.waited();
  assert.equal(p.distance, 4);
  assert.equal(snowflakeMark(p, 1000), 73_800, '4 x 5 ms x 3.69M/s');
  assert.equal(snowflakeMark(p, 20), 26_900, 'still within half of maxAgeMs');
});
