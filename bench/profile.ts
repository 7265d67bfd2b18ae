/**
 * CPU profiles of `gpumesh up` (the orchestrator with its local agent, as it runs by default) in the steady state,
 * under two loads: tiny jobs one at a time (the overhead benchmark's `gen` 8×8 and `mlp`) and many `mlp` jobs kept
 * in flight (the dispatch benchmark's). The profiler is started through the inspector after the warm-up, so the
 * profile holds neither start-up nor the JIT's warm-up. Writes a flame graph per load under bench/profiles/ and
 * prints each one's heaviest functions and where its time went by part of the code.
 *
 * With `--allocations` it samples the heap instead (every allocation, collected or not) during one-at-a-time jobs and
 * under the dispatch load, and prints the bytes allocated per job by part of the code and by site: what sets how often
 * the young generation is scavenged (bench/NOTES.md, "The young generation"). `--survivors` keeps only what
 * outlived the young generation (promoted, or allocated old).
 *
 *   npm run bench:profile -- [--jobs 3000] [--warmup 5000] [--inflight 64] [--out bench/profiles] [--keep-profiles] [--allocations | --survivors]
 *                            [--load oip] [--perf [--seconds 10]]
 *
 * `--load oip` profiles (or, with `--allocations`, samples the heap during) OIP infer requests on the built-in `simple`,
 * JSON and binary in turn, one at a time (bench:oip's concurrency 1) instead of the jobs above.
 *
 * `--keep-profiles` also writes the raw profiles (`.cpuprofile`, for Chrome's DevTools) next to the flame graphs.
 *
 * `--perf` samples the CPU with Linux's `perf` instead (Debian: linux-perf; as root, or with perf_event_paranoid ≤ 1),
 * every thread and the kernel: the jobs loads (or `--load oip`) for `--seconds` (10) after the warm-up, then where
 * the CPU went — syscalls, SQLite, JSON and number conversion, the collector, our parts of the code — and which code
 * called the JSON and number conversion (bench/linux-perf.ts says why this, and not V8's profile, for native work).
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import { removeDir, startMesh, waitFor } from '../test/helpers/mesh.js';
import { callTree, flameSvg, frameName, heaviest, type CpuProfile, type ProfileNode } from './flame.js';
import { callersOf, cpuByPart, perfSamples, recordPerf } from './linux-perf.js';
import { BenchClient, closedLoop, mlpJob } from './mesh-client.js';
import { oipRequest } from './oip-requests.js';

const { values } = parseArgs({
  options: {
    jobs: { type: 'string', default: '3000' }, warmup: { type: 'string', default: '5000' }, inflight: { type: 'string', default: '64' },
    out: { type: 'string', default: 'bench/profiles' }, allocations: { type: 'boolean', default: false }, survivors: { type: 'boolean', default: false }, 'keep-profiles': { type: 'boolean', default: false },
    load: { type: 'string', default: 'jobs' }, perf: { type: 'boolean', default: false }, seconds: { type: 'string', default: '10' },
  },
});
const JOBS = Number(values.jobs);
const WARMUP = Number(values.warmup);
const INFLIGHT = Number(values.inflight);
const OUT = values.out!;

const gen = { type: 'image', input: { prompt: 'profile', seed: 1, width: 8, height: 8, steps: 1 } };

/** The inspector protocol, just enough to start and stop the CPU profiler of the process it is attached to. */
class Inspector {
  readonly #socket: WebSocket;
  readonly #pending = new Map<number, (result: unknown) => void>();
  #next = 0;

  private constructor(socket: WebSocket) {
    this.#socket = socket;
    socket.on('message', (data) => {
      const message = JSON.parse(String(data)) as { id?: number; result?: unknown };
      if (message.id !== undefined) this.#pending.get(message.id)?.(message.result);
    });
  }

  static async connect(url: string): Promise<Inspector> {
    const socket = new WebSocket(url);
    await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
    return new Inspector(socket);
  }

  call<T>(method: string, params: Record<string, unknown> = {}): Promise<T> {
    const id = ++this.#next;
    return new Promise((resolve) => {
      this.#pending.set(id, resolve as (result: unknown) => void);
      this.#socket.send(JSON.stringify({ id, method, params }));
    });
  }

  close(): void {
    this.#socket.close();
  }
}

