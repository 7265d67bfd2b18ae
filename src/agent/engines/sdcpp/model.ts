import type { Logger } from 'pino';
import type { Clock } from '../../../protocol/clock.js';
import type { Device, ModelManifest } from '../../../protocol/index.js';
import { NEVER, EngineError, type EngineJob, type JobOutput, type LoadedModel, type Progress, type BatchResult } from '../engine.js';
import { JobBatch } from '../http/batch.js';
import type { ServerEndpoint } from '../shared/endpoint.js';
import type { SdcppApi, SdcppClient } from './client.js';
import { runNativeJob, runSdapiJob, type JobDeps } from './jobs.js';
import type { SdcppSettings } from '../../../protocol/engines/sdcpp.js';
import { StepLineTracker } from './step-lines.js';
import { manifestParam, type RequestDefaults } from '../http/image-input.js';

/** Cancelled job ids remembered for batches not yet started; beyond this the oldest are forgotten. */
const MAX_REMEMBERED_CANCELS = 10_000;

export interface SdcppModelDeps {
  manifest: ModelManifest;
  device: Device;
  memoryMB: number;
  endpoint: ServerEndpoint;
  client: SdcppClient;
  api: SdcppApi;
  settings: SdcppSettings;
  clock: Clock;
  log: Logger;
  /** Told once the model is unloaded (the engine stops tracking it). */
  onUnloaded(): void;
}

/**
 * A model served by an sd-server. A batch becomes one request per job (the server makes one
 * image at a time): through the native API up to `maxInFlight` at once, bounded by the server's
 * queue; through the A1111 API one after another.
 */
export class SdcppModel implements LoadedModel {
  readonly manifest: ModelManifest;
  readonly device: Device;
  readonly memoryMB: number;
  /** Per request failures only: the death of a server the agent started is reported by `watchServer`, which wraps this model. */
  readonly exited: Promise<string> = NEVER;
  readonly #deps: SdcppModelDeps;
  readonly #jobDeps: JobDeps;
  readonly #tracker = new StepLineTracker();
  readonly #batches = new Set<JobBatch>();
  readonly #cancelled = new Set<string>();
  #unloaded = false;

  constructor(deps: SdcppModelDeps) {
    this.#deps = deps;
    this.manifest = deps.manifest;
    this.device = deps.device;
    this.memoryMB = deps.memoryMB;
    const capabilities = deps.api.kind === 'native' ? deps.api.capabilities : null;
    this.#jobDeps = {
      client: deps.client, settings: deps.settings, clock: deps.clock, tracker: this.#tracker, capabilities,
      defaults: defaultsFor(deps.manifest, capabilities), model: deps.manifest.name, log: deps.log,
    };
    if (deps.endpoint.logLines) void this.#readLog(deps.endpoint.logLines);
  }

  async run(jobs: readonly EngineJob[], onProgress: (progress: Progress) => void): Promise<BatchResult> {
    if (this.#unloaded) throw new EngineError('ENGINE_FAILED', `model "${this.manifest.name}" is unloaded`, true);
    const { api, settings } = this.#deps;
    const queueSize = api.kind === 'native' ? api.capabilities.limits?.max_queue_size : undefined;
    const batch = new JobBatch(jobs, {
      concurrency: api.kind === 'native' ? Math.min(settings.maxInFlight, queueSize && queueSize > 0 ? queueSize : Infinity) : 1,
      clock: this.#deps.clock,
      budgetMs: settings.jobTimeoutMs,
      stepsOf: (job) => Number(job.input.steps) || this.#jobDeps.defaults.steps,
      onProgress,
    });
    const early = jobs.filter((job) => this.#cancelled.has(job.id)).map((job) => job.id);
    if (early.length) batch.stop('cancelled', early);
    this.#batches.add(batch);
    try {
      return { outputs: await batch.run((job, context) => (api.kind === 'native' ? runNativeJob : runSdapiJob)(job, context, this.#jobDeps)) };
    } finally {
      this.#batches.delete(batch);
      for (const job of jobs) this.#cancelled.delete(job.id);
    }
  }

  cancel(jobIds: readonly string[]): void {
    for (const jobId of jobIds) {
      this.#cancelled.add(jobId);
      if (this.#cancelled.size > MAX_REMEMBERED_CANCELS) this.#cancelled.delete(this.#cancelled.values().next().value!);
    }
    for (const batch of this.#batches) batch.stop('cancelled', jobIds);
  }

  async unload(): Promise<void> {
    if (this.#unloaded) return;
    this.#unloaded = true;
    for (const batch of this.#batches) batch.stop('unloaded');
    this.#deps.onUnloaded();
    await this.#deps.endpoint.release();
  }

  /** Step bars from the log of a server the agent started, until the model is unloaded or the log ends. */
  async #readLog(lines: AsyncIterable<string>): Promise<void> {
    try {
      for await (const line of lines) {
        if (this.#unloaded) break;
        this.#tracker.feed(line);
      }
    } catch (error) {
      this.#deps.log.debug({ err: error, model: this.manifest.name }, 'the sd-server log ended');
    }
  }
}

/** Size and steps for jobs that leave them out: the manifest's `params`, else the server's defaults, else sd.cpp's. */
function defaultsFor(manifest: ModelManifest, capabilities: JobDeps['capabilities']): RequestDefaults {
  const param = (key: string): number | undefined => manifestParam(manifest, key);
  return {
    width: param('defaultWidth') ?? capabilities?.defaults?.width ?? 512,
    height: param('defaultHeight') ?? capabilities?.defaults?.height ?? 512,
    steps: param('defaultSteps') ?? capabilities?.defaults?.sample_params?.sample_steps ?? 20,
  };
}
