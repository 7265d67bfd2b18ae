import type { Device, ModelManifest } from '../../../protocol/index.js';
import { EngineError, type BatchResult, type EngineStartup, type LoadedModel } from '../../core/engine.js';
import type { LaunchSettings } from '../../../protocol/engines/server-settings.js';
import { moment } from '../../../protocol/clock.js';

/**
 * How a server that the agent started ended when nobody asked it to: a
 * sentence for `LoadedModel.exited`, and the error its batch gets
 * (ENGINE_OOM with the cgroup's limit, or ENGINE_CRASHED with its last output).
 */
export interface ServerExit {
  reason: string;
  error: EngineError;
}

/**
 * The server a server engine (sd-server, an OpenAI-style image server,
 * ComfyUI, an Open Inference Protocol server) sends its requests to: one the
 * person already runs (the model's `settings.url`, "fronting a URL"), or one
 * the agent started for this model through an {@link EndpointProvider}. The
 * one seam every server engine uses.
 */
export interface ServerEndpoint {
  /**
   * The server's base URL (`http://host:port`, no trailing slash). Read before every request, so a provider that
   * restarts a server on another port can change it.
   */
  readonly url: string;
  /**
   * The server's output (stdout and stderr) as lines, for a server the agent started; split on `\r` as well as `\n`:
   * sd.cpp redraws its step bar with `\r` ({@link splitLines}). Absent when fronting a URL.
   */
  readonly logLines?: AsyncIterable<string>;
  /**
   * Settles when a server the agent started ends on its own (a crash, the OOM killer, a stray signal); never for
   * `release`. Absent when fronting a URL: a server this agent does not run cannot die under it.
   */
  readonly exited?: Promise<ServerExit>;
  /**
   * What the server's processes hold in memory now (MB): the resident sets of its process group, for a server the
   * agent started; absent when fronting a URL (another's process: its memory is not ours to read).
   */
  residentMB?(): number | null;
  /** Unload the model after it has been idle this long (the model's `idleStopMs`); absent: the agent's default. */
  readonly idleUnloadMs?: number | null;
  /** The model is unloaded: a provider stops its server here (scale to zero); a fronted URL does nothing. */
  release(): Promise<void>;
  /** How long the server the provider started took to spawn and pass its readiness check; absent when fronting a URL. */
  readonly startup?: EngineStartup;
}

/** What a provider needs to start the server of one model on one device. */
export interface EndpointRequest {
  /** The engine asking (logs, the cgroup's name). */
  engine: string;
  manifest: ModelManifest;
  device: Device;
  /** `${MODEL_PATH}`: the model's file in the agent's cache; null for a model without a file. */
  modelPath: string | null;
  /** The model's launch settings (command template, readiness, limits, idle window), validated by its engine's schema. */
  launch: LaunchSettings;
}

/**
 * Starts (or finds) the server for one model on one device and resolves once it is ready. The agent's
 * ServerLauncher implements it with process governance (agent/models/server-launcher.ts); tests may
 * plug in their own. Called when the model's settings name no `url`.
 */
export type EndpointProvider = (request: EndpointRequest) => Promise<ServerEndpoint>;

/** A server someone else runs: nothing to start, nothing to stop, no log to read. */
function frontedUrl(url: string): ServerEndpoint {
  return { url: url.replace(/\/+$/, ''), release: async () => {} };
}

/**
 * The endpoint of a model: its `settings.url` when the person runs the server, else the provider's. Without
 * either the load fails, not retryably: every host would fail the same way.
 */
export async function resolveEndpoint(
  settings: { url?: string } & LaunchSettings, provider: EndpointProvider | undefined, request: Omit<EndpointRequest, 'launch'>,
): Promise<ServerEndpoint> {
  if (settings.url) return frontedUrl(settings.url);
  if (!provider) {
    throw new EngineError('ENGINE_FAILED', `model "${request.manifest.name}" (${request.engine}) names no settings.url and this agent starts no ${request.engine} servers`, false);
  }
  const { url: _url, ...launch } = settings;
  const endpoint = await provider({ ...request, launch });
  return endpoint;
}

/** After a batch's requests failed to connect, how long to wait for the server's exit to be seen (it explains them). */
const EXIT_GRACE_MS = 1000;

const unreachable = (error: unknown): boolean => error instanceof EngineError && (error.code === 'ENGINE_UNREACHABLE' || error.code === 'NOT_READY');

/**
 * A model whose server may die under it, as residency needs to see it:
 * `exited` settles when the server ends on its own (residency then drops the
 * model and the next batch starts a fresh server), and a batch running at
 * that moment fails with the server's exit error — ENGINE_OOM with the cgroup
 * limit, ENGINE_CRASHED with its last output — rather than with the
 * connection errors its requests saw first. Each server engine wraps what it
 * loaded in this one call; a fronted URL is returned unchanged.
 */
export function watchServer(loaded: LoadedModel, endpoint: ServerEndpoint): LoadedModel {
  const ended = endpoint.exited;
  if (!ended) return loaded;
  const failure = ended.then((exit) => Promise.reject(exit.error));
  failure.catch(() => {});
  /** The server's exit error if it is gone (or goes within a moment); null while it runs. */
  const exitError = async (): Promise<EngineError | null> => {
    const exit = await Promise.race([ended, moment(EXIT_GRACE_MS)]);
    return exit?.error ?? null;
  };
  return {
    manifest: loaded.manifest,
    device: loaded.device,
    memoryMB: loaded.memoryMB,
    idleUnloadMs: endpoint.idleUnloadMs ?? loaded.idleUnloadMs,
    ...(endpoint.startup ?? loaded.startup ? { startup: endpoint.startup ?? loaded.startup } : {}),
    exited: ended.then((exit) => exit.reason),
    run: async (jobs, onProgress): Promise<BatchResult> => {
      const running = loaded.run(jobs, onProgress);
      let result: BatchResult;
      try {
        result = await Promise.race([running, failure]);
      } catch (error) {
        running.catch(() => {}); // the server's exit decided the batch; what its requests say next is moot
        if (unreachable(error)) throw (await exitError()) ?? error;
        throw error;
      }
      // Requests that lost their connection may be the first sign of a crash: the exit, once seen, is the truth.
      if (result.outputs.some((output) => !output.ok && (output.code === 'ENGINE_UNREACHABLE' || output.code === 'NOT_READY'))) {
        const error = await exitError();
        if (error) throw error;
      }
      return result;
    },
    cancel: (jobIds) => loaded.cancel(jobIds),
    unload: () => loaded.unload(),
    ...(loaded.serverUrl ? { serverUrl: () => loaded.serverUrl!() } : {}),
  };
}
