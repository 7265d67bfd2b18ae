import { pino, type Logger } from 'pino';
import type { Device, ModelManifest } from '../../../protocol/index.js';
import { NEVER, EngineError, type Engine, type EngineJob, type JobOutput, type LoadedModel, type Progress, type BatchResult } from '../engine.js';
import { resolveEndpoint, watchServer, type EndpointProvider, type ServerEndpoint } from '../shared/endpoint.js';
import { ServerStatusError } from '../shared/http.js';
import { parseSettings } from '../shared/settings.js';
import { ComfyBatch } from './batch.js';
import { ComfyClient, type SystemStats } from './client.js';
import { ComfyUiSettings } from '../../../protocol/engines/comfyui.js';
import { resolveWorkflow } from './workflow.js';

export interface ComfyUiEngineOptions {
  /** Starts a ComfyUI server for a model whose settings carry no `url` (the agent's server launcher). Default: none (a `url` is required). */
  endpoints?: EndpointProvider;
  log?: Logger;
}

const MiB = 1024 * 1024;

/**
 * Memory ComfyUI's torch holds on its first device, in MB (0 when unknown).
 * ComfyUI loads checkpoints lazily, so at load time this is often small; the
 * manifest's figure stays the floor.
 */
export function torchMemoryMB(stats: SystemStats | undefined): number {
  const device = stats?.devices?.[0];
  if (!device) return 0;
  const held = (device.torch_vram_total ?? 0) - (device.torch_vram_free ?? 0);
  return held > 0 ? Math.round(held / MiB) : 0;
}

/**
 * Runs API-format ComfyUI workflows on a ComfyUI server: the model's settings
 * name the workflow and where each job input goes. One job is one prompt.
 */
export class ComfyUiEngine implements Engine {
  readonly name = 'comfyui';
  readonly #endpoint: EndpointProvider | undefined;
  readonly #log: Logger;
  readonly #loaded = new Set<LoadedModel>();

  constructor(options: ComfyUiEngineOptions = {}) {
    this.#endpoint = options.endpoints;
    this.#log = options.log ?? pino({ level: 'silent' });
  }

  async load(manifest: ModelManifest, modelPath: string | null, device: Device): Promise<LoadedModel> {
    const settings = parseSettings(ComfyUiSettings, manifest, this.name);
    const workflow = await resolveWorkflow(settings, manifest, modelPath);
    const endpoint = await resolveEndpoint(settings, this.#endpoint, { engine: this.name, manifest, device, modelPath });
    const client = new ComfyClient(endpoint.url, { timeoutMs: settings.requestTimeoutMs, retries: 2, maxRetryDelayMs: 2000 });
    let stats: SystemStats;
    try {
      stats = await client.systemStats();
    } catch (error) {
      await endpoint.release();
      throw new EngineError('NOT_READY', `${client.label} did not answer /system_stats: ${(error as Error).message}`, true, { cause: error });
    }
    const log = this.#log.child({ engine: this.name, model: manifest.name, server: endpoint.url });
    const batches = new Set<ComfyBatch>();
    let unloaded = false;
    const loaded: LoadedModel = {
      manifest, device,
      // Per request failures only: the death of a server the agent started is reported by watchServer, which wraps this.
      exited: NEVER,
      memoryMB: Math.max(manifest.memoryMB, torchMemoryMB(stats), 1),
      run: async (jobs: readonly EngineJob[], onProgress: (progress: Progress) => void): Promise<BatchResult> => {
        if (unloaded) throw new EngineError('ENGINE_FAILED', `model "${manifest.name}" is unloaded`, true);
        const batch = new ComfyBatch({ model: manifest.name, client, workflow, settings, log }, jobs, onProgress);
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
        await this.#release(client, endpoint, settings.freeOnUnload, log);
      },
    };
    this.#loaded.add(loaded);
    return watchServer(loaded, endpoint);
  }

  async #release(client: ComfyClient, endpoint: ServerEndpoint, free: boolean, log: Logger): Promise<void> {
    if (free) {
      // Best effort: a server that is gone holds no memory either.
      await client.free().catch((error: unknown) => {
        if (!(error instanceof ServerStatusError && error.status === 404)) log.warn({ err: error }, 'ComfyUI /free failed');
      });
    }
    await endpoint.release();
  }

  async close(): Promise<void> {
    await Promise.all([...this.#loaded].map((loaded) => loaded.unload()));
  }
}
