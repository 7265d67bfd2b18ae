import type { Logger } from 'pino';
import type { Clock } from '../../../protocol/clock.js';
import type { Device, ModelManifest } from '../../../protocol/index.js';
import { EngineError, type EngineJob, type LoadedModel, type Progress } from '../../core/engine.js';
import { ServerError, summaryOf } from '../kit/server-error.js';
import { ServerEngine, ServerModel, type ServerModelOptions } from '../kit/server.js';
import { parseSettings } from '../kit/settings.js';
import { ComfyBatch } from './batch.js';
import { ComfyClient, type SystemStats } from './client.js';
import { ComfyUiSettings } from '../../../protocol/engines/comfyui.js';
import { resolveWorkflow, type ResolvedWorkflow } from './workflow.js';

const MiB = 1024 * 1024;

/**
 * Memory ComfyUI's torch holds on its first device, in MB (0 when unknown).
 * ComfyUI loads checkpoints lazily, so at load time this is often small; the
 * manifest's figure stays the floor.
 */
function torchMemoryMB(stats: SystemStats | undefined): number {
  const device = stats?.devices?.[0];
  if (!device) return 0;
  const held = (device.torch_vram_total ?? 0) - (device.torch_vram_free ?? 0);
  return held > 0 ? Math.round(held / MiB) : 0;
}

/**
 * Runs API-format ComfyUI workflows on a ComfyUI server: the model's settings
 * name the workflow and where each job input goes. One job is one prompt.
 */
export class ComfyUiEngine extends ServerEngine {
  readonly name = 'comfyui';

  async load(manifest: ModelManifest, modelPath: string | null, device: Device): Promise<LoadedModel> {
    const settings = parseSettings(ComfyUiSettings, manifest, this.name);
    const workflow = await resolveWorkflow(settings, manifest, modelPath);
    return this.serve(settings, { manifest, device, modelPath }, async (endpoint) => {
      // 429/503 answers, and dropped connections of requests safe to repeat, are sent again twice.
      const client = new ComfyClient({ server: endpoint, model: manifest.name, timeoutMs: settings.requestTimeoutMs, retry: { retries: 2 } });
      let stats: SystemStats;
      try {
        stats = await client.systemStats();
      } catch (error) {
        throw new EngineError('NOT_READY', `${client.label} did not answer /system_stats: ${summaryOf(error)}`, true, { cause: error });
      }
      const log = this.log.child({ engine: this.name, model: manifest.name, server: endpoint.url });
      const memoryMB = Math.max(manifest.memoryMB, torchMemoryMB(stats), 1);
      return new ComfyModel({ manifest, device, memoryMB, endpoint, client, workflow, settings, log, clock: this.clock });
    });
  }
}

interface ComfyModelOptions extends ServerModelOptions {
  client: ComfyClient;
  workflow: ResolvedWorkflow;
  settings: ComfyUiSettings;
  log: Logger;
  clock: Clock;
}

/** A workflow on a ComfyUI server: a batch is one prompt per job; unloading asks ComfyUI to free its models (`freeOnUnload`). */
class ComfyModel extends ServerModel {
  readonly #options: ComfyModelOptions;

  constructor(options: ComfyModelOptions) {
    super(options);
    this.#options = options;
  }

  protected batch(jobs: readonly EngineJob[], onProgress: (progress: Progress) => void): ComfyBatch {
    const { client, workflow, settings, log, clock } = this.#options;
    return new ComfyBatch({ model: this.manifest.name, client, workflow, settings, log, clock }, jobs, onProgress);
  }

  protected override async release(): Promise<void> {
    if (!this.#options.settings.freeOnUnload) return;
    // Best effort: a server that is gone holds no memory either.
    await this.#options.client.free().catch((error: unknown) => {
      if (!(error instanceof ServerError && error.status === 404)) this.#options.log.warn({ err: error }, 'ComfyUI /free failed');
    });
  }
}
