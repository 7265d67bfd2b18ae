/**
 * Dispatch throughput: many tiny jobs (the mlp tensor model, one 64-value
 * sample each) through gpumesh and through BullMQ on a local Redis, same
 * machine, same run, one worker process each. Two rows per system:
 *  - single submits, the same number of jobs kept in flight (closed loop);
 *  - bulk submits (gpumesh's POST /v1/jobs:batch, BullMQ's addBulk), every job
 *    sent in chunks as fast as the system takes them.
 * Reports jobs/s, submit→completion latency, and the CPU a job cost: the system's own processes (gpumesh up with its
 * engine worker; redis-server and the BullMQ worker), and the client's (this process, in that system's rounds). The
 * CPU a job is what a busier or quieter VM moves least: its rounds' rates can differ by a third within a run.
 *
 * Both systems are up for the whole run and measured in alternating rounds (gpumesh then BullMQ, then the other way
 * round): a shared VM's speed drifts by tens of percent over a minute, so a comparison of one system's minute with
 * the other's measures the drift; rounds in turn see the same drift. Medians of the rounds are compared.
 *
 *   npm run bench:dispatch -- [--jobs 10000] [--rounds 3] [--inflight 64] [--warmup 5000] [--chunk 500]
 *                              [--node-args="--trace-gc-nvp"]  (Node's options for `gpumesh up`, as for bench:overhead)
 *                              [--client node|raw]
 * `--client raw` sends gpumesh's single submits with bench/raw-http-client.ts (a keep-alive connection per job in
 * flight, each request's bytes written as they are: what a load generator such as wrk or perf_analyzer costs) instead
 * of node:http (BenchClient, the default, whose figure is the target's). On two cores the client's CPU is taken from
 * the system's: the two figures side by side say how much of gpumesh's throughput node:http's client costs it.
 * BullMQ has one client, its own.
 * The warm-up is long because V8 is still compiling the orchestrator's hot path after a few hundred jobs: a short one
 * measures the JIT's warm-up, not the steady state of a running mesh (bench/NOTES.md, "Why 5,000 warm-up runs").
 * Needs redis-server (Debian: apt-get install redis-server); the benchmark starts and stops its own.
 */
import { parseArgs } from 'node:util';
import { removeDir, startMesh } from '../test/helpers/mesh.js';
import { cpuMs, percentile, printTable, processTree, summarize, writeResults, type Summary } from './lib.js';
import { BenchClient, mlpSample } from './mesh-client.js';
import { RawHttpClient } from './raw-http-client.js';
import { bullmq, closedLoop, type Result, type System } from './systems.js';

const { values } = parseArgs({
  options: {
    jobs: { type: 'string', default: '10000' }, rounds: { type: 'string', default: '3' }, inflight: { type: 'string', default: '64' },
    warmup: { type: 'string', default: '5000' }, chunk: { type: 'string', default: '500' }, 'node-args': { type: 'string' },
    client: { type: 'string', default: 'node' },
  },
});
if (values.client !== 'node' && values.client !== 'raw') {
  process.stderr.write(`bench:dispatch --client is node or raw, not ${values.client}\n`);
  process.exit(2);
}
const CHUNK = Number(values.chunk);
const JOBS = Number(values.jobs);
const ROUNDS = Number(values.rounds);
const INFLIGHT = Number(values.inflight);
const WARMUP = Number(values.warmup);

/**
 * Send all JOBS in chunks of CHUNK, one chunk after another as soon as the last was accepted; `submit`
 * returns each chunk's completions. Latency is from the chunk's send to each job's completion.
 */
async function bulk(name: string, submit: (indices: number[]) => Promise<Promise<number>[]>): Promise<Result> {
  const completions: Promise<number>[] = [];
  const latencies: number[] = [];
  const start = performance.now();
  for (let first = 0; first < JOBS; first += CHUNK) {
    const sent = performance.now();
    const indices = Array.from({ length: Math.min(CHUNK, JOBS - first) }, (_, k) => first + k);
    for (const done of await submit(indices)) completions.push(done.then((at) => { latencies.push(at - sent); return at; }));
  }
  await Promise.all(completions);
  const seconds = (performance.now() - start) / 1000;
  return { name, seconds, jobsPerSecond: JOBS / seconds, latencies };
}

