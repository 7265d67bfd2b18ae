import type { EngineModule } from '../module.js';
import { ComfyUiEngine } from './engine.js';
import { ComfyUiSettings } from './settings.js';

export { ComfyUiEngine, type ComfyUiEngineOptions } from './engine.js';
export { ComfyUiSettings, NAMED_INPUTS, type NamedInput } from './settings.js';

/** ComfyUI workflows, on a ComfyUI fronted or started by the agent (engines/registry.ts). */
export const comfyUiEngine: EngineModule<typeof ComfyUiSettings> = {
  name: 'comfyui', settings: ComfyUiSettings, server: true, needsFile: false,
  create: ({ endpoints, log }) => new ComfyUiEngine({ endpoints, log }),
};
