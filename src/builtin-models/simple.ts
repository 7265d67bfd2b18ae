/**
 * `simple`: the model every Triton client example calls — two INT32 inputs of 16 values, their sum and difference.
 *
 *   INPUT0, INPUT1 int32 [batch, 16] → OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 − INPUT1 (int32 [batch, 16])
 *
 * Triton's has `max_batch_size: 8` and dims [16], so a request sends [1, 16]: here the first dimension is variable
 * (requests stack along it) and clients written for Triton work unchanged.
 */
import { GraphBuilder } from './onnx-graph.js';

export const SIMPLE_DIM = 16;

/** Builds the `simple` ONNX model. Deterministic: same bytes on every call and machine. */
export function buildSimple(): Uint8Array {
  const g = new GraphBuilder('gpumesh_simple', 'Triton\'s simple example: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1.');
  const a = g.input('INPUT0', 'int32', ['batch', SIMPLE_DIM]);
  const b = g.input('INPUT1', 'int32', ['batch', SIMPLE_DIM]);
  g.op('Add', [a, b], {}, 'OUTPUT0');
  g.op('Sub', [a, b], {}, 'OUTPUT1');
  g.output('OUTPUT0', 'int32', ['batch', SIMPLE_DIM]);
  g.output('OUTPUT1', 'int32', ['batch', SIMPLE_DIM]);
  return g.toBytes();
}
