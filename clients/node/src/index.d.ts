// Hand-written declarations of the public API; test/types.ts uses every one of them and
// test.sh checks it with tsc (--strict), and test/api.test.js checks that the module
// exports exactly these names.

/** Settings; every one optional, defaults as in clients/SPEC.md, section 7. */
export interface Options {
  /** `http://host:port`; overrides KUBEFLAKE_URL. */
  url?: string;
  /** A Unix socket path; overrides KUBEFLAKE_SOCKET. A socket is never replaced by TCP. */
  socket?: string;
  /** false: every next() is one request, nothing is buffered. Default true. */
  prefetch?: boolean;
  /** How long a buffered Snowflake ID may wait, in ms (default 1000; <= 0: no limit). */
  maxAgeMs?: number;
  /** The bound on one call, retries and waits included, in ms (default 5000). */
  maxWaitMs?: number;
  /** The bound on one HTTP exchange, in ms (default 2000). */
  requestTimeoutMs?: number;
  /** The refill size's range (defaults 64 and 10,000). */
  minBatch?: number;
  maxBatch?: number;
  /** The largest segment refill from /range (default 1,000,000, the sidecar's default --max-range). */
  maxRange?: number;
  /** The batch size aims at one refill per period, in ms (default 100). */
  refillPeriodMs?: number;
}

export type Mode = 'snowflake' | 'segment' | 'strict';

export type ErrorKind = 'bad_request' | 'refused' | 'clock_behind' | 'slot_lost' | 'exhausted' | 'no_sidecar' | 'protocol';

/** An ID's fields, as the sidecar's /decode gives them. */
export interface Parts {
  id: bigint;
  tick: bigint;
  datacenter: number;
  worker: number;
  sequence: number;
  /** When the ID was issued (its tick's start). */
  time: Date;
}

export interface ComposeParts {
  tick: bigint | number;
  datacenter?: bigint | number;
  worker?: bigint | number;
  sequence?: bigint | number;
}

/** The client's counters (clients/SPEC.md, "Observability"). */
export interface Stats {
  /** IDs handed out from the buffer. */
  ids: number;
  /** IDs in the buffer now. */
  bufferDepth: number;
  /** The next refill's size. */
  batchSize: number;
  refills: number;
  refillSeconds: number;
  refillErrors: number;
  /** next() calls that found the buffer empty and waited, and how long in all. */
  waits: number;
  waitSeconds: number;
  /** Buffered IDs dropped as older than maxAgeMs. */
  expired: number;
  /** Requests that bypass the buffer. */
  direct: number;
  /** Errors raised to the app, by kind. */
  errors: Partial<Record<ErrorKind, number>>;
}

/** A sequence's bit layout, read once from the sidecar. */
export class Layout {
  private constructor();
  readonly totalBits: 63 | 53;
  readonly timestampBits: number;
  readonly datacenterBits: number;
  readonly workerBits: number;
  readonly sequenceBits: number;
  readonly epoch: Date;
  readonly timeUnitMs: number;
  /** An ID's fields; a RangeError for a value that is not an ID of this layout. */
  decode(id: bigint | number | string): Parts;
  /** The ID with these fields; a RangeError names a field too wide for its bits. */
  compose(parts: ComposeParts): bigint;
  /** The tick a time falls in: compose({tick: tickAt(t)}) is the smallest ID of it. */
  tickAt(time: Date | number): bigint;
}

/** Hands out IDs from the sidecar in the pod. Close it when done. */
export class Client implements Disposable {
  /** Makes a client; a TypeError for a KUBEFLAKE_URL that is not plain http://host:port. It does not contact the sidecar yet. */
  constructor(options?: Options);
  /** "unix" or "tcp". */
  readonly transport: 'unix' | 'tcp';
  /** The next ID, from the buffer (from the sidecar for a strict sequence or with prefetch off). */
  next(): Promise<bigint>;
  /** The next ID as a decimal string. */
  nextString(): Promise<string>;
  /** The next ID as a number: a 53-bit layout only, a RangeError otherwise. */
  nextNumber(): Promise<number>;
  /** An ID greater than `after`, from the sidecar (never the buffer). */
  nextAfter(after: bigint | number | string): Promise<bigint>;
  /** `count` IDs in increasing order, in one request (not from the buffer). */
  nextBatch(count: number): Promise<bigint[]>;
  /** The sequence's mode, read once from /readyz. */
  mode(): Promise<Mode>;
  /** The layout, read once; null in segment mode and for layouts with a key form. */
  layout(): Promise<Layout | null>;
  /** An ID's fields: locally, or by the sidecar for a layout with a key form. */
  decode(id: bigint | number | string): Promise<Parts>;
  /** The ID with these fields (a plain Snowflake layout only). */
  compose(parts: ComposeParts): Promise<bigint>;
  stats(): Stats;
  /** Stops the refiller; buffered IDs are dropped (gaps, never reused). */
  close(): void;
  [Symbol.dispose](): void;
}

export const DEFAULT_URL: 'http://127.0.0.1:7070';

/** Every error about the sidecar. `kind` names it as every kubeflake client does. */
export class KubeflakeError extends Error {
  readonly kind: ErrorKind;
  /** The HTTP status; 0 when none came. */
  readonly status: number;
  /** The sidecar's reason for a refusal (docs/openapi.yaml); '' when none. */
  readonly reason: string;
  /** The sidecar's Retry-After in ms; 0 when it sent none. */
  readonly retryAfterMs: number;
  /** Whether asking again later may succeed with nothing changed by the caller. */
  readonly retryable: boolean;
}
export class BadRequestError extends KubeflakeError { readonly kind: 'bad_request'; }
/** Every refusal (503, 409) is a RefusedError; the subclasses name the common reasons. */
export class RefusedError extends KubeflakeError { readonly kind: 'refused' | 'clock_behind' | 'slot_lost' | 'exhausted'; }
export class ClockBehindError extends RefusedError { readonly kind: 'clock_behind'; }
export class SlotLostError extends RefusedError { readonly kind: 'slot_lost'; }
export class ExhaustedError extends RefusedError { readonly kind: 'exhausted'; }
export class NoSidecarError extends KubeflakeError { readonly kind: 'no_sidecar'; }
export class ProtocolError extends KubeflakeError { readonly kind: 'protocol'; }
