import type { Logger } from 'pino';
import type { PipelineEndSummary } from '../../protocol/api/index.js';
import { isTerminal } from '../../protocol/index.js';
import type { Commits, JobRecord, MeshStore, PipelineRecord } from '../store/index.js';
import type { Webhooks } from '../webhooks/index.js';
import { pipelineLinks, pipelineStatus } from './pipelines.js';

export interface PipelineEndsDeps {
  store: MeshStore;
  commits: Commits;
  log: Logger;
  /** A job's record, wherever it stands (JobStates.get). */
  jobs: { get(id: string): Promise<JobRecord | null> };
  webhooks: Pick<Webhooks, 'deliver'>;
}

/** An armed pipeline this orchestrator watches: its callback URL, and the steps' jobs that have not ended. */
interface Watched {
  pipeline: PipelineRecord;
  url: string;
  open: Set<string>;
}

/**
 * A pipeline's end, told once to its callback URL. A pipeline submitted with a callback (its own `webhook`, else its
 * grant's) is armed in the write that stores it; when the last of its steps' jobs ends — each succeeded, or one did not
 * and the steps after it failed with it — its summary (PipelineEndSummary) becomes one delivery (`pipeline.<status>`),
 * written with the disarming, so its id is fixed and it is tried until answered (Webhooks). Which steps are still open
 * is kept in memory, filled at submit and, at start, from the stored jobs of every pipeline still armed: one whose
 * jobs all ended while the orchestrator was down (or stopped between the last end and the delivery) is delivered then.
 */
export class PipelineEnds {
  readonly #deps: PipelineEndsDeps;
  readonly #watched = new Map<string, Watched>();
  /** A step's job → its watched pipeline's id. */
  readonly #pipelineOf = new Map<string, string>();
  /** Pipelines whose last step ended, their summary being read: what `forget` may still stop. */
  readonly #ending = new Set<string>();
  #closed = false;

  constructor(deps: PipelineEndsDeps) {
    this.#deps = deps;
  }

  /**
   * A pipeline admitted with a callback URL (in normal form, allowed). Call it inside the write that stores the
   * pipeline, in its admission's turn: the arming is written with it, and no step can have ended yet.
   */
  arm(pipeline: PipelineRecord, url: string): void {
    this.#deps.store.webhooks.armPipeline(pipeline.id, url, pipeline.createdAt);
    this.#watch(pipeline, url, pipeline.steps.map((step) => step.jobId));
  }

  /** A pipeline that was not stored after all (its commit failed): nothing is delivered for it. */
  forget(pipelineId: string): void {
    const watched = this.#watched.get(pipelineId);
    for (const jobId of watched?.open ?? []) this.#pipelineOf.delete(jobId);
    this.#watched.delete(pipelineId);
    this.#ending.delete(pipelineId);
  }

  /** A job reached its end (JobStates.onTerminal): its pipeline's end is told if it was the last step open. */
  jobEnded(job: JobRecord): void {
    const id = this.#pipelineOf.get(job.id);
    if (id === undefined) return;
    this.#pipelineOf.delete(job.id);
    const watched = this.#watched.get(id);
    if (!watched) return;
    watched.open.delete(job.id);
    if (watched.open.size > 0) return;
    this.#watched.delete(id);
    void this.#end(watched.pipeline, watched.url);
  }

  /**
   * At start, before jobs are recovered (a job recovery ends must find its pipeline watched): every armed pipeline is
   * watched again from its stored jobs — or, if they all ended, its end delivered now.
   */
  async start(): Promise<{ watched: number; recovered: number }> {
    const { store, commits, jobs } = this.#deps;
    let recovered = 0;
    for (const { pipelineId, url } of await store.webhooks.armedPipelines()) {
      const pipeline = await store.pipelines.getPipeline(pipelineId);
      if (!pipeline) {
        commits.writeOne(() => store.webhooks.disarmPipeline(pipelineId));
        continue;
      }
      const records = await Promise.all(pipeline.steps.map((step) => jobs.get(step.jobId)));
      // A step's job that is gone (deleted) has ended as far as its pipeline is concerned.
      const open = records.filter((job): job is JobRecord => job !== null && !isTerminal(job.status)).map((job) => job.id);
      if (open.length > 0) this.#watch(pipeline, url, open);
      else {
        recovered++;
        void this.#end(pipeline, url);
      }
    }
    return { watched: this.#watched.size, recovered };
  }

  /** Deliver nothing more; what is armed stays armed in the store, for the next start. */
  close(): void {
    this.#closed = true;
  }

  #watch(pipeline: PipelineRecord, url: string, open: readonly string[]): void {
    this.#watched.set(pipeline.id, { pipeline, url, open: new Set(open) });
    for (const jobId of open) this.#pipelineOf.set(jobId, pipeline.id);
  }

  async #end(pipeline: PipelineRecord, url: string): Promise<void> {
    const { store, log } = this.#deps;
    this.#ending.add(pipeline.id);
    let summary: { data: PipelineEndSummary; at: number };
    try {
      summary = await this.#summarize(pipeline);
    } catch (error) {
      // Left armed: the next start reads it again. Unlike a job's, a pipeline's status is its steps', not known without them.
      log.warn({ err: error, pipeline: pipeline.id }, 'could not read a pipeline\'s steps for its callback; it is delivered after the next start');
      this.#ending.delete(pipeline.id);
      return;
    }
    if (this.#closed || !this.#ending.delete(pipeline.id)) return;
    this.#deps.webhooks.deliver(
      { type: `pipeline.${summary.data.status}`, subject: { kind: 'pipeline', id: pipeline.id }, url, data: summary.data, at: summary.at },
      () => store.webhooks.disarmPipeline(pipeline.id),
    );
  }

  /** The pipeline's end as its callback receives it, and when it ended (its last step's end). */
  async #summarize(pipeline: PipelineRecord): Promise<{ data: PipelineEndSummary; at: number }> {
    const { store, jobs } = this.#deps;
    const steps = (await Promise.all(pipeline.steps.map(async (step) => {
      const job = await jobs.get(step.jobId);
      if (!job) return null;
      const artifacts = job.status === 'succeeded' ? await store.artifacts.artifactsOfJob(job.id) : [];
      return {
        job,
        view: {
          id: step.id, jobId: job.id, type: job.type, model: job.model, status: job.status,
          artifacts: artifacts.map(({ digest, mediaType }) => ({ digest, mediaType })),
          error: job.errorCode ? { code: job.errorCode, message: job.errorMessage ?? '' } : null,
        },
      };
    }))).filter((step) => step !== null);
    const unsuccessful = steps.filter((step) => step.job.status !== 'succeeded');
    // The cause is the first step that did not succeed of its own accord: a SOURCE_FAILED only repeats its source's.
    const cause = unsuccessful.find((step) => step.job.errorCode !== 'SOURCE_FAILED') ?? unsuccessful[0];
    const status = pipelineStatus(steps.map((step) => step.job.status));
    return {
      at: Math.max(pipeline.createdAt, ...steps.map((step) => step.job.finishedAt ?? 0)),
      data: {
        id: pipeline.id,
        // Never running: every step has ended (this narrows the type).
        status: status === 'running' ? 'failed' : status,
        createdAt: new Date(pipeline.createdAt).toISOString(),
        steps: steps.map((step) => step.view),
        cause: cause ? { step: cause.view.id, jobId: cause.view.jobId, status: cause.view.status, error: cause.view.error } : null,
        links: pipelineLinks(pipeline.id),
      },
    };
  }
}
