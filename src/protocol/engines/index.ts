import type { EngineDescriptor } from './descriptor.js';
import { comfyUiDescriptor } from './comfyui.js';
import { execDescriptor } from './exec.js';
import { oipDescriptor } from './oip.js';
import { onnxDescriptor } from './onnx.js';
import { openAiImagesDescriptor } from './openai-images.js';
import { sdcppDescriptor } from './sdcpp.js';

export { controlMarkupIn, makesClips, type ControlMarkup, type EngineDescriptor } from './descriptor.js';

/**
 * Every engine gpumesh knows, one line each: what both sides must know about it (agent/engines/registry.ts adds
 * each one's factory). The orchestrator checks declared models' settings with these schemas and refuses client
 * text that carries an engine's control markup.
 */
export const ENGINE_DESCRIPTORS: readonly EngineDescriptor[] = [
  onnxDescriptor,
  sdcppDescriptor,
  openAiImagesDescriptor,
  comfyUiDescriptor,
  oipDescriptor,
  execDescriptor,
];

/** The names of the known engines, in registration order. */
export const ENGINE_NAMES: readonly string[] = ENGINE_DESCRIPTORS.map((descriptor) => descriptor.name);

/** The known engine of this name, if any. */
export function engineDescriptor(name: string): EngineDescriptor | undefined {
  return ENGINE_DESCRIPTORS.find((descriptor) => descriptor.name === name);
}
