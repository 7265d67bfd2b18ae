import type { EngineModule } from '../kit/module.js';
import { ComfyUiEngine } from './engine.js';
import { comfyUiDescriptor, type ComfyUiSettings } from '../../../protocol/engines/comfyui.js';

export { ComfyUiEngine } from './engine.js';
export { ComfyUiSettings, NAMED_INPUTS, type NamedInput } from '../../../protocol/engines/comfyui.js';

/** The agent's side of the engine: its descriptor and how to build it (engines/registry.ts). */
export const comfyUiEngine: EngineModule<typeof ComfyUiSettings> = {
  descriptor: comfyUiDescriptor,
  create: ({ endpoints, log }) => new ComfyUiEngine({ endpoints, log }),
};
