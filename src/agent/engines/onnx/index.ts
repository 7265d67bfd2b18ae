import type { EngineModule } from '../module.js';
import { OnnxEngine } from './engine.js';
import { OnnxSettings } from './settings.js';

export { OnnxEngine, workerEnv } from './engine.js';
export { OnnxSettings, ONNX_PIPELINES, type OnnxPipeline } from './settings.js';

/** The built-in ONNX Runtime engine: one worker process per device (engines/registry.ts). */
export const onnxEngine: EngineModule<typeof OnnxSettings> = {
  name: 'onnx', settings: OnnxSettings, server: false, needsFile: true, nativeVideo: true,
  create: ({ supervisor, video }) => new OnnxEngine(supervisor, video ?? null),
};
