/**
 * The ONNX engine's worker process: the worker core (worker-core.ts) for one device, spoken to over Node IPC, so the
 * agent can reap it (and all its memory) by ending the process.
 */
import type { FromWorker, ToWorker } from './messages.js';
import { workerCore } from './worker-core.js';

const core = workerCore((message: FromWorker) => process.send!(message));
process.on('message', (message: ToWorker) => core.receive(message));
// The agent is our only reason to live: if its IPC channel goes, so do we.
process.on('disconnect', () => process.exit(0));
process.send!({ type: 'ready', pid: process.pid } satisfies FromWorker);
