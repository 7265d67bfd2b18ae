import type { Logger } from 'pino';
import type { Clock } from '../../../protocol/clock.js';
import type { Device, ModelManifest, NodeCatalogue } from '../../../protocol/index.js';
import { EngineError, type EngineJob, type LoadedModel, type Progress } from '../../core/engine.js';
import { ServerError, summaryOf } from '../kit/server-error.js';
import { ServerEngine, ServerModel, type ServerModelOptions } from '../kit/server.js';
import type { ServerEndpoint } from '../kit/endpoint.js';
import { parseSettings } from '../kit/settings.js';
import { ComfyBatch } from './batch.js';
import { ComfyClient, type SystemStats } from './client.js';
import { ComfyUiSettings } from '../../../protocol/engines/comfyui.js';
import { resolveWorkflow, type ResolvedWorkflow } from './workflow.js';
import { fetchCatalogue } from './catalogue.js';

const MiB = 1024 * 1024;

/**
 * What the model takes (MB), never less than the manifest declares. On a GPU: what ComfyUI's torch holds on its
 * first device (`torch_vram_total − torch_vram_free`; ComfyUI loads checkpoints lazily, so at load this is often
 * small). On the CPU ComfyUI reports the whole machine's RAM as its device's (`vram_*` and `torch_vram_*` alike), so
 * total − free there is every process's memory: what counts is the server's own process tree (its resident sets),
 * for a server the agent started — a fronted one's processes are not ours to read, and its declared figure stands.
 */
function memoryOf(manifest: ModelManifest, device: Device, stats: SystemStats, endpoint: ServerEndpoint): number {
  if (device.kind !== 'gpu') return Math.max(manifest.memoryMB, Math.round(endpoint.residentMB?.() ?? 0), 1);
  const first = stats.devices?.[0];
  const held = (first?.torch_vram_total ?? 0) - (first?.torch_vram_free ?? 0);
  return Math.max(manifest.memoryMB, held > 0 ? Math.round(held / MiB) : 0, 1);
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
      const client = new ComfyClient({ server: endpoint, model: manifest.name, timeoutMs: settings.requestTimeoutMs, retry: { retries: 2 }, clock: this.clock });
      let stats: SystemStats;
      try {
        // A fronted server that is starting or restarting is waited for, as a batch would wait for it.
        await client.untilReady(settings.readyWaitMs);
        stats = await client.systemStats();
      } catch (error) {
        throw new EngineError('NOT_READY', `${client.label} did not answer /system_stats within readyWaitMs (${settings.readyWaitMs} ms): ${summaryOf(error)}`, true, { cause: error });
      }
      const log = this.log.child({ engine: this.name, model: manifest.name, server: endpoint.url });
      const memoryMB = memoryOf(manifest, device, stats, endpoint);
      log.info({ memoryMB, device: device.id }, 'ComfyUI model loaded');
      return new ComfyModel({ manifest, device, memoryMB, endpoint, client, workflow, settings, log, clock: this.clock });
    });
  }

  /**
   * A model its host declares to run clients' workflows (`acceptWorkflows`), not loaded: what its server offers, read
   * from a server the owner runs (`url`); null for one the agent starts (not running until the model loads).
   */
  async describe(settings: Readonly<Record<string, unknown>>): Promise<NodeCatalogue | null | undefined> {
    const parsed = ComfyUiSettings.safeParse(settings);
    if (!parsed.success || !parsed.data.acceptWorkflows) return undefined;
    if (parsed.data.url === undefined) return null;
    const client = new ComfyClient({ server: { url: parsed.data.url.replace(/\/+$/, '') }, model: '(catalogue)', timeoutMs: parsed.data.requestTimeoutMs, clock: this.clock });
    return fetchCatalogue(client, this.log.child({ engine: this.name }));
  }
}

interface ComfyModelOptions extends ServerModelOptions {
  client: ComfyClient;
  /** The model's own workflow; null: it runs only clients' (`acceptWorkflows`). */
  workflow: ResolvedWorkflow | null;
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

  /** What the server offers clients' workflows now; absent for a model that runs none. */
  get catalogue(): (() => Promise<NodeCatalogue | null>) | undefined {
    const { settings, client, log } = this.#options;
    return settings.acceptWorkflows ? () => fetchCatalogue(client, log) : undefined;
  }

  protected override async release(): Promise<void> {
    if (!this.#options.settings.freeOnUnload) return;
    // Best effort: a server that is gone holds no memory either.
    await this.#options.client.free().catch((error: unknown) => {
      if (!(error instanceof ServerError && error.status === 404)) this.#options.log.warn({ err: error }, 'ComfyUI /free failed');
    });
  }
}
