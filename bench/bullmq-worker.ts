/**
 * The BullMQ side of bench/dispatch: one worker process that runs the same
 * tensor model (mlp, onnxruntime-node on the CPU) for each job.
 * Usage: node --import tsx bench/bullmq-worker.ts <redis port> <queue>
 */
import { Worker } from 'bullmq';
import * as ort from 'onnxruntime-node';
import { builtinModel, MLP_INPUT_DIM } from '../src/builtin-models/index.js';

const [port, queue] = process.argv.slice(2);
// The session options gpumesh's ONNX engine gives the built-in mlp (its threads, no spinning), so both run the model alike.
const session = await ort.InferenceSession.create(builtinModel('mlp')!.bytes, {
  intraOpNumThreads: builtinModel('mlp')!.threads,
  graphOptimizationLevel: 'all', extra: { session: { intra_op: { allow_spinning: '0' }, inter_op: { allow_spinning: '0' } } },
});
const worker = new Worker(queue!, async (job) => {
  const x = Float32Array.from(job.data.x as number[]);
  const out = await session.run({ x: new ort.Tensor('float32', x, [1, MLP_INPUT_DIM]) });
  return { y: Array.from(out.y!.data as Float32Array) };
}, { connection: { host: '127.0.0.1', port: Number(port) }, concurrency: 1 });
await worker.waitUntilReady();
process.send?.('ready');
process.on('SIGTERM', () => void worker.close().then(() => process.exit(0)));
