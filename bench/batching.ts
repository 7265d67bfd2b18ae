/**
 * Batching gain: the same work at batch 1, 4, 8 and 32, run as ONE fused
 * session.run per step in the ONNX engine's worker process, side by side in
 * one run. Tensor model (mlp) and generator (gen at 64×64 and 256×256).
 *
 *   npm run bench:batching -- [--seconds 2]
 */
import { parseArgs } from 'node:util';
import type { EngineJob } from '../src/agent/core/engine.js';
import { MLP_INPUT_DIM } from '../src/builtin-models/index.js';
import { loadBuiltin, printTable, writeResults } from './lib.js';

const { values } = parseArgs({ options: { seconds: { type: 'string', default: '2' } } });
const SECONDS = Number(values.seconds);
const SIZES = [1, 4, 8, 32];

interface Row { model: string; shape: string; batch: number; itemsPerSecond: number; msPerItem: number; runs: number }

/** Run batches of `size` for about SECONDS (at least 3 runs, after one warm-up); return the throughput. */
async function measure(run: (jobs: EngineJob[]) => Promise<unknown>, make: (i: number) => EngineJob, size: number): Promise<{ itemsPerSecond: number; runs: number }> {
  const jobs = Array.from({ length: size }, (_, i) => make(i));
  await run(jobs);
  let runs = 0;
  const start = performance.now();
  while (runs < 3 || performance.now() - start < SECONDS * 1000) {
    await run(jobs);
    runs++;
  }
  return { itemsPerSecond: (runs * size) / ((performance.now() - start) / 1000), runs };
}

const rows: Row[] = [];
const mlp = await loadBuiltin('mlp');
for (const batch of SIZES) {
  const result = await measure((jobs) => mlp.loaded.run(jobs, () => {}), (i) => ({ id: `t${i}`, input: { x: Array.from({ length: MLP_INPUT_DIM }, (_, k) => Math.sin(i * 7 + k)) } }), batch);
  rows.push({ model: 'mlp', shape: '64→16', batch, ...result, msPerItem: 1000 / result.itemsPerSecond });
}
await mlp.close();

const gen = await loadBuiltin('gen', 8192);
for (const side of [64, 256]) {
  for (const batch of SIZES) {
    const result = await measure((jobs) => gen.loaded.run(jobs, () => {}), (i) => ({ id: `g${i}`, input: { prompt: `batch ${i}`, seed: i, width: side, height: side, steps: 6 } }), batch);
    rows.push({ model: 'gen', shape: `${side}×${side}, 6 steps`, batch, ...result, msPerItem: 1000 / result.itemsPerSecond });
  }
}
await gen.close();

const base = (row: Row): Row => rows.find((other) => other.model === row.model && other.shape === row.shape && other.batch === 1)!;
printTable(`fused batches, ${SECONDS} s per point`, ['model', 'shape', 'batch', 'items/s', 'ms/item', 'vs batch 1', 's/item vs 1'],
  rows.map((row) => [row.model, row.shape, String(row.batch), row.itemsPerSecond, row.msPerItem, `${(row.itemsPerSecond / base(row).itemsPerSecond).toFixed(2)}×`, `${(row.msPerItem / base(row).msPerItem).toFixed(2)}×`]));

const at = (model: string, shape: string, batch: number): Row => rows.find((row) => row.model === model && row.shape.startsWith(shape) && row.batch === batch)!;
const margins = {
  mlpBatch8Throughput: { measured: at('mlp', '64', 8).itemsPerSecond / at('mlp', '64', 1).itemsPerSecond, target: '≥ 4×' },
  gen64Batch4SecondsPerImage: { measured: at('gen', '64×64', 4).msPerItem / at('gen', '64×64', 1).msPerItem, target: '≤ 0.8×' },
};
process.stdout.write(`\nmlp batch 8 throughput: ${margins.mlpBatch8Throughput.measured.toFixed(2)}× batch 1 (target ≥ 4×)\n`);
process.stdout.write(`gen 64×64 batch 4 s/image: ${margins.gen64Batch4SecondsPerImage.measured.toFixed(2)}× batch 1 (target ≤ 0.8×)\n`);
process.stdout.write(`wrote ${writeResults('batching', { seconds: SECONDS, rows, margins })}\n`);
