export { ComfyUiEngine, type ComfyUiEngineOptions } from './engine.js';
export { ComfyUiSettings, NAMED_INPUTS, type NamedInput } from './settings.js';
