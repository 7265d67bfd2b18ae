export { OipEngine, type OipEngineOptions } from './engine.js';
export { OipSettings } from './settings.js';
