import { withFramesFromImages } from '../video/frames-from-images.js';
import type { Engine } from '../core/engine.js';
import { ENGINE_NAMES, makesClips } from '../../protocol/engines/index.js';
import { MeshError } from '../../protocol/index.js';
import type { EngineModule, EngineServices } from './kit/module.js';
import { comfyUiEngine } from './comfyui/index.js';
import { execEngine } from './exec/index.js';
import { oipEngine } from './oip/index.js';
import { onnxEngine } from './onnx/index.js';
import { openAiImagesEngine } from './openai-images/index.js';
import { sdcppEngine } from './sdcpp/index.js';

/**
 * Every engine an agent can run, one line each. Adding an engine is its
 * descriptor (protocol/engines/: name, settings schema, control markup, and a
 * line in ENGINE_DESCRIPTORS), its folder (the engine, an `EngineModule` in its
 * index.ts), its line here, and its contract test — nothing else: the agent
 * builds and announces what is listed, and the orchestrator checks declared
 * models against the descriptors. The order is ENGINE_DESCRIPTORS' (ENGINE_NAMES, protocol/engines/): one engine per
 * descriptor, a test holds the two lists to each other.
 */
export const ENGINES: readonly EngineModule[] = [
  onnxEngine,
  sdcppEngine,
  openAiImagesEngine,
  comfyUiEngine,
  oipEngine,
  execEngine,
];


/** The registered engine of this name, if any. */
export function engineModule(name: string): EngineModule | undefined {
  return ENGINES.find((module) => module.descriptor.name === name);
}

/**
 * Build the engines an agent runs: `enabled` names (default: every registered
 * engine), each from its factory with the agent's shared services (its log a
 * child with the engine's name; an engine without video of its own gets
 * clips made of its images). An unknown name is an error that lists the
 * known ones, so a typo in `--engines` stops the agent at start.
 */
export function buildEngines(services: EngineServices, enabled: readonly string[] = ENGINE_NAMES): Map<string, Engine> {
  const unknown = enabled.filter((name) => !engineModule(name));
  if (unknown.length > 0) {
    throw new MeshError('AGENT_OPTIONS_INVALID', { detail: `--engines: unknown engine${unknown.length > 1 ? 's' : ''} ${unknown.map((name) => `"${name}"`).join(', ')} (registered: ${ENGINE_NAMES.join(', ')})` });
  }
  const engines = new Map<string, Engine>();
  for (const name of new Set(enabled)) {
    const module = engineModule(name)!;
    const engine = module.create({ ...services, log: services.log.child({ engine: name }) });
    // An invariant of this file's table (a bug here, never an option): a bare Error.
    if (engine.name !== name) throw new Error(`the engine registered as "${name}" calls itself "${engine.name}"`);
    engines.set(name, module.descriptor.nativeVideo === true ? engine : withFramesFromImages(engine, services.video, (manifest) => makesClips(module.descriptor, manifest.settings ?? {})));
  }
  return engines;
}
