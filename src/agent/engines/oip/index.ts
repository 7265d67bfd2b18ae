import type { EngineModule } from '../kit/module.js';
import { OipEngine } from './engine.js';
import { oipDescriptor, type OipSettings } from '../../../protocol/engines/oip.js';

export { OipEngine } from './engine.js';
export { OipSettings } from '../../../protocol/engines/oip.js';

/** The agent's side of the engine: its descriptor and how to build it (engines/registry.ts). */
export const oipEngine: EngineModule<typeof OipSettings> = {
  descriptor: oipDescriptor,
  create: ({ endpoints }) => new OipEngine({ endpoints }),
};
