import { pino, type Logger } from 'pino';
import { keepNewest } from '../../../protocol/bounded.js';
import { workClock, type Clock } from '../../../protocol/clock.js';
import type { LaunchSettings } from '../../../protocol/engines/server-settings.js';
import type { Device, ModelManifest } from '../../../protocol/index.js';
import { EngineError, NEVER, type BatchResult, type Engine, type EngineJob, type JobOutput, type LoadedModel, type Progress } from '../../core/engine.js';
import { resolveEndpoint, watchServer, type EndpointProvider, type EndpointRequest, type ServerEndpoint } from './endpoint.js';

/** Cancelled job ids remembered for batches not yet started; beyond this the oldest are forgotten. */
const MAX_REMEMBERED_CANCELS = 10_000;

export interface ServerEngineOptions {
  /** Starts the server of a model whose settings name no `url` (the agent's server launcher). Without it, such a model cannot load. */
  endpoints?: EndpointProvider;
  /** Time for waits while work is in flight (retries, polls, deadlines). Default: real time ({@link workClock}). */
  clock?: Clock;
  log?: Logger;
}

/**
 * An engine whose models run on a server: one the person runs (the model's `settings.url`) or one the agent
 * starts for the model (`settings.command`, through the endpoint provider). A subclass's `load` checks the
 * model's settings (`parseSettings`) and hands {@link serve} what to load once the server is there; `close`
 * unloads every model it loaded (stopping the servers started for them).
 */
export abstract class ServerEngine implements Engine {
  abstract readonly name: string;
  protected readonly endpoints: EndpointProvider | undefined;
  protected readonly clock: Clock;
  protected readonly log: Logger;
  readonly #loaded = new Set<ServerModel>();

  constructor(options: ServerEngineOptions = {}) {
    this.endpoints = options.endpoints;
    this.clock = options.clock ?? workClock;
    this.log = options.log ?? pino({ level: 'silent' });
  }

  abstract load(manifest: ModelManifest, modelPath: string | null, device: Device): Promise<LoadedModel>;

  /**
   * The model on its server: the endpoint (`settings.url`, or a server the provider starts), the model `open`
   * makes there — if it throws, the endpoint is released (a server started for the model stops) — watched for
   * the server's death (`watchServer`).
   */
  protected async serve(
    settings: { url?: string } & LaunchSettings,
    request: Omit<EndpointRequest, 'engine' | 'launch'>,
    open: (endpoint: ServerEndpoint) => Promise<ServerModel>,
  ): Promise<LoadedModel> {
    const endpoint = await resolveEndpoint(settings, this.endpoints, { engine: this.name, ...request });
    let model: ServerModel;
    try {
      model = await open(endpoint);
    } catch (error) {
      await endpoint.release();
      throw error;
    }
    this.#loaded.add(model);
    model.onUnload(() => this.#loaded.delete(model));
    return watchServer(model, endpoint);
  }

  async close(): Promise<void> {
    await Promise.all([...this.#loaded].map((model) => model.unload()));
  }
}

/** One batch of a {@link ServerModel}. */
export interface ServerBatch {
  /** One output per job, in the batch's order. */
  run(): Promise<JobOutput[]>;
  /** These jobs end CANCELLED (stopped on the server where it can be told); ids not in the batch are ignored. */
  cancel(jobIds: readonly string[]): void;
  /** The model is being unloaded under the batch. Absent: the batch runs on, until its server is gone. */
  unload?(): void;
}

export interface ServerModelOptions {
  manifest: ModelManifest;
  device: Device;
  /** What the model takes (MB): the server's own figure where the engine can read it, else the manifest's. */
  memoryMB: number;
  endpoint: ServerEndpoint;
}

/**
 * A model loaded on a server: what every server engine's model shares. A subclass says how a batch runs
 * ({@link batch}) and, if anything, what to free on the server before it is let go ({@link release}). Here: a
 * run after unload fails; cancels that come before their batch are remembered (a bounded number), so those jobs
 * end CANCELLED when it runs; cancels and unloads reach the batches in flight; unloading releases the endpoint
 * (a server the agent started stops). A server's death is reported by `watchServer`, which
 * {@link ServerEngine.serve} wraps every model in, so `exited` here never settles.
 */
export abstract class ServerModel implements LoadedModel {
  readonly manifest: ModelManifest;
  readonly device: Device;
  readonly memoryMB: number;
  /** Per request failures only: the death of a server the agent started is reported by `watchServer`, which wraps this model. */
  readonly exited: Promise<string> = NEVER;
  protected readonly endpoint: ServerEndpoint;
  readonly #batches = new Set<ServerBatch>();
  readonly #cancelled = new Set<string>();
  readonly #onUnload: (() => void)[] = [];
  #unloaded = false;

  constructor(options: ServerModelOptions) {
    this.manifest = options.manifest;
    this.device = options.device;
    this.memoryMB = options.memoryMB;
    this.endpoint = options.endpoint;
  }

  /** A batch of these jobs on the server (not yet running). */
  protected abstract batch(jobs: readonly EngineJob[], onProgress: (progress: Progress) => void): ServerBatch;

  /** On unload, before the endpoint is released: free what the server holds for the model. Default: nothing. */
  protected async release(): Promise<void> {}

  protected get unloaded(): boolean {
    return this.#unloaded;
  }

  serverUrl(): string {
    return this.endpoint.url;
  }

  async run(jobs: readonly EngineJob[], onProgress: (progress: Progress) => void): Promise<BatchResult> {
    if (this.#unloaded) throw new EngineError('ENGINE_FAILED', `model "${this.manifest.name}" is unloaded`, true);
    const batch = this.batch(jobs, onProgress);
    const early = jobs.filter((job) => this.#cancelled.has(job.id)).map((job) => job.id);
    if (early.length) batch.cancel(early);
    this.#batches.add(batch);
    try {
      return { outputs: await batch.run() };
    } finally {
      this.#batches.delete(batch);
      for (const job of jobs) this.#cancelled.delete(job.id);
    }
  }

  cancel(jobIds: readonly string[]): void {
    for (const jobId of jobIds) this.#cancelled.add(jobId);
    keepNewest(this.#cancelled, MAX_REMEMBERED_CANCELS);
    for (const batch of this.#batches) batch.cancel(jobIds);
  }

  async unload(): Promise<void> {
    if (this.#unloaded) return;
    this.#unloaded = true;
    for (const batch of this.#batches) batch.unload?.();
    for (const listener of this.#onUnload) listener();
    await this.release();
    await this.endpoint.release();
  }

  /** `listener` is told once the model is unloaded (its engine stops tracking it). */
  onUnload(listener: () => void): void {
    this.#onUnload.push(listener);
  }
}
