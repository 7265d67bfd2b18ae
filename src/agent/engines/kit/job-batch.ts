import type { Clock, Timer } from '../../../protocol/clock.js';
import { EngineError, type EngineJob, type JobOutput, type OutputFile, type Progress } from '../../core/engine.js';
import type { ServerBatch } from './server.js';

export type StopReason = 'cancelled' | 'deadline' | 'budget' | 'unloaded';

/** The reason a job's signal carries when it is aborted; tells the batch which error to report. */
export class JobStopped extends Error {
  override readonly name = 'JobStopped';
  constructor(readonly why: StopReason) {
    super(`job stopped: ${why}`);
  }
}

/** What one job's run gets from its batch. */
export interface JobContext {
  /** Aborted when the job is cancelled, passes its time, or the model is unloaded (reason: {@link JobStopped}). */
  readonly signal: AbortSignal;
  /** Epoch ms by which the job must be done: its own deadline or the engine's budget, whichever is sooner. */
  readonly deadlineAt: number;
  /** This job's progress (steps done; and the job's total when the server says it); the batch reports the sum over its jobs. */
  progress(step: number, total?: number): void;
}

/** Run one job to its output files; throw an {@link EngineError} for a failure that is this job's own. */
export type RunOne = (job: EngineJob, context: JobContext) => Promise<OutputFile[]>;

export interface JobBatchOptions {
  /** Runs each job. */
  runOne: RunOne;
  /** Jobs in flight at once. */
  concurrency: number;
  clock: Clock;
  /** The longest a job may run once started, when its own deadline is not sooner. */
  budgetMs: number;
  /** The progress steps a job is expected to take, until the server says otherwise. */
  stepsOf(job: EngineJob): number;
  onProgress(progress: Progress): void;
}

interface JobState {
  job: EngineJob;
  controller: AbortController;
  step: number;
  total: number;
}

/**
 * A gpumesh batch run as one request per job, for servers that take one prompt at a time: at most
 * `concurrency` jobs in flight, one output per job in the batch's order, each job's failure its
 * own. Progress is summed over the jobs (steps done of all steps), so it rises steadily across a
 * batch whose jobs run one after another. Cancelling a job aborts only that job's signal.
 */
export class JobBatch implements ServerBatch {
  readonly #options: JobBatchOptions;
  readonly #states: JobState[];
  #reported = 0;

  constructor(jobs: readonly EngineJob[], options: JobBatchOptions) {
    this.#options = options;
    this.#states = jobs.map((job) => ({ job, controller: new AbortController(), step: 0, total: Math.max(1, options.stepsOf(job)) }));
  }

  has(jobId: string): boolean {
    return this.#states.some((state) => state.job.id === jobId);
  }

  /** These jobs end CANCELLED: their runs see their signals abort. */
  cancel(jobIds: readonly string[]): void {
    this.stop('cancelled', jobIds);
  }

  /** The model is unloaded under the batch: every job still running fails, retryably. */
  unload(): void {
    this.stop('unloaded');
  }

  /** Stop these jobs (or all, with no ids): their runs see the signal abort and their outputs say why. */
  stop(why: StopReason, jobIds?: readonly string[]): void {
    for (const state of this.#states) {
      if (jobIds && !jobIds.includes(state.job.id)) continue;
      if (!state.controller.signal.aborted) state.controller.abort(new JobStopped(why));
    }
  }

  async run(): Promise<JobOutput[]> {
    const { runOne } = this.#options;
    const outputs: JobOutput[] = new Array(this.#states.length);
    let next = 0;
    const lane = async (): Promise<void> => {
      while (next < this.#states.length) {
        const index = next++;
        outputs[index] = await this.#runJob(this.#states[index]!, runOne);
      }
    };
    const lanes = Math.max(1, Math.min(this.#options.concurrency, this.#states.length));
    await Promise.all(Array.from({ length: lanes }, lane));
    return outputs;
  }

  async #runJob(state: JobState, runOne: RunOne): Promise<JobOutput> {
    const { clock, budgetMs } = this.#options;
    const { job, controller } = state;
    const ownDeadline = job.deadlineAt ?? Number.POSITIVE_INFINITY;
    const budgetEnd = clock.now() + budgetMs;
    const deadlineAt = Math.min(ownDeadline, budgetEnd);
    let timer: Timer | null = null;
    try {
      if (controller.signal.aborted) throw controller.signal.reason;
      timer = clock.setTimer(deadlineAt - clock.now(), () => this.stop(ownDeadline <= budgetEnd ? 'deadline' : 'budget', [job.id]));
      const files = await runOne(job, {
        signal: controller.signal,
        deadlineAt,
        progress: (step, total) => this.#progress(state, step, total),
      });
      this.#progress(state, state.total, state.total);
      return { jobId: job.id, ok: true, files };
    } catch (error) {
      this.#settle(state);
      return this.#failure(job.id, controller.signal, error);
    } finally {
      timer?.cancel();
    }
  }

  #failure(jobId: string, signal: AbortSignal, error: unknown): JobOutput {
    // A run that ended with an error of its own says more than the abort that may have caused it.
    const stopped = error instanceof JobStopped ? error
      : !(error instanceof EngineError) && signal.aborted && signal.reason instanceof JobStopped ? signal.reason : null;
    if (stopped) {
      switch (stopped.why) {
        case 'cancelled':
          return { jobId, ok: false, code: 'CANCELLED', message: 'cancelled', retryable: false };
        case 'deadline':
          return { jobId, ok: false, code: 'DEADLINE_EXCEEDED', message: 'the job passed its deadline while the server worked on it', retryable: false };
        case 'budget':
          return { jobId, ok: false, code: 'ENGINE_FAILED', message: `the server gave no result within the engine's budget of ${this.#options.budgetMs} ms (settings.jobTimeoutMs)`, retryable: true };
        case 'unloaded':
          return { jobId, ok: false, code: 'ENGINE_FAILED', message: 'the model was unloaded while the job ran', retryable: true };
      }
    }
    if (error instanceof EngineError) return { jobId, ok: false, code: error.code, message: error.message, retryable: error.retryable };
    return { jobId, ok: false, code: 'ENGINE_FAILED', message: error instanceof Error ? error.message : String(error), retryable: true };
  }

  /** A job that ended without finishing counts as done for the batch's progress: its work is over. */
  #settle(state: JobState): void {
    this.#progress(state, state.total, state.total);
  }

  #progress(state: JobState, step: number, total?: number): void {
    if (total !== undefined && total > 0) state.total = total;
    state.step = Math.max(state.step, Math.min(step, state.total));
    let done = 0;
    let all = 0;
    for (const each of this.#states) {
      done += each.step;
      all += each.total;
    }
    if (done <= this.#reported) return;
    this.#reported = done;
    this.#options.onProgress({ step: done, total: all });
  }
}
