/**
 * Overload: offer ten times what the mesh can serve for 30 s and check that it
 * protects itself — admitted jobs keep a bounded latency, every refusal is a
 * 429 with Retry-After, no admitted job is lost, every priority level gets
 * work done, and the orchestrator's memory stays flat.
 *
 *   npm run bench:overload -- [--seconds 30] [--factor 10] [--queue 40]
 */
import { parseArgs } from 'node:util';
import { removeDir, startMesh } from '../test/helpers/mesh.js';
import { percentile, printTable, summarize, writeResults } from './lib.js';
import { BenchClient } from './mesh-client.js';

const { values } = parseArgs({ options: {
  seconds: { type: 'string', default: '30' }, factor: { type: 'string', default: '10' }, queue: { type: 'string', default: '40' },
} });
const SECONDS = Number(values.seconds);
const FACTOR = Number(values.factor);
const QUEUE = Number(values.queue);
const INPUT = { prompt: 'overload', width: 128, height: 128, steps: 4 };

const mesh = await startMesh({
  env: { GPUMESH_LOG_LEVEL: 'warn' },
  config: { models: { gen: { maxQueueSize: QUEUE } }, priorities: { levels: 3, default: 2, agingMs: 5000 } }, // keep in step with AGING_MS below
});
const client = new BenchClient(mesh.url, mesh.admin, 128);
await client.listen();
const request = client.request.bind(client);
const submitAndWait = (): Promise<number> => client.run({ type: 'image', input: INPUT });

// 1. Unloaded latency: one job at a time.
for (let i = 0; i < 5; i++) await submitAndWait();
const unloaded: number[] = [];
for (let i = 0; i < 40; i++) unloaded.push(await submitAndWait());
// 2. Capacity: enough jobs in flight to keep the replica busy with full batches.
const capacityStart = performance.now();
let capacityDone = 0;
await Promise.all(Array.from({ length: 8 }, async () => {
  while (performance.now() - capacityStart < 5000) { await submitAndWait(); capacityDone++; }
}));
const capacity = capacityDone / ((performance.now() - capacityStart) / 1000);

// 3. Overload: open-loop arrivals at FACTOR × capacity, priorities 1–3 in equal shares.
const rate = capacity * FACTOR;
const admitted = new Map<string, { priority: number; at: number }>();
let refused = 0;
let refusedWithoutRetryAfter = 0;
const otherErrors: string[] = [];
const memory: { t: number; rssMB: number }[] = [];
const sampleMemory = async (t: number): Promise<void> => {
  const metrics = await request('GET', '/metrics');
  const rss = Number(/^process_resident_memory_bytes (\d+)/m.exec(metrics.text)?.[1]);
  memory.push({ t, rssMB: rss / 2 ** 20 });
};
const loadStart = performance.now();
const inFlight: Promise<void>[] = [];
let sent = 0;
await sampleMemory(0);
const memoryTimer = setInterval(() => void sampleMemory((performance.now() - loadStart) / 1000), 1000);
while (performance.now() - loadStart < SECONDS * 1000) {
  const due = Math.floor(((performance.now() - loadStart) / 1000) * rate);
  for (; sent < due; sent++) {
    const priority = 1 + (sent % 3);
    const at = performance.now();
    inFlight.push(request('POST', '/v1/jobs', JSON.stringify({ type: 'image', input: INPUT, priority })).then((response) => {
      if (response.status === 202) admitted.set((JSON.parse(response.text) as { id: string }).id, { priority, at });
      else if (response.status === 429) {
        refused++;
        if (!(Number(response.headers['retry-after']) >= 1)) refusedWithoutRetryAfter++;
      } else otherErrors.push(`${response.status} ${response.text.slice(0, 100)}`);
    }, (error: Error) => { otherErrors.push(error.message); }));
  }
  await new Promise((resolve) => setTimeout(resolve, 5));
}
await Promise.all(inFlight);
const loadEnd = performance.now();
const completedDuringLoad = [1, 2, 3].map((priority) => [...admitted].filter(([id, job]) => job.priority === priority && (client.ended(id)?.at ?? Infinity) <= loadEnd).length);
// Drain: every admitted job must finish.
const drainDeadline = performance.now() + 120_000;
while ([...admitted.keys()].some((id) => !client.ended(id)) && performance.now() < drainDeadline) await new Promise((resolve) => setTimeout(resolve, 100));
clearInterval(memoryTimer);