async function gpumesh(): Promise<System> {
  const mesh = await startMesh({ env: { GPUMESH_LOG_LEVEL: 'warn' }, nodeArgs: values['node-args']?.split(' ').filter(Boolean), config: { models: { mlp: { maxQueueSize: 100_000 } }, queues: { maxTotal: 100_000 } } });
  const client = new BenchClient(mesh.url, mesh.admin, INFLIGHT);
  await client.listen();
  // `--client raw`: a connection per job in flight, taken from the idle ones for each submit.
  const idle = values.client === 'raw' ? Array.from({ length: INFLIGHT }, () => new RawHttpClient(mesh.url)) : [];
  const headers = { authorization: `Bearer ${mesh.admin}`, 'content-type': 'application/json' };
  const submitRaw = async (body: string): Promise<string> => {
    const connection = idle.pop()!;
    try {
      return (JSON.parse((await connection.send(RawHttpClient.request(mesh.url, 'POST', '/v1/jobs', headers, body), 202)).toString()) as { id: string }).id;
    } finally {
      idle.push(connection);
    }
  };
  return {
    name: values.client === 'raw' ? 'gpumesh (raw client)' : 'gpumesh',
    single: values.client === 'raw'
      ? async (i) => {
        await client.completion(await submitRaw(JSON.stringify({ type: 'tensor', input: { x: mlpSample(i) } })));
      }
      : async (i) => {
        await client.run({ type: 'tensor', input: { x: mlpSample(i) } });
      },
    bulk: async (indices) => {
      const reply = await client.request('POST', '/v1/jobs:batch', JSON.stringify({ jobs: indices.map((i) => ({ type: 'tensor', input: { x: mlpSample(i) } })) }));
      if (reply.status !== 207) throw new Error(`bulk submit failed: ${reply.status} ${reply.text}`);
      const results = (JSON.parse(reply.text) as { results: { status: number; id?: string }[] }).results;
      return results.map((result) => {
        if (result.status !== 202) throw new Error(`a bulk item was refused: ${JSON.stringify(result)}`);
        return client.completion(result.id!).then((end) => end.at);
      });
    },
    processes: () => processTree(mesh.process.pid!),
    close: async () => {
      client.close();
      for (const connection of idle) connection.close();
      await mesh.stop();
      removeDir(mesh.data);
    },
  };
}

const median = (values: readonly number[]): number => percentile(values, 50);

/** The CPU a round took a job, in µs: the system's own processes (server and workers), and the client's (this process). */
interface RoundCpu { server: number; client: number }
type MeasuredRound = Result & { cpu: RoundCpu };

/** Run one round of `system`, with the CPU it took. */
async function measured(system: System, round: () => Promise<Result>): Promise<MeasuredRound> {
  const processes = system.processes();
  const server = cpuMs(processes);
  const client = process.cpuUsage();
  const result = await round();
  const clientUs = process.cpuUsage(client);
  return { ...result, cpu: { server: ((cpuMs(processes) - server) * 1000) / JOBS, client: (clientUs.user + clientUs.system) / JOBS } };
}

/**
 * Each system's rounds of one mode, pooled: the median round's jobs/s, latency over every job of every round, and the
 * median round's CPU a job (the system's processes; the client's).
 */
function pooled(rounds: MeasuredRound[], label: string): { name: string; jobsPerSecond: number; perRound: number[]; latency: Summary; cpu: RoundCpu } {
  return {
    name: label, jobsPerSecond: median(rounds.map((round) => round.jobsPerSecond)),
    perRound: rounds.map((round) => Math.round(round.jobsPerSecond)), latency: summarize(rounds.flatMap((round) => round.latencies)),
    cpu: { server: median(rounds.map((round) => round.cpu.server)), client: median(rounds.map((round) => round.cpu.client)) },
  };
}

const cpuText = (cpu: RoundCpu): string => `${cpu.server.toFixed(0)} + ${cpu.client.toFixed(0)} µs`;

