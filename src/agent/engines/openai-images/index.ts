import type { EngineModule } from '../kit/module.js';
import { OpenAiImagesEngine } from './engine.js';
import { openAiImagesDescriptor, type OpenAiImagesSettings } from '../../../protocol/engines/openai-images.js';

export { OpenAiImagesEngine } from './engine.js';
export type { OpenAiImagesEngineOptions } from './engine.js';
export { OpenAiImagesSettings } from '../../../protocol/engines/openai-images.js';

/** The agent's side of the engine: its descriptor and how to build it (engines/registry.ts). */
export const openAiImagesEngine: EngineModule<typeof OpenAiImagesSettings> = {
  descriptor: openAiImagesDescriptor,
  create: ({ endpoints, clock, log }) => new OpenAiImagesEngine({ endpoints, clock, log }),
};
