export { OpenAiImagesEngine } from './engine.js';
export type { OpenAiImagesEngineOptions } from './engine.js';
export { OpenAiImagesSettings } from './settings.js';
