import type { Device, ModelManifest } from '../../../protocol/index.js';
import { EngineError, type EngineJob, type LoadedModel, type Progress } from '../../core/engine.js';
import { ServerError, summaryOf } from '../kit/server-error.js';
import { ServerEngine, ServerModel, type ServerModelOptions } from '../kit/server.js';
import { parseSettings } from '../kit/settings.js';
import { OipBatch } from './batch.js';
import { OipClient } from './client.js';
import { discover, modelPath as serverModelPath, planInference, type InferPlan } from './plan.js';
import { OipSettings } from '../../../protocol/engines/oip.js';

/**
 * Tensor models on an Open Inference Protocol v2 server (Triton, KServe): at
 * load it reads the server's extensions and the model's metadata and
 * readiness; a batch goes as infer requests stacked along the batch axis.
 */
export class OipEngine extends ServerEngine {
  readonly name = 'oip';

  async load(manifest: ModelManifest, modelPath: string | null, device: Device): Promise<LoadedModel> {
    const settings = parseSettings(OipSettings, manifest, this.name);
    return this.serve(settings, { manifest, device, modelPath }, async (endpoint) => {
      const client = new OipClient({ server: endpoint, model: manifest.name, timeoutMs: settings.requestTimeoutMs, retry: { retries: settings.retries } });
      const name = settings.model ?? manifest.name;
      let plan: InferPlan;
      try {
        const found = await discover(client, serverModelPath(settings, manifest));
        if (!found.ready) throw new EngineError('NOT_READY', `${client.label}: model "${name}" is not ready`, true);
        plan = planInference(manifest, settings, found.metadata, found.extensions, found.configMaxBatch);
      } catch (error) {
        if (error instanceof ServerError && error.status === 404) {
          throw new EngineError('ENGINE_FAILED', `${client.label} has no model "${name}": ${error.detail}`, false, { cause: error });
        }
        if (error instanceof EngineError && !(error instanceof ServerError)) throw error;
        throw new EngineError('NOT_READY', `${client.label}: ${summaryOf(error)}`, true, { cause: error });
      }
      // The server owns the model's memory and the protocol does not report it: the manifest's figure stands.
      return new OipModel({ manifest, device, memoryMB: Math.max(manifest.memoryMB, 1), endpoint, client, plan });
    });
  }
}

/** A model on the server: a batch is its tensor jobs stacked into infer requests. */
class OipModel extends ServerModel {
  readonly #client: OipClient;
  readonly #plan: InferPlan;

  constructor(options: ServerModelOptions & { client: OipClient; plan: InferPlan }) {
    super(options);
    this.#client = options.client;
    this.#plan = options.plan;
  }

  protected batch(jobs: readonly EngineJob[], onProgress: (progress: Progress) => void): OipBatch {
    return new OipBatch(this.#client, this.#plan, jobs, onProgress);
  }
}