// BullMQ first: a missing redis-server ends the bench before a mesh is started, and a mesh that fails to start takes
// BullMQ's processes down with it.
const theirs = await bullmq();
const ours = await gpumesh().catch(async (error: unknown) => {
  await theirs.close();
  throw error;
});
const systems = [ours, theirs];
const rounds = { single: new Map<System, MeasuredRound[]>(), bulk: new Map<System, MeasuredRound[]>() };
try {
  // Warm-up (model load, connections, V8's JIT): WARMUP jobs each, unmeasured.
  for (const system of systems) await closedLoop('warm-up', WARMUP, INFLIGHT, (i) => system.single(-1 - i));
  for (let round = 0; round < ROUNDS; round++) {
    for (const system of round % 2 === 0 ? systems : [...systems].reverse()) {
      const result = await measured(system, () => closedLoop(system.name, JOBS, INFLIGHT, (i) => system.single(i)));
      rounds.single.set(system, [...(rounds.single.get(system) ?? []), result]);
      process.stderr.write(`round ${round + 1}, single: ${system.name} ${Math.round(result.jobsPerSecond)} jobs/s, CPU a job ${cpuText(result.cpu)}\n`);
    }
  }
  for (let round = 0; round < ROUNDS; round++) {
    for (const system of round % 2 === 0 ? systems : [...systems].reverse()) {
      const result = await measured(system, () => bulk(system.name, (indices) => system.bulk(indices)));
      rounds.bulk.set(system, [...(rounds.bulk.get(system) ?? []), result]);
      process.stderr.write(`round ${round + 1}, bulk: ${system.name} ${Math.round(result.jobsPerSecond)} jobs/s, CPU a job ${cpuText(result.cpu)}\n`);
    }
  }
} finally {
  for (const system of systems) await system.close();
}

const rows = [
  pooled(rounds.single.get(ours)!, `${ours.name}, single submits`), pooled(rounds.single.get(theirs)!, 'BullMQ + Redis, add'),
  pooled(rounds.bulk.get(ours)!, `${ours.name}, bulk submits`), pooled(rounds.bulk.get(theirs)!, 'BullMQ + Redis, addBulk'),
];
printTable(`${JOBS} tiny tensor jobs per round, ${ROUNDS} rounds in turn, one worker process each; single: ${INFLIGHT} in flight; bulk: chunks of ${CHUNK} (jobs/s: median round; latency in ms over every round; CPU a job: the median round's, the system's processes + the client's)`,
  ['system', 'jobs/s', 'rounds', 'p50', 'p90', 'p99', 'CPU µs a job'],
  rows.map((row) => [row.name, row.jobsPerSecond, row.perRound.join(' / '), row.latency.p50, row.latency.p90, row.latency.p99, cpuText(row.cpu)]));
const total = (cpu: RoundCpu): number => cpu.server + cpu.client;
const compare = (ours: (typeof rows)[number], theirs: (typeof rows)[number]): { ratio: number; roundRatios: number[]; line: string } => {
  const ratio = ours.jobsPerSecond / theirs.jobsPerSecond;
  const roundRatios = ours.perRound.map((value, index) => value / theirs.perRound[index]!);
  return {
    ratio, roundRatios,
    line: `${ours.name} / ${theirs.name}: ${ratio.toFixed(2)}× the throughput (rounds ${roundRatios.map((r) => r.toFixed(2)).join(', ')}), `
      + `p99 ${ours.latency.p99.toFixed(1)} vs ${theirs.latency.p99.toFixed(1)} ms, `
      + `${(total(ours.cpu) / total(theirs.cpu)).toFixed(2)}× the CPU a job (${total(ours.cpu).toFixed(0)} vs ${total(theirs.cpu).toFixed(0)} µs)`,
  };
};
const single = compare(rows[0]!, rows[1]!);
const many = compare(rows[2]!, rows[3]!);
process.stdout.write(`\n${single.line} (target ≥ 2.5× at a lower p99, issue 30; ≥ 2× before it)\n${many.line}\n`);
process.stdout.write(`wrote ${writeResults('dispatch', {
  jobs: JOBS, rounds: ROUNDS, inflight: INFLIGHT, chunk: CHUNK, warmup: WARMUP, client: values.client, results: rows,
  ratio: single.ratio, roundRatios: single.roundRatios, bulkRatio: many.ratio, bulkRoundRatios: many.roundRatios,
})}\n`);
