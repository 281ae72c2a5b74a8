// Compiled by tsc --strict (clients/node/test.sh), never run: it uses every declaration of
// src/index.d.ts as an app would, so that a declaration that does not fit fails the build.
// The @ts-expect-error lines must stay errors.
import {
  BadRequestError, Client, ClockBehindError, DEFAULT_URL, ExhaustedError, KubeflakeError, Layout, NoSidecarError,
  ProtocolError, RefusedError, SlotLostError,
} from 'kubeflake';
import type { ComposeParts, ErrorKind, Mode, Options, Parts, Stats } from 'kubeflake';

export async function app(): Promise<void> {
  const options: Options = { url: DEFAULT_URL, prefetch: true, maxAgeMs: 1000, maxWaitMs: 5000, requestTimeoutMs: 2000,
    minBatch: 64, maxBatch: 10_000, refillPeriodMs: 100 };
  using ids = new Client(options);
  const id: bigint = await ids.next();
  const text: string = await ids.nextString();
  const n: number = await ids.nextNumber();
  // @ts-expect-error an ID is a bigint, never a number by accident
  const lossy: number = await ids.next();
  const later: bigint = await ids.nextAfter(id);
  await ids.nextAfter(text);
  const batch: bigint[] = await ids.nextBatch(10);
  const mode: Mode = await ids.mode();
  const transport: 'unix' | 'tcp' = ids.transport;
  const layout: Layout | null = await ids.layout();
  const parts: Parts = await ids.decode(id);
  const when: Date = parts.time;
  const back: bigint = await ids.compose(parts);
  if (layout) {
    const compose: ComposeParts = { tick: layout.tickAt(new Date()), worker: 3 };
    const smallest: bigint = layout.compose(compose);
    const bits: 63 | 53 = layout.totalBits;
    layout.decode(smallest).tick satisfies bigint;
    void bits;
  }
  const stats: Stats = ids.stats();
  const kinds: ErrorKind[] = Object.keys(stats.errors) as ErrorKind[];
  try {
    await ids.next();
  } catch (err) {
    if (err instanceof RefusedError) {
      const retryAfterMs: number = err.retryAfterMs;
      const reason: string = err.reason;
      void [retryAfterMs, reason];
    }
    if (err instanceof KubeflakeError) {
      const kind: ErrorKind = err.kind;
      const retryable: boolean = err.retryable;
      void [kind, retryable];
    }
    const classes = [BadRequestError, ClockBehindError, ExhaustedError, NoSidecarError, ProtocolError, SlotLostError];
    void classes;
  }
  ids.close();
  void [text, n, lossy, later, batch, mode, transport, when, back, kinds];
}
