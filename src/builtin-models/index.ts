export {
  GEN_CHANNELS,
  GEN_COORD_DIM,
  GEN_DEFAULT_STEPS,
  GEN_LATENT_DIM,
  buildGenerator,
  canvasFor,
  coordsFor,
  latentFor,
  walkLatent,
  latentsFor,
} from './generator.js';
export { MLP_HIDDEN_DIM, MLP_INPUT_DIM, MLP_OUTPUT_DIM, buildTensorMlp } from './tensor-mlp.js';
export { SIMPLE_DIM, buildSimple } from './simple.js';
export { builtinModel, builtinModels } from './builtin.js';
export { sha256Digest } from '../protocol/digest.js';
export type { BuiltinModel, TensorSpec } from './builtin.js';
export { Prng } from './prng.js';
export { GraphBuilder, IR_VERSION, OPSET_VERSION, PRODUCER_NAME, elemTypeCode, float, floats, int, ints, str } from './onnx-graph.js';
export type { Attr, Dim, ElemType } from './onnx-graph.js';
