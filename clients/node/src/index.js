// kubeflake: 64-bit IDs from the kubeflake sidecar in the pod, from a prefetch buffer, so
// that next() is a memory read in a steady state. The behaviour every kubeflake client
// shares: clients/SPEC.md in the repository.
//
//   import { Client } from 'kubeflake';
//   const ids = new Client();            // KUBEFLAKE_SOCKET, else KUBEFLAKE_URL
//   const id = await ids.next();         // a bigint
export { Client } from './client.js';
export { Layout } from './layout.js';
export { DEFAULT_URL } from './transport.js';
export {
  BadRequestError, ClockBehindError, ExhaustedError, KubeflakeError, NoSidecarError, ProtocolError, RefusedError, SlotLostError,
} from './errors.js';