/** Where a sample's time went: the innermost frame on its stack that belongs to one of these parts. */
const PARTS: [string, RegExp][] = [
  ['store (SQLite)', /\/orchestrator\/store\/|better-sqlite3/],
  ['agent and engine IPC', /\/agent\/|node:internal\/child_process/],
  ['in-process link', /\/net\/|\/link\/agent-hub|\/protocol\/link/],
  ['events and SSE', /\/orchestrator\/events\.|\/http\/sse\.|\/http\/events\./],
  ['jobs, scheduling, routing', /\/orchestrator\/(jobs|scheduler|routing|autoscale|registry|auth|metrics|per-turn|model-coverage)\//],
  ['HTTP (Node, Fastify, zod)', /fastify|find-my-way|secure-json-parse|node:_http_|\/http\/|zod|node:net|stream_base_commons/],
];

function byPart(profile: CpuProfile): [string, number][] {
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const totals = new Map<string, number>();
  let all = 0;
  profile.samples.forEach((sample, index) => {
    const time = profile.timeDeltas[index] ?? 0;
    all += time;
    const leaf = nodes.get(sample)!.callFrame.functionName;
    let part = leaf === '(idle)' ? 'idle' : leaf === '(garbage collector)' ? 'garbage collector' : '';
    for (let id: number | undefined = sample; id !== undefined && !part; id = parent.get(id)) {
      const url = nodes.get(id)!.callFrame.url;
      part = PARTS.find(([, pattern]) => pattern.test(url))?.[0] ?? '';
    }
    totals.set(part || 'other (Node internals, timers)', (totals.get(part || 'other (Node internals, timers)') ?? 0) + time);
  });
  return [...totals].sort((a, b) => b[1] - a[1]).map(([part, time]) => [part, (time / all) * 100]);
}

/**
 * Whether the load's client holds a `/v1/events` stream: the jobs loads learn each job's end from it, as bench:overhead
 * and bench:dispatch do; OIP infer is answered on its own request, and bench:oip opens no stream (every event would
 * otherwise be written to it, and profiled as part of a request).
 */
const EVENTS = values.load !== 'oip';

/** `gpumesh up` with its inspector open, warmed up, then `body` (which profiles what it wants) over the load. */
async function withInspectedMesh(warmUp: (client: BenchClient) => Promise<void>, body: (client: BenchClient, inspector: Inspector) => Promise<void>): Promise<void> {
  const mesh = await startMesh({
    nodeArgs: ['--inspect=127.0.0.1:0'], env: { GPUMESH_LOG_LEVEL: 'warn' },
    config: { models: { mlp: { maxQueueSize: 100_000 } }, queues: { maxTotal: 100_000 } },
  });
  const client = new BenchClient(mesh.url, mesh.admin, INFLIGHT);
  try {
    const url = await waitFor(() => /Debugger listening on (ws:\S+)/.exec(mesh.output())?.[1], { what: 'the inspector' });
    const inspector = await Inspector.connect(url);
    if (EVENTS) await client.listen();
    await warmUp(client);
    await body(client, inspector);
    inspector.close();
  } finally {
    client.close();
    await mesh.stop();
    removeDir(mesh.data);
  }
}

async function profiled(name: string, title: string, warmUp: (client: BenchClient) => Promise<void>, load: (client: BenchClient) => Promise<void>): Promise<void> {
  await withInspectedMesh(warmUp, async (client, inspector) => {
    await inspector.call('Profiler.enable');
    await inspector.call('Profiler.setSamplingInterval', { interval: 200 });
    await inspector.call('Profiler.start');
    const started = performance.now();
    await load(client);
    const seconds = (performance.now() - started) / 1000;
    const { profile } = await inspector.call<{ profile: CpuProfile }>('Profiler.stop');
    if (values['keep-profiles']) writeFileSync(join(OUT, `${name}.cpuprofile`), JSON.stringify(profile));
    const root = callTree(profile);
    const heading = `gpumesh up, ${title} (${seconds.toFixed(1)} s profiled, after ${WARMUP} warm-up jobs)`;
    writeFileSync(join(OUT, `${name}.svg`), flameSvg(root, heading));
    process.stdout.write(`\n${heading}\n\nby part of the code (each sample goes to the innermost part on its stack):\n`);
    for (const [part, pct] of byPart(profile)) process.stdout.write(`${pct.toFixed(1).padStart(5)}%  ${part}\n`);
    process.stdout.write('\nheaviest functions (self time):\n');
    for (const row of heaviest(root, 20)) process.stdout.write(`${row.pct.toFixed(1).padStart(5)}%  ${row.selfMs.toFixed(0).padStart(7)} ms  ${row.name}\n`);
  });
}

interface HeapNode {
  callFrame: ProfileNode['callFrame'];
  selfSize: number;
  children: HeapNode[];
}

/** Bytes allocated per job during `jobs` jobs, by part of the code and by allocation site (kept or collected). */
async function allocations(title: string, jobs: number, warmUp: (client: BenchClient) => Promise<void>, load: (client: BenchClient) => Promise<void>): Promise<void> {
  await withInspectedMesh(warmUp, async (client, inspector) => {
    await inspector.call('HeapProfiler.enable');
    await inspector.call('HeapProfiler.startSampling', { samplingInterval: 1024, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: !values.survivors });
    await load(client);
    const { profile } = await inspector.call<{ profile: { head: HeapNode } }>('HeapProfiler.stopSampling');
    const parts = new Map<string, number>();
    const sites = new Map<string, number>();
    let all = 0;
    // A built-in (`Map`, `slice`: no script of its own) is named with the nearest caller that has one.
    const walk = (node: HeapNode, part: string, caller: string): void => {
      const own = PARTS.find(([, pattern]) => pattern.test(node.callFrame.url))?.[0] ?? part;
      const name = frameName(node);
      const site = node.callFrame.url ? name : `${name} < ${caller}`;
      if (node.selfSize > 0) {
        all += node.selfSize;
        parts.set(own, (parts.get(own) ?? 0) + node.selfSize);
        sites.set(site, (sites.get(site) ?? 0) + node.selfSize);
      }
      for (const child of node.children) walk(child, own, node.callFrame.url ? name : caller);
    };
    walk(profile.head, 'other (Node internals, timers)', '(root)');
    const perJob = (bytes: number): string => `${(bytes / jobs / 1024).toFixed(2).padStart(6)} KB`;
    process.stdout.write(`\ngpumesh up, ${title}: ${perJob(all).trim()} ${values.survivors ? 'allocated per job that outlived the young generation' : 'allocated per job'} (after ${WARMUP} warm-up jobs)\n\nby part of the code (the innermost part on the allocation's stack):\n`);
    for (const [part, bytes] of [...parts].sort((a, b) => b[1] - a[1])) process.stdout.write(`${perJob(bytes)}  ${part}\n`);
    process.stdout.write('\nlargest allocation sites:\n');
    for (const [site, bytes] of [...sites].sort((a, b) => b[1] - a[1]).slice(0, 130)) process.stdout.write(`${perJob(bytes)}  ${site}\n`);
  });
}

/**
 * `gpumesh up` sampled by `perf` for SECONDS while `load` runs in rounds (after `warmUp`), Node writing its JIT's
 * symbols for perf to name JavaScript frames by. Prints the CPU by part and the callers of JSON and number conversion.
 */
async function perfProfiled(title: string, warmUp: (client: BenchClient) => Promise<void>, round: (client: BenchClient) => Promise<number>): Promise<void> {
  const seconds = Number(values.seconds);
  const mesh = await startMesh({
    nodeArgs: ['--perf-basic-prof-only-functions'], env: { GPUMESH_LOG_LEVEL: 'warn' },
    config: { models: { mlp: { maxQueueSize: 100_000 } }, queues: { maxTotal: 100_000 } },
  });
  const client = new BenchClient(mesh.url, mesh.admin, INFLIGHT);
  const pid = mesh.process.pid!;
  const file = join(mkdtempSync(join(tmpdir(), 'gpumesh-perf-')), 'perf.data');
  let done = 0;
  try {
    if (EVENTS) await client.listen();
    await warmUp(client);
    const recording = recordPerf(pid, seconds, file);
    let stopped = false;
    void recording.finally(() => (stopped = true));
    while (!stopped) done += await round(client);
    await recording;
  } finally {
    client.close();
    await mesh.stop();
    removeDir(mesh.data);
  }
  const samples = perfSamples(file);
  removeDir(join(file, '..'));
  const jobsPerSecond = done / seconds;
  process.stdout.write(`\ngpumesh up, ${title}: ${samples.length} samples of CPU time in ${seconds} s (${jobsPerSecond.toFixed(0)} a second, `
    + `${((samples.length / 2000 / seconds) * 1e6 / jobsPerSecond).toFixed(0)} µs of CPU each), every thread\n\nby part (the first native kind on a sample's stack, else its innermost part of the code):\n`);
  for (const [part, pct] of cpuByPart(samples, pid, PARTS)) process.stdout.write(`${pct.toFixed(1).padStart(5)}%  ${part}\n`);
  process.stdout.write('\nJSON text and number conversion, by the code that asked for it:\n');
  for (const [caller, pct] of callersOf(samples, /Json(Stringif|Parse)|Dtoa|Strtod|DoubleToCString|StringToDouble/).slice(0, 12)) {
    process.stdout.write(`${pct.toFixed(1).padStart(5)}%  ${caller}\n`);
  }
}

const oipOneAtATime = (count: number) => async (client: BenchClient): Promise<void> => {
  for (let i = 0; i < count; i++) await oipRequest(client, i % 2 ? 'binary' : 'json');
};

const oneAtATime = async (client: BenchClient): Promise<void> => {
  for (let i = 0; i < WARMUP; i++) await client.run(i % 2 ? gen : mlpJob(i));
};
if (values.perf) {
  if (values.load === 'oip') {
    await perfProfiled('OIP infer on simple one at a time, JSON and binary in turn', oipOneAtATime(WARMUP), async (client) => {
      await oipOneAtATime(200)(client);
      return 200;
    });
  } else {
    await perfProfiled('mlp jobs one at a time', oneAtATime, async (client) => {
      for (let i = 0; i < 200; i++) await client.run(mlpJob(i));
      return 200;
    });
    await perfProfiled(`mlp jobs, ${INFLIGHT} in flight`, async (client) => { await closedLoop(client, WARMUP, INFLIGHT); }, async (client) => {
      await closedLoop(client, 2000, INFLIGHT);
      return 2000;
    });
  }
} else if (values.load === 'oip') {
  if (values.allocations || values.survivors) {
    await allocations(`OIP infer on simple one at a time, JSON and binary in turn, ${JOBS}`, JOBS, oipOneAtATime(WARMUP), oipOneAtATime(JOBS));
  } else {
    mkdirSync(OUT, { recursive: true });
    await profiled('up-oip', `OIP infer on simple one at a time, JSON and binary in turn, ${JOBS}`, oipOneAtATime(WARMUP), oipOneAtATime(JOBS));
    process.stdout.write(`\nflame graph in ${OUT}/up-oip.svg\n`);
  }
} else if (values.allocations || values.survivors) {
  await allocations(`gen 8×8 jobs one at a time, ${JOBS}`, JOBS, oneAtATime, async (client) => {
    for (let i = 0; i < JOBS; i++) await client.run(gen);
  });
  await allocations(`mlp jobs one at a time, ${JOBS}`, JOBS, oneAtATime, async (client) => {
    for (let i = 0; i < JOBS; i++) await client.run(mlpJob(i));
  });
  await allocations(`mlp jobs, ${INFLIGHT} in flight, ${JOBS * 5}`, JOBS * 5, async (client) => { await closedLoop(client, WARMUP, INFLIGHT); }, async (client) => { await closedLoop(client, JOBS * 5, INFLIGHT); });
} else {
  mkdirSync(OUT, { recursive: true });
  await profiled('up-sequential', `gen 8×8 and mlp jobs one at a time, ${JOBS} each`, oneAtATime, async (client) => {
    for (let i = 0; i < JOBS; i++) await client.run(gen);
    for (let i = 0; i < JOBS; i++) await client.run(mlpJob(i));
  });
  await profiled('up-dispatch', `mlp jobs, ${INFLIGHT} in flight, ${JOBS * 5}`, async (client) => { await closedLoop(client, WARMUP, INFLIGHT); }, async (client) => { await closedLoop(client, JOBS * 5, INFLIGHT); });
  process.stdout.write(`\nflame graphs in ${OUT}/up-sequential.svg and ${OUT}/up-dispatch.svg\n`);
}
