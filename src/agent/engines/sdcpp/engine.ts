import type { Device, ModelManifest } from '../../../protocol/index.js';
import type { LoadedModel } from '../../core/engine.js';
import { ServerEngine } from '../kit/server.js';
import { parseSettings } from '../kit/settings.js';
import { SdcppClient } from './client.js';
import { SdcppModel } from './model.js';
import { SdcppSettings } from '../../../protocol/engines/sdcpp.js';

/**
 * stable-diffusion.cpp's `sd-server` as a gpumesh engine: the native async API
 * (`/sdcpp/v1/img_gen`, polled) where the server has it, else its A1111-style `txt2img`.
 * The server is one the person runs (`settings.url`) or one the endpoint provider starts.
 */
export class SdcppEngine extends ServerEngine {
  readonly name = 'sdcpp';

  async load(manifest: ModelManifest, modelPath: string | null, device: Device): Promise<LoadedModel> {
    const settings = parseSettings(SdcppSettings, manifest, this.name);
    return this.serve(settings, { manifest, device, modelPath }, async (endpoint) => {
      const client = new SdcppClient({ endpoint, settings, clock: this.clock, model: manifest.name });
      const api = await client.probe();
      // The server's own count is this device's memory only when the agent started the server here.
      const measured = settings.url ? null : await client.modelMemoryMB();
      this.log.info({ model: manifest.name, url: endpoint.url, api: api.kind, memoryMB: measured }, 'sd-server ready');
      return new SdcppModel({
        manifest, device, memoryMB: measured ?? manifest.memoryMB, endpoint, client, api, settings, clock: this.clock,
        log: this.log.child({ model: manifest.name }),
      });
    });
  }
}
