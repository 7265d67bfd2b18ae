import { z } from 'zod';

/** The ways the ONNX worker turns a batch of job inputs into tensors and the outputs back into results (pipelines.ts). */
export const ONNX_PIPELINES = ['cppn-image', 'tensor'] as const;
export type OnnxPipeline = (typeof ONNX_PIPELINES)[number];

/**
 * `settings` of a model the built-in ONNX engine runs. The options type is the
 * configuration reference: every field says its default.
 */
export const OnnxSettings = z.strictObject({
  /**
   * How the worker feeds the model: `cppn-image`, the built-in generator's refinement loop (one session.run per
   * step, the canvas fed back), or `tensor`, a plain model with one input `x` of `params.inputDim` values per job and
   * one output `y` (a batch is stacked along axis 0). Required.
   */
  pipeline: z.enum(ONNX_PIPELINES),
});
export type OnnxSettings = z.infer<typeof OnnxSettings>;
