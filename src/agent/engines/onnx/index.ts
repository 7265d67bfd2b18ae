import type { EngineModule } from '../kit/module.js';
import { OnnxEngine } from './engine.js';
import { onnxDescriptor, type OnnxSettings } from '../../../protocol/engines/onnx.js';

export { OnnxEngine, onnxWorkerEntry, workerEnv } from './engine.js';
export { OnnxSettings, ONNX_PIPELINES, type OnnxPipeline } from '../../../protocol/engines/onnx.js';

/** The agent's side of the engine: its descriptor and how to build it (engines/registry.ts). */
export const onnxEngine: EngineModule<typeof OnnxSettings> = {
  descriptor: onnxDescriptor,
  create: ({ supervisor, video }) => new OnnxEngine(supervisor, video ?? null),
};
