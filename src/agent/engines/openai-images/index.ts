import type { EngineModule } from '../module.js';
import { OpenAiImagesEngine } from './engine.js';
import { OpenAiImagesSettings } from './settings.js';

export { OpenAiImagesEngine } from './engine.js';
export type { OpenAiImagesEngineOptions } from './engine.js';
export { OpenAiImagesSettings } from './settings.js';

/** Any server with OpenAI's images API, fronted or started by the agent (engines/registry.ts). */
export const openAiImagesEngine: EngineModule<typeof OpenAiImagesSettings> = {
  name: 'openai-images', settings: OpenAiImagesSettings, server: true, needsFile: false,
  create: ({ endpoints, clock, log }) => new OpenAiImagesEngine({ endpoints, clock, log }),
};
