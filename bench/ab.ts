/**
 * Two builds of gpumesh side by side: this checkout against another (`--base`, a checkout or worktree of an earlier
 * commit, built) or against itself started with other Node options (`--node-args` for this one, `--base-node-args`
 * for the other: e.g. two sizes of V8's young generation), both up for the whole run, measured in alternating rounds of many tiny `mlp` jobs kept in flight
 * (the dispatch benchmark's single submits) — the way to tell a change of a few per cent from the VM's drift, which
 * moves a whole run by tens of per cent (bench/RESULTS.md). Prints each round and the medians, writes bench/out/ab.json.
 *
 * `--work pictures` measures picture jobs instead: the built-in generator at 512×512 (PNGs of about 600 KiB, over the
 * inline limit, so each is uploaded), from an agent in a process of its own (`up --agent-process`, linked over its
 * WebSocket as a remote host is), 16 in flight with `Prefer: wait`; besides jobs/s it reports how long the engine sat
 * idle between batches (the run's time less its batches' compute times, per batch): what the agent's `computed`
 * report gives back.
 *
 * `--work oip` and `--work lone` measure one request at a time, the latency targets' loads: OIP infer on the built-in
 * `simple` (bench:oip's JSON and binary requests, taken in turn; infer/s and p50 / p99 per round), and one `mlp` job
 * at a time (bench:overhead's: a 202 and its end from `/v1/events`, then `Prefer: wait`, in turn; jobs/s and p50 / p99).
 * A round's p50 and p99 are of its own requests; the medians over rounds are printed beside the rates.
 *
 *   git worktree add /tmp/base HEAD~1 && (cd /tmp/base && npm ci --ignore-scripts && npm run build)
 *   npm run bench:ab -- --base /tmp/base [--work mlp|pictures|oip|lone] [--jobs 10000|48|3000] [--rounds 6] [--inflight 64|16|1] [--warmup 5000|16]
 *   npm run bench:ab -- --node-args=--max-semi-space-size=16 --base-node-args=--max-semi-space-size=4
 *
 * `--config` and `--base-config` (JSON, merged into the mesh's configuration — over the bench's own, which lets mlp's
 * queue hold a whole round) measure a setting instead, on this checkout alone or against the base:
 *   npm run bench:ab -- --config='{"models":{"mlp":{"batching":{"maxBatchSize":64,"preferredBatchSizes":[64],"maxQueueDelayMs":2}}}}'
 */
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { removeDir, startMesh, waitFor, type RunningMesh } from '../test/helpers/mesh.js';
import { cpuMs, percentile, printTable, writeResults } from './lib.js';
import { BenchClient, closedLoop, mlpJob } from './mesh-client.js';
import { oipRequest } from './oip-requests.js';

const { values } = parseArgs({
  options: {
    base: { type: 'string' }, 'node-args': { type: 'string' }, 'base-node-args': { type: 'string' }, config: { type: 'string' }, 'base-config': { type: 'string' }, jobs: { type: 'string' }, rounds: { type: 'string', default: '6' },
    inflight: { type: 'string' }, warmup: { type: 'string' }, work: { type: 'string', default: 'mlp' },
  },
});
const WORKS = ['mlp', 'pictures', 'oip', 'lone'];
if (!WORKS.includes(values.work!)) {
  process.stderr.write(`bench:ab --work is ${WORKS.join(', ')}, not ${values.work}\n`);
  process.exit(2);
}
const PICTURES = values.work === 'pictures';
/** One request at a time, its latency measured: OIP infer on `simple`, or one mlp job. */
const LONE = values.work === 'oip' || values.work === 'lone';
if (!values.base && values['node-args'] === values['base-node-args'] && values.config === values['base-config']) {
  process.stderr.write('bench:ab needs --base <another checkout, built>, or Node options (--node-args, --base-node-args) or settings (--config, --base-config) that differ\n');
  process.exit(2);
}

