import { pino, type Logger } from 'pino';
import type { Clock } from '../../../protocol/clock.js';
import type { Device, ModelManifest } from '../../../protocol/index.js';
import type { Engine, LoadedModel } from '../engine.js';
import { resolveEndpoint, watchServer, type EndpointProvider } from '../shared/endpoint.js';
import { parseSettings } from '../shared/settings.js';
import { workClock } from '../../../protocol/clock.js';
import { SdcppClient } from './client.js';
import { SdcppModel } from './model.js';
import { SdcppSettings } from '../../../protocol/engines/sdcpp.js';

export interface SdcppEngineOptions {
  /** Starts an sd-server for a model whose settings name no `url` (the agent's server launcher). Without it, such a model cannot load. */
  endpoints?: EndpointProvider;
  /** Default: real time ({@link workClock}). */
  clock?: Clock;
  log?: Logger;
}

/**
 * stable-diffusion.cpp's `sd-server` as a gpumesh engine: the native async API
 * (`/sdcpp/v1/img_gen`, polled) where the server has it, else its A1111-style `txt2img`.
 * The server is one the person runs (`settings.url`) or one the endpoint provider starts.
 */
export class SdcppEngine implements Engine {
  readonly name = 'sdcpp';
  readonly #options: SdcppEngineOptions;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #loaded = new Set<SdcppModel>();

  constructor(options: SdcppEngineOptions = {}) {
    this.#options = options;
    this.#clock = options.clock ?? workClock;
    this.#log = options.log ?? pino({ level: 'silent' });
  }

  async load(manifest: ModelManifest, modelPath: string | null, device: Device): Promise<LoadedModel> {
    const settings = parseSettings(SdcppSettings, manifest, this.name);
    const endpoint = await resolveEndpoint(settings, this.#options.endpoints, { engine: this.name, manifest, device, modelPath });
    try {
      const client = new SdcppClient({ endpoint, settings, clock: this.#clock, model: manifest.name });
      const api = await client.probe();
      // The server's own count is this device's memory only when the agent started the server here.
      const measured = settings.url ? null : await client.modelMemoryMB();
      this.#log.info({ model: manifest.name, url: endpoint.url, api: api.kind, memoryMB: measured }, 'sd-server ready');
      const model = new SdcppModel({
        manifest, device, memoryMB: measured ?? manifest.memoryMB, endpoint, client, api, settings, clock: this.#clock,
        log: this.#log.child({ model: manifest.name }),
        onUnloaded: () => this.#loaded.delete(model),
      });
      this.#loaded.add(model);
      return watchServer(model, endpoint);
    } catch (error) {
      await endpoint.release();
      throw error;
    }
  }

  async close(): Promise<void> {
    await Promise.all([...this.#loaded].map((model) => model.unload()));
  }
}
