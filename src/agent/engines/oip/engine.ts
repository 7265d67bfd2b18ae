import type { Device, ModelManifest } from '../../../protocol/index.js';
import { NEVER, EngineError, type Engine, type EngineJob, type JobOutput, type LoadedModel, type Progress, type BatchResult } from '../engine.js';
import { resolveEndpoint, watchServer, type EndpointProvider } from '../shared/endpoint.js';
import { ServerStatusError } from '../shared/http.js';
import { parseSettings } from '../shared/settings.js';
import { OipBatch } from './batch.js';
import { OipClient } from './client.js';
import { discover, modelPath as serverModelPath, planInference, type InferPlan } from './plan.js';
import { OipSettings } from '../../../protocol/engines/oip.js';

export interface OipEngineOptions {
  /** Starts a server for a model whose settings carry no `url` (the agent's server launcher). Default: none (a `url` is required). */
  endpoints?: EndpointProvider;
}

/**
 * Tensor models on an Open Inference Protocol v2 server (Triton, KServe): at
 * load it reads the server's extensions and the model's metadata and
 * readiness; a batch goes as infer requests stacked along the batch axis.
 */
export class OipEngine implements Engine {
  readonly name = 'oip';
  readonly #endpoint: EndpointProvider | undefined;
  readonly #loaded = new Set<LoadedModel>();

  constructor(options: OipEngineOptions = {}) {
    this.#endpoint = options.endpoints;
  }

  async load(manifest: ModelManifest, modelPath: string | null, device: Device): Promise<LoadedModel> {
    const settings = parseSettings(OipSettings, manifest, this.name);
    const endpoint = await resolveEndpoint(settings, this.#endpoint, { engine: this.name, manifest, device, modelPath });
    const client = new OipClient(endpoint.url, { timeoutMs: settings.requestTimeoutMs, retries: settings.retries, maxRetryDelayMs: 2000 });
    const path = serverModelPath(settings, manifest);
    let plan: InferPlan;
    try {
      const found = await discover(client, path);
      if (!found.ready) throw new EngineError('NOT_READY', `${client.label}: model "${settings.model ?? manifest.name}" is not ready`, true);
      plan = planInference(manifest, settings, found.metadata, found.extensions, found.configMaxBatch);
    } catch (error) {
      await endpoint.release();
      if (error instanceof EngineError) throw error;
      if (error instanceof ServerStatusError && error.status === 404) {
        throw new EngineError('ENGINE_FAILED', `${client.label} has no model "${settings.model ?? manifest.name}": ${error.serverMessage}`, false, { cause: error });
      }
      throw new EngineError('NOT_READY', `${client.label}: ${(error as Error).message}`, true, { cause: error });
    }
    const batches = new Set<OipBatch>();
    let unloaded = false;
    const loaded: LoadedModel = {
      manifest, device,
      // Per request failures only: the death of a server the agent started is reported by watchServer, which wraps this.
      exited: NEVER,
      // The server owns the model's memory and the protocol does not report it: the manifest's figure stands.
      memoryMB: Math.max(manifest.memoryMB, 1),
      run: async (jobs: readonly EngineJob[], onProgress: (progress: Progress) => void): Promise<BatchResult> => {
        if (unloaded) throw new EngineError('ENGINE_FAILED', `model "${manifest.name}" is unloaded`, true);
        const batch = new OipBatch(client, plan, jobs, onProgress);
        batches.add(batch);
        try {
          return { outputs: await batch.run() };
        } finally {
          batches.delete(batch);
        }
      },
      cancel: (jobIds) => {
        for (const batch of batches) batch.cancel(jobIds);
      },
      unload: async () => {
        if (unloaded) return;
        unloaded = true;
        this.#loaded.delete(loaded);
        await endpoint.release();
      },
    };
    this.#loaded.add(loaded);
    return watchServer(loaded, endpoint);
  }

  async close(): Promise<void> {
    await Promise.all([...this.#loaded].map((loaded) => loaded.unload()));
  }
}
