/**
 * Fairness between grant lineages: one lineage (A) queues a burst of picture jobs through POST /v1/jobs:batch, then
 * another lineage (B) submits a single picture of the same shape. How long does B's picture wait — from its submit to
 * its result — and how many of A's pictures finished before it? Before round-robin between lineages it waited behind
 * the whole burst; the target is about one batch.
 *
 *   npm run bench:fairness -- [--jobs 300] [--rounds 2] [--side 256] [--steps 8] [--bin <another build's bin/gpumesh.js>]
 *
 * `--bin` runs the same measurement on another build (a checkout of main, built), for the before/after in
 * bench/RESULTS.md. One `gpumesh up` (its local agent and engine worker) per run; A and B are two client grants it
 * mints, so two lineages. The model is warmed with one picture first, so no round measures the model's load.
 */
import { parseArgs } from 'node:util';
import { removeDir, startMesh } from '../test/helpers/mesh.js';
import { printTable, summarize, writeResults } from './lib.js';
import { BenchClient } from './mesh-client.js';

const { values } = parseArgs({
  options: {
    jobs: { type: 'string', default: '300' }, rounds: { type: 'string', default: '2' }, side: { type: 'string', default: '256' },
    steps: { type: 'string', default: '8' }, bin: { type: 'string' },
  },
});
const JOBS = Number(values.jobs);
const ROUNDS = Number(values.rounds);
const SIDE = Number(values.side);
const STEPS = Number(values.steps);

const picture = (prompt: string, seed: number) => ({ type: 'image', model: 'gen', input: { prompt, seed, width: SIDE, height: SIDE, steps: STEPS } });

async function mintClient(admin: BenchClient, note: string): Promise<string> {
  const reply = await admin.request('POST', '/v1/grants', JSON.stringify({ kind: 'client', note }));
  if (reply.status !== 201 && reply.status !== 200) throw new Error(`minting ${note}: ${reply.status} ${reply.text}`);
  return (JSON.parse(reply.text) as { token: string }).token;
}

interface Round { waitMs: number; aBeforeB: number; burstMs: number }

const mesh = await startMesh({ ...(values.bin ? { bin: values.bin } : {}), config: { models: { gen: { maxQueueSize: Math.max(1000, JOBS * 2) } } } });
try {
  const admin = new BenchClient(mesh.url, mesh.admin);
  const a = new BenchClient(mesh.url, await mintClient(admin, 'lineage A (the burst)'));
  const b = new BenchClient(mesh.url, await mintClient(admin, 'lineage B (one picture)'));
  await Promise.all([a.listen(), b.listen()]);
  await b.run(picture('warm-up', 0));
  const rounds: Round[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const jobs = Array.from({ length: JOBS }, (_, i) => picture(`burst ${round} ${i}`, i + 1));
    const burstAt = performance.now();
    const reply = await a.request('POST', '/v1/jobs:batch', JSON.stringify({ jobs }));
    const results = (JSON.parse(reply.text) as { results: { status: number; id?: string }[] }).results;
    const ids = results.flatMap((result) => (result.status === 202 && result.id ? [result.id] : []));
    if (ids.length !== JOBS) throw new Error(`the burst was not all admitted: ${reply.status} ${reply.text.slice(0, 500)}`);
    const single = await b.submit(picture(`single ${round}`, 7));
    const submittedAt = performance.now();
    const ended = await b.completion(single);
    if (ended.type !== 'succeeded') throw new Error(`B's picture ${ended.type}`);
    const aBeforeB = ids.filter((id) => (a.ended(id)?.at ?? Infinity) < ended.at).length;
    const last = await Promise.all(ids.map((id) => a.completion(id)));
    rounds.push({ waitMs: ended.at - submittedAt, aBeforeB, burstMs: Math.max(...last.map((end) => end.at)) - burstAt });
    process.stdout.write(`round ${round + 1}: B waited ${(rounds.at(-1)!.waitMs / 1000).toFixed(2)} s, ${aBeforeB} of A's ${JOBS} finished before it\n`);
  }
  a.close();
  b.close();
  admin.close();
  const waits = summarize(rounds.map((round) => round.waitMs / 1000));
  printTable(`B's single ${SIDE}x${SIDE} picture (${STEPS} steps) behind A's ${JOBS} (${values.bin ?? 'this build'})`,
    ['round', 'B waited s', "A's done before B", "A's burst s"],
    rounds.map((round, index) => [index + 1, round.waitMs / 1000, round.aBeforeB, round.burstMs / 1000]));
  process.stdout.write(`\nB waited: median ${waits.p50.toFixed(2)} s, max ${waits.max.toFixed(2)} s\n`);
  process.stdout.write(`results: ${writeResults('fairness', { jobs: JOBS, side: SIDE, steps: STEPS, bin: values.bin ?? null, rounds })}\n`);
} finally {
  await mesh.stop();
  removeDir(mesh.data);
}
