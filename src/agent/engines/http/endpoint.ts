import type { Device, ModelManifest } from '../../../protocol/index.js';

/**
 * The server an HTTP engine sends its requests to. Either one the person
 * already runs (the model's `settings.url`: "fronting a URL"), or one the
 * agent started for this model through an {@link EndpointProvider}.
 */
export interface ServerEndpoint {
  /**
   * The server's base URL (`http://host:port`, no trailing path). Read before every request, so a
   * provider that restarts a crashed server on another port can change it.
   */
  readonly url: string;
  /**
   * The server's output (stdout and stderr), one line at a time, for a server the agent started.
   * Split on `\r` as well as `\n`: sd.cpp redraws its step bar with `\r` and prints `\n` only after
   * the last step ({@link splitLines} does this). Absent when fronting a URL.
   */
  readonly logLines?: AsyncIterable<string>;
  /** The model is unloaded: a provider stops its server here (scale to zero); a fronted URL does nothing. */
  release(): Promise<void>;
}

/**
 * Starts (or finds) the server for one model on one device and resolves once it accepts requests.
 * The launcher (command template, readiness, cgroup, stop, crash restart) implements this; the
 * HTTP engines only call it. Used when the model's settings name no `url`.
 */
export type EndpointProvider = (manifest: ModelManifest, device: Device) => Promise<ServerEndpoint>;

/** A server someone else runs: nothing to start, nothing to stop, no log to read. */
export function frontedUrl(url: string): ServerEndpoint {
  return { url: url.replace(/\/+$/, ''), release: async () => {} };
}
