/**
 * Failover: three replicas of `gen` (three real agent processes, each in its own network namespace) under a
 * steady open-loop load; the one that ran the most jobs in the last seconds has its link cut (its bridge port goes
 * down: packets dropped, no reset, the agent process keeps running). Measured from the orchestrator's own records:
 *
 *  - **detectable**: the moment the stale timeout elapses — the cut host's last heartbeat the orchestrator
 *    received (its `lastSeenAt`) plus `agents.staleAfterMs`. Before it, silence is indistinguishable from a
 *    slow host; the orchestrator checks once per heartbeat interval, so it notices at most that much later;
 *  - **last routed**: the latest dispatch of any job to the cut host (attempts' `dispatchedAt`); the target is
 *    ≤ 1 s after detectable (it is usually before the cut itself: the cut host's one slot is held by the batch
 *    it never answers, so nothing more is routed there);
 *  - **jobs lost**: accepted jobs that did not succeed (must be 0);
 *  - **latency** (created → finished, server clock) of the jobs that finished in the 10 s before the cut and in the
 *    10 s after it (by finish time, so the jobs the cut host held, which finish after it, count as after).
 *
 * Two link-liveness settings side by side in one run: the defaults (heartbeats every 2 s, dropped after 6 s
 * silent) and a short one (300 ms / 1.5 s). Run as root through the netns script, which builds the namespaces and
 * removes them afterwards:
 *
 *   npm run bench:failover        # = bash scripts/netns-mesh.sh --hosts nas,r1,r2,r3 --driver bench/failover.ts
 */
import type { MeshConfigInput } from '../src/orchestrator/config/config.js';
import type { JobView } from '../src/protocol/api/index.js';
import { JobLedger, MeshEvents, NetnsMesh, sleep, until } from '../scripts/netns/mesh.js';
import { Topology } from '../scripts/netns/topology.js';
import { printTable, summarize, writeResults, type Summary } from './lib.js';

const topology = Topology.fromEnv();
const REPLICAS = ['r1', 'r2', 'r3'];
const WINDOW_MS = 10_000;
const INTERVAL_MS = 25; // 40 jobs/s, open loop
const SIZE = 64;
const settings = [
  { name: 'defaults', heartbeatMs: 2000, staleAfterMs: 6000 },
  { name: 'short', heartbeatMs: 300, staleAfterMs: 1500 },
];

interface Outcome {
  setting: string;
  cut: string;
  /** Jobs each replica ran in the 2 s before the cut. */
  shares: Record<string, number>;
  heartbeatMs: number;
  staleAfterMs: number;
  accepted: number;
  lost: number;
  retried: number;
  detectableAfterCutMs: number;
  droppedAfterDetectableMs: number;
  lastRoutedAfterCutMs: number;
  /** Jobs dispatched to the cut host after the cut (they wait for detection, then are retried elsewhere). */
  routedAfterCut: number;
  lastRoutedAfterDetectableMs: number;
  before: Summary;
  after: Summary;
  /** Latency of each job the cut host held (lost there, retried elsewhere). */
  retriedLatencyMs: number[];
}

