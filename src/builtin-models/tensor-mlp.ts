/**
 * `mlp`: a small tensor model used to measure dynamic batching.
 *
 *   x float32 [batch, 64] → Gemm 64→256, Relu → Gemm 256→256, Relu → Gemm 256→16 → y float32 [batch, 16]
 *
 * Weights are He-initialised from a fixed-seed PRNG; the file is the same on
 * every build.
 */
import { GraphBuilder } from './onnx-graph.js';
import { Prng } from './prng.js';

export const MLP_INPUT_DIM = 64;
export const MLP_HIDDEN_DIM = 256;
export const MLP_OUTPUT_DIM = 16;

const SEED = 0x6d6c7031; // "mlp1"

/** Builds the `mlp` ONNX model. Deterministic: same bytes on every call and machine. */
export function buildTensorMlp(): Uint8Array {
  const rng = new Prng(SEED);
  const g = new GraphBuilder('gpumesh_mlp', 'gpumesh built-in tensor MLP 64→256→256→16, batch along axis 0.');
  const x = g.input('x', 'float32', ['batch', MLP_INPUT_DIM]);

  const dims = [MLP_INPUT_DIM, MLP_HIDDEN_DIM, MLP_HIDDEN_DIM, MLP_OUTPUT_DIM] as const;
  let h = x;
  for (let layer = 0; layer < dims.length - 1; layer++) {
    const fanIn = dims[layer] ?? 0;
    const fanOut = dims[layer + 1] ?? 0;
    const last = layer === dims.length - 2;
    const std = (last ? 1 : Math.SQRT2) / Math.sqrt(fanIn);
    const w = g.floatInit(`w${layer + 1}`, [fanIn, fanOut], rng.normals(fanIn * fanOut, std));
    const b = g.floatInit(`b${layer + 1}`, [fanOut], rng.normals(fanOut, 0.05));
    h = last ? g.op('Gemm', [h, w, b], {}, 'y') : g.op('Relu', [g.op('Gemm', [h, w, b])], {}, `h${layer + 1}`);
  }
  g.output('y', 'float32', ['batch', MLP_OUTPUT_DIM]);
  return g.toBytes();
}
