import type { EngineModule } from '../module.js';
import { SdcppEngine } from './engine.js';
import { SdcppSettings } from './settings.js';

export { SdcppEngine } from './engine.js';
export type { SdcppEngineOptions } from './engine.js';
export { SdcppSettings } from './settings.js';
export { parseStepLines, StepLineTracker } from './step-lines.js';
export type { StepSample } from './step-lines.js';

/** stable-diffusion.cpp's sd-server, fronted or started by the agent (engines/registry.ts). */
export const sdcppEngine: EngineModule<typeof SdcppSettings> = {
  name: 'sdcpp', settings: SdcppSettings, server: true, needsFile: false,
  create: ({ endpoints, clock, log }) => new SdcppEngine({ endpoints, clock, log }),
};
