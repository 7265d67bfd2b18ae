/**
 * Two builds of gpumesh side by side: this checkout against another (`--base`, a checkout or worktree of an earlier
 * commit, built) or against itself started with other Node options (`--node-args` for this one, `--base-node-args`
 * for the other: e.g. two sizes of V8's young generation), both up for the whole run, measured in alternating rounds of many tiny `mlp` jobs kept in flight
 * (the dispatch benchmark's single submits) — the way to tell a change of a few per cent from the VM's drift, which
 * moves a whole run by tens of per cent (bench/RESULTS.md). Prints each round and the medians, writes bench/out/ab.json.
 *
 *   git worktree add /tmp/base HEAD~1 && (cd /tmp/base && npm ci --ignore-scripts && npm run build)
 *   npm run bench:ab -- --base /tmp/base [--jobs 10000] [--rounds 6] [--inflight 64] [--warmup 5000]
 *   npm run bench:ab -- --node-args=--max-semi-space-size=16 --base-node-args=--max-semi-space-size=4
 */
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { removeDir, startMesh, type RunningMesh } from '../test/helpers/mesh.js';
import { percentile, printTable, writeResults } from './lib.js';
import { BenchClient, closedLoop } from './mesh-client.js';

const { values } = parseArgs({
  options: {
    base: { type: 'string' }, 'node-args': { type: 'string' }, 'base-node-args': { type: 'string' }, jobs: { type: 'string', default: '10000' }, rounds: { type: 'string', default: '6' },
    inflight: { type: 'string', default: '64' }, warmup: { type: 'string', default: '5000' },
  },
});
if (!values.base && values['node-args'] === values['base-node-args']) {
  process.stderr.write('bench:ab needs --base <another checkout, built>, or Node options that differ (--node-args, --base-node-args)\n');
  process.exit(2);
}
const words = (text: string | undefined): string[] => text?.split(' ').filter(Boolean) ?? [];
const JOBS = Number(values.jobs);
const ROUNDS = Number(values.rounds);
const INFLIGHT = Number(values.inflight);
const WARMUP = Number(values.warmup);

interface Build { name: string; mesh: RunningMesh; client: BenchClient; rounds: number[] }

async function up(name: string, bin: string | undefined, nodeArgs: string[]): Promise<Build> {
  const mesh = await startMesh({ bin, nodeArgs, env: { GPUMESH_LOG_LEVEL: 'warn' }, config: { models: { mlp: { maxQueueSize: 100_000 } }, queues: { maxTotal: 100_000 } } });
  const client = new BenchClient(mesh.url, mesh.admin, INFLIGHT);
  await client.listen();
  return { name, mesh, client, rounds: [] };
}

const median = (values: readonly number[]): number => percentile(values, 50);

const named = (what: string, args: string | undefined): string => (args ? `${what} ${args}` : what);
const builds = [
  await up(named('this checkout', values['node-args']), undefined, words(values['node-args'])),
  await up(named(values.base ? `base (${values.base})` : 'base', values['base-node-args']), values.base && join(values.base, 'bin/gpumesh.js'), words(values['base-node-args'])),
];
try {
  for (const build of builds) await closedLoop(build.client, WARMUP, INFLIGHT);
  for (let round = 0; round < ROUNDS; round++) {
    // ABBA order: each build goes first as often as second.
    const order = round % 2 === 0 ? builds : [...builds].reverse();
    for (const build of order) {
      build.rounds.push(await closedLoop(build.client, JOBS, INFLIGHT));
      process.stdout.write(`round ${round + 1}: ${build.name} ${build.rounds.at(-1)!.toFixed(0)} jobs/s\n`);
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
printTable(`\n${JOBS} mlp jobs per round, ${INFLIGHT} in flight, ${ROUNDS} rounds in turn (jobs/s)`, ['build', 'median', 'rounds'], builds.map((build) => [build.name, median(build.rounds).toFixed(0), build.rounds.map((rate) => rate.toFixed(0)).join(' / ')]));
process.stdout.write(`\nthis checkout / base: ${(median(mine.rounds) / median(base.rounds)).toFixed(3)}× (median of the rounds' ratios ${median(ratios).toFixed(3)}×: ${ratios.map((ratio) => ratio.toFixed(2)).join(', ')})\n`);
writeResults('ab', { base: values.base ?? null, nodeArgs: values['node-args'] ?? null, baseNodeArgs: values['base-node-args'] ?? null, jobs: JOBS, rounds: ROUNDS, inflight: INFLIGHT, warmup: WARMUP, builds: builds.map((build) => ({ name: build.name, rounds: build.rounds })), ratios });