type Settings = Record<string, unknown>;
/** `--config`'s JSON, or a usage error naming the option. */
function settings(option: 'config' | 'base-config'): Settings {
  if (values[option] === undefined) return {};
  try {
    const parsed = JSON.parse(values[option]!) as unknown;
    if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) return parsed as Settings;
  } catch { /* said below */ }
  process.stderr.write(`bench:ab --${option} takes a JSON object (mesh.yaml's settings), not ${values[option]}\n`);
  process.exit(2);
}
/** `over` laid over `base`, object by object (arrays and values replaced). */
function merged(base: Settings, over: Settings): Settings {
  const out: Settings = { ...base };
  for (const [key, value] of Object.entries(over)) {
    const under = out[key];
    const nested = (item: unknown): item is Settings => item !== null && typeof item === 'object' && !Array.isArray(item);
    out[key] = nested(under) && nested(value) ? merged(under, value) : value;
  }
  return out;
}
/** The bench's own settings: mlp's queue and the mesh's hold a whole round. */
const BENCH_SETTINGS: Settings = { models: { mlp: { maxQueueSize: 100_000 } }, queues: { maxTotal: 100_000 } };
const words = (text: string | undefined): string[] => text?.split(' ').filter(Boolean) ?? [];
const JOBS = Number(values.jobs ?? (PICTURES ? 48 : LONE ? 3000 : 10_000));
const ROUNDS = Number(values.rounds);
const INFLIGHT = Number(values.inflight ?? (PICTURES ? 16 : LONE ? 1 : 64));
const WARMUP = Number(values.warmup ?? (PICTURES ? 16 : 5000));
const SIDE = 512;

interface Build { name: string; mesh: RunningMesh; client: BenchClient; rounds: number[]; idleMs: number[]; p50: number[]; p99: number[]; cpuUs: number[] }

async function up(name: string, bin: string | undefined, nodeArgs: string[], config: Settings): Promise<Build> {
  const mesh = await startMesh({
    bin, nodeArgs, env: { GPUMESH_LOG_LEVEL: 'warn' }, args: PICTURES ? ['--agent-process'] : [], config: merged(BENCH_SETTINGS, config),
  });
  const client = new BenchClient(mesh.url, mesh.admin, INFLIGHT);
  await client.listen();
  if (PICTURES) await waitFor(async () => ((await client.request('GET', '/v1/hosts')).text.includes('"connected":true') ? true : null), { what: `${name}'s agent to link` });
  return { name, mesh, client, rounds: [], idleMs: [], p50: [], p99: [], cpuUs: [] };
}

/**
 * `count` picture jobs, `inflight` at a time, each waited for: jobs/s, and the engine's idle time per batch (the run's
 * time less the compute times of the batches its jobs ran in).
 */
async function pictureRound(client: BenchClient, count: number, inflight: number): Promise<{ rate: number; idleMsPerBatch: number }> {
  const batches = new Map<string, number>();
  let next = 0;
  const started = performance.now();
  await Promise.all(Array.from({ length: inflight }, async () => {
    for (let i = next++; i < count; i = next++) {
      const body = JSON.stringify({ type: 'image', model: 'gen', input: { prompt: `a round of pictures ${i}`, seed: i, width: SIDE, height: SIDE, steps: 4 } });
      let reply = await client.request('POST', '/v1/jobs', body, { prefer: 'wait=60' });
      let job = JSON.parse(reply.text);
      while (job.status !== 'succeeded') {
        if (reply.status >= 300 || job.status === 'failed') throw new Error(`picture job: ${reply.status} ${reply.text.slice(0, 300)}`);
        reply = await client.request('GET', `/v1/jobs/${String(job.id)}`);
        job = JSON.parse(reply.text);
      }
      batches.set(job.batch.id, job.attempts.at(-1).computeMs);
    }
  }));
  const elapsed = performance.now() - started;
  const computed = [...batches.values()].reduce((sum, ms) => sum + ms, 0);
  return { rate: (1000 * count) / elapsed, idleMsPerBatch: (elapsed - computed) / batches.size };
}

