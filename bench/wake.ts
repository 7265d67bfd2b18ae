/**
 * What a wake-up costs on this machine: two threads hand a turn to each other through a futex (Atomics.wait/notify),
 * and each round trip is two wake-ups of a sleeping thread. On a quiet machine it takes a few microseconds; on a VM
 * whose idle vCPUs halt at once (a nested VM without halt polling), the other vCPU has to be woken through the
 * hypervisor, and one round trip took 60–70 µs (2026-12-07; 3.6 µs with both threads pinned to one CPU).
 *
 * A lone job crosses processes and threads several times (the client, the orchestrator, the engine's worker, and back),
 * and each crossing pays this; many jobs in flight pay it rarely, because the threads stay awake. So the lone-job
 * benchmarks print it beside their figures: two runs of the same code on days whose figure differs are not comparable.
 * `npm run bench:wake` prints it alone (about a second), to see what kind of day it is before a long run.
 */
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';

/** The partner: waits for its turn (slot 0), hands it back (slot 1); -1 in slot 1 ends it. */
const PARTNER = `
const { workerData } = require('node:worker_threads');
const turns = new Int32Array(workerData);
for (;;) {
  Atomics.wait(turns, 0, 0);
  Atomics.store(turns, 0, 0);
  if (Atomics.load(turns, 1) === -1) break;
  Atomics.store(turns, 1, 1);
  Atomics.notify(turns, 1);
}
`;

export interface WakeRoundTrip {
  /** Microseconds a round trip took: two wake-ups of a sleeping thread, and the hand-over. */
  p50Us: number;
  p90Us: number;
  rounds: number;
}

/** Time `rounds` futex round trips between this thread and another (about 0.1–0.7 s); the first tenth is a warm-up. */
export async function wakeRoundTrip(rounds = 5000): Promise<WakeRoundTrip> {
  const turns = new Int32Array(new SharedArrayBuffer(8));
  const partner = new Worker(PARTNER, { eval: true, workerData: turns.buffer });
  await new Promise((resolve, reject) => partner.once('online', resolve).once('error', reject));
  const warmup = Math.ceil(rounds / 10);
  const times: number[] = [];
  try {
    for (let i = 0; i < warmup + rounds; i++) {
      const start = performance.now();
      Atomics.store(turns, 1, 0);
      Atomics.store(turns, 0, 1);
      Atomics.notify(turns, 0);
      // A partner that died would leave this waiting forever: a second is far beyond any wake-up.
      if (Atomics.wait(turns, 1, 0, 1000) === 'timed-out') throw new Error('the partner thread did not answer within 1 s');
      if (i >= warmup) times.push((performance.now() - start) * 1000);
    }
  } finally {
    Atomics.store(turns, 1, -1);
    Atomics.store(turns, 0, 1);
    Atomics.notify(turns, 0);
    await partner.terminate();
  }
  times.sort((a, b) => a - b);
  return { p50Us: times[Math.floor(times.length / 2)]!, p90Us: times[Math.floor(times.length * 0.9)]!, rounds };
}

/** One line for a benchmark's output. */
export function describeWake(before: WakeRoundTrip, after?: WakeRoundTrip): string {
  const figure = (wake: WakeRoundTrip): string => `${wake.p50Us.toFixed(1)} µs p50 (p90 ${wake.p90Us.toFixed(1)})`;
  return `this machine's wake-up round trip between two threads (bench/wake.ts): ${figure(before)}${after ? ` before, ${figure(after)} after` : ''}`;
}

// Run as a script (npm run bench:wake): the figure alone.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.stdout.write(`${describeWake(await wakeRoundTrip(10_000))}\n`);
}
