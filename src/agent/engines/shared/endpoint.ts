import type { Device, ModelManifest } from '../../../protocol/index.js';
import { EngineError } from '../engine.js';

/**
 * Where a server engine (ComfyUI, an Open Inference Protocol server) listens.
 * `release` is called when the model is unloaded, so a server the agent
 * started for this model can be stopped; a server the person runs has none.
 */
export interface ServerEndpoint {
  /** Base URL, e.g. `http://127.0.0.1:8188`. */
  url: string;
  release?(): Promise<void>;
}

/**
 * The seam to the process governance: given a model and the device it goes on,
 * start (or find) its server and say where it listens. Used when the model's
 * settings carry no `url`.
 */
export type EndpointProvider = (manifest: ModelManifest, device: Device) => Promise<ServerEndpoint>;

/** The endpoint of a model: `settings.url` when the person runs the server, else the provider's. */
export async function resolveEndpoint(
  url: string | undefined, provider: EndpointProvider | undefined, manifest: ModelManifest, device: Device, engine: string,
): Promise<ServerEndpoint> {
  if (url) return { url: url.replace(/\/+$/, '') };
  if (!provider) {
    throw new EngineError('ENGINE_FAILED', `model "${manifest.name}" (${engine}) has no settings.url and this agent starts no ${engine} servers`, false);
  }
  const endpoint = await provider(manifest, device);
  return { ...endpoint, url: endpoint.url.replace(/\/+$/, '') };
}