async function measure(setting: (typeof settings)[number]): Promise<Outcome> {
  const config: MeshConfigInput = {
    routing: { image: ['image'] },
    models: { gen: { minReplicas: 3, maxReplicas: 3, retries: 4 } },
    agents: { heartbeatMs: setting.heartbeatMs, staleAfterMs: setting.staleAfterMs },
    health: { probeIntervalMs: 0 },
    retry: { backoffMs: 50 },
  };
  const mesh = new NetnsMesh(topology, config, setting.name);
  const ledger = new JobLedger(() => mesh.admin, `${topology.run}-${setting.name}`);
  let events: MeshEvents | null = null;
  let cut: string | null = null;
  try {
    await mesh.startOrchestrator();
    events = new MeshEvents(mesh.url, mesh.adminGrant);
    for (const host of REPLICAS) await mesh.startAgent({ host, classes: ['image'] });
    await mesh.connected(REPLICAS);
    await until('gen resident on all three replicas', async () => (await mesh.hosts()).filter((host) => host.resident.some((model) => model.model === 'gen')).length === 3, 60_000, 100);
    const body = (n: number) => ({ type: 'image', input: { prompt: `failover ${n}`, seed: n, width: SIZE, height: SIZE, steps: 4 } });
    // Warm up (throughput measured on every replica), then the window before the cut.
    const stream = ledger.stream('image', body, INTERVAL_MS);
    await sleep(2000 + WINDOW_MS);
    const shares = await recentShares(ledger, 2000);
    const CUT = Object.entries(shares).sort((a, b) => b[1] - a[1])[0]![0];
    const cutAt = Date.now();
    await topology.cut(CUT);
    cut = CUT;
    const lost = await until(`the orchestrator to drop ${CUT}`, () => events!.where((event) => event.type === 'host:lost' && event.host === CUT)[0], setting.staleAfterMs * 3);
    await sleep(Math.max(0, cutAt + WINDOW_MS - Date.now()));
    await stream.stop();
    const views = await ledger.settle(ledger.accepted.values(), 120_000);
    const departed = (await mesh.hosts()).find((host) => host.id === CUT)!;
    const detectableAt = Date.parse(departed.lastSeenAt) + setting.staleAfterMs;
    const all = [...views.values()];
    const toCut = all.flatMap((view) => view.attempts.filter((attempt) => attempt.host === CUT).map((attempt) => Date.parse(attempt.dispatchedAt)));
    const lastRoutedAt = Math.max(...toCut);
    const latency = (view: JobView): number => Date.parse(view.finishedAt!) - Date.parse(view.createdAt);
    const finished = (view: JobView): number => Date.parse(view.finishedAt!);
    return {
      setting: setting.name, cut: CUT, shares, heartbeatMs: setting.heartbeatMs, staleAfterMs: setting.staleAfterMs,
      accepted: ledger.accepted.size,
      lost: all.filter((view) => view.status !== 'succeeded').length + (ledger.accepted.size - views.size),
      retried: all.filter((view) => view.attempts.some((attempt) => attempt.status === 'lost')).length,
      detectableAfterCutMs: detectableAt - cutAt,
      droppedAfterDetectableMs: lost.at - detectableAt,
      lastRoutedAfterCutMs: lastRoutedAt - cutAt,
      routedAfterCut: toCut.filter((at) => at >= cutAt).length,
      lastRoutedAfterDetectableMs: lastRoutedAt - detectableAt,
      before: summarize(all.filter((view) => finished(view) >= cutAt - WINDOW_MS && finished(view) < cutAt).map(latency)),
      after: summarize(all.filter((view) => finished(view) >= cutAt && finished(view) < cutAt + WINDOW_MS).map(latency)),
      retriedLatencyMs: all.filter((view) => view.attempts.some((attempt) => attempt.status === 'lost')).map(latency),
    };
  } finally {
    events?.close();
    await mesh.stop();
    if (cut) await topology.restore(cut);
  }
}

/** How many of the jobs accepted in the last `ms` each replica ran (the busiest is the one worth cutting). */
async function recentShares(ledger: JobLedger, ms: number): Promise<Record<string, number>> {
  const since = Date.now() - ms;
  const recent = [...ledger.accepted.values()].filter((job) => job.submittedAt >= since).slice(0, -10);
  const views = await ledger.settle(recent);
  const shares: Record<string, number> = Object.fromEntries(REPLICAS.map((host) => [host, 0]));
  for (const view of views.values()) {
    const host = view.attempts.find((attempt) => attempt.status === 'succeeded')?.host;
    if (host) shares[host] = (shares[host] ?? 0) + 1;
  }
  return shares;
}

const outcomes: Outcome[] = [];
for (const setting of settings) outcomes.push(await measure(setting));

printTable(`Failover: 3 replicas of gen (${SIZE}×${SIZE}, 4 steps) at ${1000 / INTERVAL_MS} jobs/s; the busiest one's link cut (ms, from the cut unless said)`, [
  'setting', 'heartbeat/stale', 'cut (share)', 'jobs', 'lost', 'retried (latency)', 'detectable', 'dropped − detectable', 'routed after cut', 'last routed', 'last routed − detectable',
  'p50 before', 'p99 before', 'p50 after', 'p99 after', 'max after', 'p99 ratio',
], outcomes.map((outcome) => [
  outcome.setting, `${outcome.heartbeatMs}/${outcome.staleAfterMs}`, `${outcome.cut} (${Object.values(outcome.shares).join('/')})`,
  outcome.accepted, outcome.lost, `${outcome.retried}${outcome.retried ? ` (${outcome.retriedLatencyMs.map((ms) => Math.round(ms)).join(', ')} ms)` : ''}`,
  outcome.detectableAfterCutMs, outcome.droppedAfterDetectableMs, outcome.routedAfterCut, outcome.lastRoutedAfterCutMs, outcome.lastRoutedAfterDetectableMs,
  outcome.before.p50, outcome.before.p99, outcome.after.p50, outcome.after.p99, outcome.after.max, outcome.after.p99 / outcome.before.p99,
]));
const path = writeResults('failover', { replicas: REPLICAS.length, windowMs: WINDOW_MS, jobsPerSecond: 1000 / INTERVAL_MS, image: `${SIZE}x${SIZE}x4`, outcomes });
process.stdout.write(`\nwritten to ${path}\n`);
const failed = outcomes.filter((outcome) => outcome.lost > 0 || outcome.lastRoutedAfterDetectableMs > 1000);
if (failed.length > 0) {
  process.stdout.write(`targets missed (0 lost, last routed ≤ 1 s after detectable): ${failed.map((outcome) => outcome.setting).join(', ')}\n`);
  process.exitCode = 1;
}