const lost = [...admitted.keys()].filter((id) => client.ended(id)?.type !== 'succeeded');
const latencies = (priority?: number) => [...admitted].filter(([id, job]) => client.ended(id) && (priority === undefined || job.priority === priority)).map(([id, job]) => client.ended(id)!.at - job.at);
const unloadedP99 = percentile(unloaded, 99);
const AGING_MS = 5000;
/**
 * How long an admitted job can wait, by the aging rule: a level-L job reaches
 * level 1 after (L−1)·agingMs, and then at most a full queue is ahead of it.
 */
const queueBoundMs = (priority: number): number => (priority - 1) * AGING_MS + (QUEUE / capacity) * 1000;
const boundMs = (priority: number): number => 2 * unloadedP99 + queueBoundMs(priority);
const overall = summarize(latencies());
const slope = (() => {
  const points = memory.filter((point) => point.t >= 5);
  const n = points.length;
  if (n < 2) return 0;
  const mt = points.reduce((s, p) => s + p.t, 0) / n;
  const mm = points.reduce((s, p) => s + p.rssMB, 0) / n;
  return (points.reduce((s, p) => s + (p.t - mt) * (p.rssMB - mm), 0) / points.reduce((s, p) => s + (p.t - mt) ** 2, 0)) * 60;
})();

printTable('overload', ['measure', 'value'], [
  ['unloaded p50 / p99 (ms)', `${percentile(unloaded, 50).toFixed(0)} / ${unloadedP99.toFixed(0)}`],
  ['capacity (jobs/s)', capacity],
  ['offered (jobs/s)', `${rate.toFixed(0)} for ${SECONDS} s (${sent} jobs)`],
  ['admitted', admitted.size],
  ['refused 429 (without Retry-After)', `${refused} (${refusedWithoutRetryAfter})`],
  ['other errors', otherErrors.length],
  ['admitted but not succeeded', lost.length],
  ['admitted p50 / p99 (ms)', `${overall.p50.toFixed(0)} / ${overall.p99.toFixed(0)}`],
  ['p99 by priority 1 / 2 / 3 (ms)', [1, 2, 3].map((p) => percentile(latencies(p), 99).toFixed(0)).join(' / ')],
  ['bound by priority: 2×unloaded p99 + wait bound (ms)', [1, 2, 3].map((p) => boundMs(p).toFixed(0)).join(' / ')],
  ['completed during load by priority 1 / 2 / 3', completedDuringLoad.join(' / ')],
  ['orchestrator RSS first / max / last (MB)', `${memory[0]!.rssMB.toFixed(0)} / ${Math.max(...memory.map((m) => m.rssMB)).toFixed(0)} / ${memory.at(-1)!.rssMB.toFixed(0)}`],
  ['RSS slope after 5 s (MB/min)', slope],
]);
const verdict = {
  latencyWithinBound: [1, 2, 3].every((p) => percentile(latencies(p), 99) <= boundMs(p)),
  every429HasRetryAfter: refusedWithoutRetryAfter === 0,
  noOtherErrors: otherErrors.length === 0,
  noAdmittedJobLost: lost.length === 0,
  everyPriorityCompletedWork: completedDuringLoad.every((count) => count > 0),
};
process.stdout.write(`\n${Object.entries(verdict).map(([k, v]) => `${v ? 'PASS' : 'FAIL'} ${k}`).join('\n')}\n`);
process.stdout.write(`wrote ${writeResults('overload', {
  seconds: SECONDS, factor: FACTOR, queue: QUEUE, input: INPUT, unloaded: summarize(unloaded), capacity, offeredRate: rate, sent,
  admitted: admitted.size, refused, refusedWithoutRetryAfter, otherErrors: otherErrors.slice(0, 20), lost: lost.length,
  latency: overall, latencyByPriority: Object.fromEntries([1, 2, 3].map((p) => [p, summarize(latencies(p))])),
  boundMsByPriority: Object.fromEntries([1, 2, 3].map((p) => [p, boundMs(p)])), completedDuringLoad, memory, rssSlopeMBPerMinute: slope, verdict,
})}\n`);
client.close();
await mesh.stop();
removeDir(mesh.data);
