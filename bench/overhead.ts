/**
 * Mesh overhead: the same tiny image job (gen, 8×8, one step, PNG output) run
 * directly through the ONNX engine (its worker process, in-process client)
 * and through the whole mesh (HTTP → orchestrator → SQLite → link → agent →
 * engine → blob upload → publish → SSE), sequentially, one at a time.
 *
 *   npm run bench:overhead -- [--runs 1000] [--warmup 100]
 */
import { parseArgs } from 'node:util';
import { removeDir, startMesh } from '../test/helpers/mesh.js';
import { loadBuiltin, printTable, summarize, writeResults } from './lib.js';
import { BenchClient } from './mesh-client.js';

const { values } = parseArgs({ options: { runs: { type: 'string', default: '1000' }, warmup: { type: 'string', default: '100' } } });
const RUNS = Number(values.runs);
const WARMUP = Number(values.warmup);
const INPUT = { prompt: 'overhead', seed: 1, width: 8, height: 8, steps: 1 };

async function direct(): Promise<number[]> {
  const { loaded, close } = await loadBuiltin('gen');
  const times: number[] = [];
  for (let i = 0; i < WARMUP + RUNS; i++) {
    const start = performance.now();
    const { outputs: [output] } = await loaded.run([{ id: `d${i}`, input: INPUT }], () => {});
    if (!output?.ok) throw new Error('direct run failed');
    if (i >= WARMUP) times.push(performance.now() - start);
  }
  await close();
  return times;
}

async function mesh(): Promise<number[]> {
  const running = await startMesh({ env: { GPUMESH_LOG_LEVEL: 'warn' } });
  const client = new BenchClient(running.url, running.admin, 4);
  try {
    await client.listen();
    const times: number[] = [];
    for (let i = 0; i < WARMUP + RUNS; i++) {
      const took = await client.run({ type: 'image', input: INPUT });
      if (i >= WARMUP) times.push(took);
    }
    return times;
  } finally {
    client.close();
    await running.stop();
    removeDir(running.data);
  }
}

const directTimes = await direct();
const meshTimes = await mesh();
const d = summarize(directTimes);
const m = summarize(meshTimes);
const rows: (string | number)[][] = [
  ['direct engine call', d.p50, d.p90, d.p99, d.mean],
  ['through the mesh', m.p50, m.p90, m.p99, m.mean],
  ['mesh overhead', m.p50 - d.p50, m.p90 - d.p90, m.p99 - d.p99, m.mean - d.mean],
];
printTable(`gen 8×8, 1 step, ${RUNS} sequential runs after ${WARMUP} warm-up (ms)`, ['path', 'p50', 'p90', 'p99', 'mean'], rows);
const path = writeResults('overhead', {
  runs: RUNS, warmup: WARMUP, input: INPUT, direct: d, mesh: m,
  overhead: { p50: m.p50 - d.p50, p90: m.p90 - d.p90, p99: m.p99 - d.p99, mean: m.mean - d.mean },
  target: { p50: 0.5, p99: 2 },
});
process.stdout.write(`\nwrote ${path}\n`);
