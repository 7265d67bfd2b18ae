import type { Logger } from 'pino';
import type { Clock } from '../../../protocol/clock.js';
import type { ModelManifest } from '../../../protocol/index.js';
import type { EngineJob, Progress } from '../../core/engine.js';
import { JobBatch } from '../kit/job-batch.js';
import { ServerModel, type ServerModelOptions } from '../kit/server.js';
import type { SdcppApi, SdcppClient } from './client.js';
import { runNativeJob, runSdapiJob, type JobDeps } from './jobs.js';
import type { SdcppSettings } from '../../../protocol/engines/sdcpp.js';
import { StepLineTracker } from './step-lines.js';
import { manifestParam, type RequestDefaults } from '../kit/image-input.js';

export interface SdcppModelDeps extends ServerModelOptions {
  client: SdcppClient;
  api: SdcppApi;
  settings: SdcppSettings;
  clock: Clock;
  log: Logger;
}

/**
 * A model served by an sd-server. A batch becomes one request per job (the server makes one
 * image at a time): through the native API up to `maxInFlight` at once, bounded by the server's
 * queue; through the A1111 API one after another.
 */
export class SdcppModel extends ServerModel {
  readonly #deps: SdcppModelDeps;
  readonly #jobDeps: JobDeps;
  readonly #tracker = new StepLineTracker();

  constructor(deps: SdcppModelDeps) {
    super(deps);
    this.#deps = deps;
    const capabilities = deps.api.kind === 'native' ? deps.api.capabilities : null;
    this.#jobDeps = {
      client: deps.client, settings: deps.settings, clock: deps.clock, tracker: this.#tracker, capabilities,
      defaults: defaultsFor(deps.manifest, capabilities), model: deps.manifest.name, log: deps.log,
    };
    if (deps.endpoint.logLines) void this.#readLog(deps.endpoint.logLines);
  }

  protected batch(jobs: readonly EngineJob[], onProgress: (progress: Progress) => void): JobBatch {
    const { api, settings } = this.#deps;
    const queueSize = api.kind === 'native' ? api.capabilities.limits?.max_queue_size : undefined;
    const runJob = api.kind === 'native' ? runNativeJob : runSdapiJob;
    return new JobBatch(jobs, {
      concurrency: api.kind === 'native' ? Math.min(settings.maxInFlight, queueSize && queueSize > 0 ? queueSize : Infinity) : 1,
      clock: this.#deps.clock,
      budgetMs: settings.jobTimeoutMs,
      stepsOf: (job) => Number(job.input.steps) || this.#jobDeps.defaults.steps,
      onProgress,
      runOne: (job, context) => runJob(job, context, this.#jobDeps),
    });
  }

  /** Step bars from the log of a server the agent started, until the model is unloaded or the log ends. */
  async #readLog(lines: AsyncIterable<string>): Promise<void> {
    try {
      for await (const line of lines) {
        if (this.unloaded) break;
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
