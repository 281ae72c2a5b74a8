// Typed errors, one class per kind of clients/SPEC.md, section 3. `err.kind` carries the
// same names as every other kubeflake client; `instanceof RefusedError` matches every
// refusal (clock behind, slot lost, exhausted and the others), as Go's ErrRefused does.

/** Every error the client raises about the sidecar. */
export class KubeflakeError extends Error {
  /**
   * @param {string} kind
   * @param {string} message
   * @param {{status?: number, reason?: string, retryAfterMs?: number, cause?: unknown}} [details]
   */
  constructor(kind, message, details = {}) {
    super(`kubeflake: ${message}${details.reason ? ` (reason ${details.reason})` : ''}`,
      details.cause === undefined ? undefined : { cause: details.cause });
    this.name = new.target.name;
    this.kind = kind;
    this.status = details.status ?? 0;
    this.reason = details.reason ?? '';
    this.retryAfterMs = details.retryAfterMs ?? 0;
  }

  /** Whether asking again later may succeed with nothing changed by the caller. */
  get retryable() {
    return false;
  }
}

/** 400: the request is wrong; the message says what to fix. */
export class BadRequestError extends KubeflakeError {
  constructor(message, details) { super('bad_request', message, details); }
}

/** 503 or 409: not now. The base of every refusal; this class itself is kind `refused`. */
export class RefusedError extends KubeflakeError {
  constructor(message, details, kind = 'refused') { super(kind, message, details); }
  get retryable() { return true; }
}

/** The sidecar's clock is behind what it must issue; clears by itself. */
export class ClockBehindError extends RefusedError {
  constructor(message, details) { super(message, details, 'clock_behind'); }
}

/** The sidecar holds no worker slot (waiting for one, lost it, stopping). */
export class SlotLostError extends RefusedError {
  constructor(message, details) { super(message, details, 'slot_lost'); }
}

/** The sequence can issue no more: waiting does not help. */
export class ExhaustedError extends RefusedError {
  constructor(message, details) { super(message, details, 'exhausted'); }
  get retryable() { return false; }
}

/** Nothing answered: connection refused, no socket, or no answer within requestTimeout. */
export class NoSidecarError extends KubeflakeError {
  constructor(message, details) { super('no_sidecar', message, details); }
  get retryable() { return true; }
}

/** An answer the sidecar's API does not promise (another server on the port, a proxy). */
export class ProtocolError extends KubeflakeError {
  constructor(message, details) { super('protocol', message, details); }
}

const byReason = new Map([
  ['ahead_of_clock', ClockBehindError], ['clock_before_epoch', ClockBehindError], ['after_ahead_of_clock', ClockBehindError],
  ['no_slot', SlotLostError], ['stopped', SlotLostError], ['stopping', SlotLostError],
  ['timestamp_exhausted', ExhaustedError], ['exhausted', ExhaustedError], ['after_above_counter', ExhaustedError],
]);

/**
 * Types a non-200 answer to `path`.
 * @param {number} status
 * @param {string} body
 * @param {string | undefined} retryAfter the Retry-After header
 * @param {string} path
 * @returns {KubeflakeError}
 */
export function errorFromResponse(status, body, retryAfter, path) {
  let doc = {};
  try {
    const parsed = JSON.parse(body);
    if (parsed && typeof parsed === 'object') doc = parsed;
  } catch { /* not JSON: the text is the message */ }
  const text = (typeof doc.error === 'string' && doc.error) || body.trim() || `HTTP ${status}`;
  const reason = typeof doc.reason === 'string' ? doc.reason : '';
  if (status === 400) return new BadRequestError(`${path}: ${text}`, { status });
  if (status === 409 || status === 503) {
    const seconds = Number.parseFloat(retryAfter ?? '');
    const retryAfterMs = Number.isFinite(seconds) && seconds >= 0 ? Math.round(seconds * 1000) : 0;
    const Kind = byReason.get(reason) ?? RefusedError;
    return new Kind(`${path}: ${text}`, { status, reason, retryAfterMs });
  }
  return new ProtocolError(`${path}: unexpected HTTP ${status}: ${text}`, { status });
}
