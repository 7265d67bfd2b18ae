import type { EngineModule } from '../module.js';
import { OipEngine } from './engine.js';
import { OipSettings } from './settings.js';

export { OipEngine, type OipEngineOptions } from './engine.js';
export { OipSettings } from './settings.js';

/** Tensor models on an Open Inference Protocol v2 server (Triton, KServe), fronted or started by the agent (engines/registry.ts). */
export const oipEngine: EngineModule<typeof OipSettings> = {
  name: 'oip', settings: OipSettings, server: true, needsFile: false,
  create: ({ endpoints }) => new OipEngine({ endpoints }),
};