/** `count` requests one after another (`inflight` of them at a time), each one's milliseconds kept: requests/s and p50 / p99. */
async function loneRound(client: BenchClient, count: number, inflight: number): Promise<{ rate: number; p50: number; p99: number }> {
  const latencies: number[] = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(Array.from({ length: inflight }, async () => {
    for (let i = next++; i < count; i = next++) {
      const start = performance.now();
      if (values.work === 'oip') await oipRequest(client, i % 2 === 0 ? 'json' : 'binary');
      else if (i % 2 === 0) await client.run(mlpJob(i));
      else await client.runWaiting(mlpJob(i));
      latencies.push(performance.now() - start);
    }
  }));
  return { rate: (1000 * count) / (performance.now() - started), p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
}

const measure = async (build: Build, count: number): Promise<number> => {
  if (LONE) {
    const { rate, p50, p99 } = await loneRound(build.client, count, INFLIGHT);
    build.p50.push(p50);
    build.p99.push(p99);
    return rate;
  }
  if (!PICTURES) return closedLoop(build.client, count, INFLIGHT);
  const { rate, idleMsPerBatch } = await pictureRound(build.client, count, INFLIGHT);
  build.idleMs.push(idleMsPerBatch);
  return rate;
};

const median = (values: readonly number[]): number => percentile(values, 50);

const named = (what: string, ...args: (string | undefined)[]): string => [what, ...args.filter(Boolean)].join(' ');
const builds = [
  await up(named('this checkout', values['node-args'], values.config), undefined, words(values['node-args']), settings('config')),
  await up(named(values.base ? `base (${values.base})` : 'base', values['base-node-args'], values['base-config']), values.base && join(values.base, 'bin/gpumesh.js'),
    words(values['base-node-args']), settings('base-config')),
];
try {
  for (const build of builds) {
    await measure(build, WARMUP);
    build.idleMs.length = 0;
    build.p50.length = 0;
    build.p99.length = 0;
  }
  for (let round = 0; round < ROUNDS; round++) {
    // ABBA order: each build goes first as often as second.
    const order = round % 2 === 0 ? builds : [...builds].reverse();
    for (const build of order) {
      const cpuBefore = cpuMs([build.mesh.process.pid!]);
      build.rounds.push(await measure(build, JOBS));
      build.cpuUs.push(((cpuMs([build.mesh.process.pid!]) - cpuBefore) * 1000) / JOBS);
      const idle = PICTURES ? `, engine idle ${build.idleMs.at(-1)!.toFixed(1)} ms a batch` : LONE ? `, p50 ${build.p50.at(-1)!.toFixed(3)} ms, p99 ${build.p99.at(-1)!.toFixed(3)} ms` : '';
      process.stdout.write(`round ${round + 1}: ${build.name} ${build.rounds.at(-1)!.toFixed(PICTURES ? 2 : 0)} ${LONE ? 'requests' : 'jobs'}/s${idle}, ${build.cpuUs.at(-1)!.toFixed(0)} µs of CPU a ${LONE ? 'request' : 'job'}\n`);
    }
  }
} finally {
  for (const build of builds) {
    build.client.close();
    await build.mesh.stop();
    removeDir(build.mesh.data);
  }
}
const [mine, base] = builds as [Build, Build];
const ratios = mine.rounds.map((rate, index) => rate / base.rounds[index]!);
const WORK_NAMES: Record<string, string> = {
  mlp: 'mlp jobs', pictures: `${SIDE}×${SIDE} picture jobs (uploaded outputs, agent in its own process)`,
  oip: 'OIP infer requests on simple (JSON and binary in turn)', lone: 'mlp jobs (202 + /v1/events and Prefer: wait in turn)',
};
const digits = PICTURES ? 2 : 0;
const latency = (values: readonly number[]): string[] => [median(values).toFixed(3), values.map((ms) => ms.toFixed(3)).join(' / ')];
printTable(`\n${JOBS} ${WORK_NAMES[values.work!]} per round, ${INFLIGHT} in flight, ${ROUNDS} rounds in turn (${LONE ? 'requests' : 'jobs'}/s)`,
  ['build', 'median', 'rounds', 'CPU µs a job (median)', ...(PICTURES ? ['engine idle a batch (median ms)', 'rounds'] : []), ...(LONE ? ['p50 ms (median)', 'rounds', 'p99 ms (median)', 'rounds'] : [])],
  builds.map((build) => [build.name, median(build.rounds).toFixed(digits), build.rounds.map((rate) => rate.toFixed(digits)).join(' / '), median(build.cpuUs).toFixed(0),
    ...(PICTURES ? [median(build.idleMs).toFixed(1), build.idleMs.map((ms) => ms.toFixed(1)).join(' / ')] : []),
    ...(LONE ? [...latency(build.p50), ...latency(build.p99)] : [])]));
process.stdout.write(`\nthis checkout / base: ${(median(mine.rounds) / median(base.rounds)).toFixed(3)}× (median of the rounds' ratios ${median(ratios).toFixed(3)}×: ${ratios.map((ratio) => ratio.toFixed(2)).join(', ')})\n`);
process.stdout.write(`CPU of gpumesh up a ${LONE ? 'request' : 'job'}, this checkout / base: ${(median(mine.cpuUs) / median(base.cpuUs)).toFixed(3)}× (${median(mine.cpuUs).toFixed(0)} against ${median(base.cpuUs).toFixed(0)} µs)\n`);
writeResults('ab', { work: values.work, base: values.base ?? null, nodeArgs: values['node-args'] ?? null, baseNodeArgs: values['base-node-args'] ?? null, config: values.config ?? null, baseConfig: values['base-config'] ?? null, jobs: JOBS, rounds: ROUNDS, inflight: INFLIGHT, warmup: WARMUP, builds: builds.map((build) => ({ name: build.name, rounds: build.rounds, ...(PICTURES ? { idleMsPerBatch: build.idleMs } : {}), ...(LONE ? { p50: build.p50, p99: build.p99 } : {}), cpuUsPerJob: build.cpuUs })), ratios });
