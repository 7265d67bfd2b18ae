export { SdcppEngine } from './engine.js';
export type { SdcppEngineOptions } from './engine.js';
export { SdcppSettings } from './settings.js';
export { parseStepLines, StepLineTracker } from './step-lines.js';
export type { StepSample } from './step-lines.js';
