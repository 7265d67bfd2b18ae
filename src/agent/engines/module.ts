import type { Logger } from 'pino';
import type { z } from 'zod';
import type { Clock } from '../../orchestrator/clock.js';
import type { Governor } from '../governance/governor.js';
import type { Supervisor } from '../supervisor.js';
import type { ClipEncoder } from '../video/encoder.js';
import type { Engine } from './engine.js';
import type { EndpointProvider } from './shared/endpoint.js';

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
 * One engine as a plug-in: its name (what a model's `engine` says and the
 * agent's hello lists), its settings schema, and a factory. Each engine's
 * folder exports one; engines/registry.ts lists them, one line each.
 */
export interface EngineModule<Settings extends z.ZodType = z.ZodType> {
  readonly name: string;
  /**
   * The engine's own schema for a model's `settings`: the engine validates every manifest with it at load, and the
   * orchestrator validates the models declared in mesh.yaml with it at start, so a bad field is named before any job.
   */
  readonly settings: Settings;
  /**
   * A server engine: each model names the server it talks to (`settings.url`, a server the person runs) or how
   * the agent starts one (`settings.command`). The orchestrator refuses a declared model that names neither.
   */
  readonly server: boolean;
  /** The engine loads a model file (the ONNX engine): the orchestrator refuses a declared model without `file`. */
  readonly needsFile: boolean;
  /**
   * The engine makes clips itself (the ONNX engine's `cppn-video`). Absent: a model of it that serves `video` is
   * given its frames one image at a time by the agent (video/frames-from-images.ts), so any image engine makes clips.
   */
  readonly nativeVideo?: boolean;
  create(services: EngineServices): Engine;
}
