import type { EngineModule } from '../kit/module.js';
import { SdcppEngine } from './engine.js';
import { sdcppDescriptor, type SdcppSettings } from '../../../protocol/engines/sdcpp.js';

export { SdcppEngine } from './engine.js';
export { SdcppSettings } from '../../../protocol/engines/sdcpp.js';
export { parseStepLines, StepLineTracker } from './step-lines.js';
export type { StepSample } from './step-lines.js';

/** The agent's side of the engine: its descriptor and how to build it (engines/registry.ts). */
export const sdcppEngine: EngineModule<typeof SdcppSettings> = {
  descriptor: sdcppDescriptor,
  create: ({ endpoints, clock, log }) => new SdcppEngine({ endpoints, clock, log }),
};
