import type { Logger } from 'pino';
import type { z } from 'zod';
import type { Clock } from '../../../protocol/clock.js';
import type { EngineDescriptor } from '../../../protocol/engines/index.js';
import type { Governor } from '../../governance/governor.js';
import type { Supervisor } from '../../governance/supervisor.js';
import type { ClipEncoder } from '../../video/encoder.js';
import type { Engine } from '../../core/engine.js';
import type { EndpointProvider } from './endpoint.js';

/**
 * What the agent shares with every engine it builds. An engine takes the
 * parts it needs in its factory (engines/registry.ts) and nothing else.
 */
export interface EngineServices {
  /** Node.js engine processes (the ONNX worker), governed. */
  supervisor: Supervisor;
  /** The agent's authority over engine processes: every process an engine starts runs under it (process group, cgroup). */
  governor: Governor;
  /** Starts the server of a model that names a `command` (and stops it when the model is unloaded). */
  endpoints: EndpointProvider;
  /** Time for waits while work is in flight (retries, polls, deadlines). */
  clock: Clock;
  /** The engine's own logger (a child of the agent's, with `engine` set). */
  log: Logger;
  /** Encodes clips with ffmpeg (governed) for engines that make video frames; absent: none (video jobs fail clearly). */
  video?: ClipEncoder;
}

/**
 * One engine as a plug-in: what both sides know about it (its descriptor, in protocol/engines/: name, settings
 * schema, control markup) and the agent's factory. Each engine's folder exports one; engines/registry.ts lists
 * them, one line each.
 */
export interface EngineModule<Settings extends z.ZodType = z.ZodType> {
  readonly descriptor: EngineDescriptor<Settings>;
  create(services: EngineServices): Engine;
}
