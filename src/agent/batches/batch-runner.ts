import type { Logger } from 'pino';
import type { Clock } from '../../protocol/clock.js';
import { pixelsOf, sha256Digest, type AgentMessage, type ArtifactReport, type BatchMemoryReport, type LoadPhases, type OrchestratorMessage } from '../../protocol/index.js';
import { BatchReports } from './batch-reports.js';
import { EngineError, type JobOutput, type LoadedModel } from '../core/engine.js';
import type { InputPictures } from './input-pictures.js';
import type { Residency } from '../models/residency.js';
import { uploadFileOutput, uploadOutput, type UploadTarget } from './uploads.js';

type Run = Extract<OrchestratorMessage, { type: 'run' }>;
export type Result = Extract<AgentMessage, { type: 'done' | 'failed' }>;

export interface BatchRunnerDeps {
  residency: Residency;
  pictures: InputPictures;
  log: Logger;
  /** How long a batch's `started` and `progress` reports are held back (see BatchReports; its default when absent). */
  reportDelayMs?: number;
  /** For that delay (a fake in tests). Default: real time. */
  clock?: Clock;
  /** Send a report that needs no acknowledgement (loading, started, progress, preview). */
  send(message: AgentMessage): void;
  /** Send a job's result, kept until the orchestrator acknowledges it. */
  report(result: Result): void;
  /**
   * Where outputs go: small ones inline in the result (up to `inlineBytes()` a job), the rest uploaded to `target()`,
   * the orchestrator linked now (asked again at each try of an upload, so one cut off by a failover goes to the next).
   */
  deliver: { target(): UploadTarget; inlineBytes(): number };
  /**
   * The engine is done with a batch that has files to deliver: the orchestrator may send the next batch while they
   * travel (the agent tells it, if it listens).
   */
  computed(batchId: string): void;
  /** A batch ended (its model may unload, a drain may be done). */
  ended(model: string): void;
  /** The energy a device has drawn so far (J), from its reported power; null where it reports none (energy per result). */
  energyJ?(device: string): number | null;
}

interface RunningBatch {
  id: string;
  model: string;
  jobIds: Set<string>;
  cancelled: Set<string>;
  cancel(jobIds: string[]): void;
  /** Handed back (the host stopped taking work): what its unfinished jobs fail with, for another host to run them. */
  handedBack: EngineError | null;
}

/** Any error a batch met, as the EngineError its jobs fail with. */
const asEngineError = (error: unknown): EngineError => (error instanceof EngineError ? error : new EngineError('ENGINE_FAILED', (error as Error).message));

/** A job's failure, as its result. */
const failed = (jobId: string, batchId: string, error: EngineError): Result => ({
  type: 'failed', jobId, batchId, retryable: error.retryable, error: { code: error.code, message: error.message },
});

/**
 * The batches an agent runs: make the model resident, fetch the jobs' pictures, run the engine, report progress and
 * previews, deliver each job's outputs (inline or uploaded) and report its result — or its failure, one way, once.
 */
export class BatchRunner {
  readonly #deps: BatchRunnerDeps;
  readonly #running = new Map<string, RunningBatch>();

  constructor(deps: BatchRunnerDeps) {
    this.#deps = deps;
  }

  /** Batches running now. */
  get size(): number {
    return this.#running.size;
  }

  /** Whether a batch of this model is running (its model must stay). */
  busy(model: string): boolean {
    return [...this.#running.values()].some((batch) => batch.model === model);
  }

  /** The jobs of the batches running now (a hello says the agent holds them). */
  held(): { jobId: string; batchId: string }[] {
    return [...this.#running.values()].flatMap((batch) => [...batch.jobIds].map((jobId) => ({ jobId, batchId: batch.id })));
  }

  /**
   * Give every running batch back (the host stopped taking work: its owner came): the engine stops them, and each job
   * that had not finished fails with `error` (retryable), which the orchestrator sends to another host. A job whose
   * output was ready is delivered as usual.
   */
  handBack(error: EngineError): void {
    for (const batch of this.#running.values()) {
      if (batch.handedBack) continue;
      batch.handedBack = error;
      batch.cancel([...batch.jobIds]);
    }
  }

  /** Stop a job wherever it runs. */
  cancel(jobId: string): void {
    for (const batch of this.#running.values()) if (batch.jobIds.has(jobId)) batch.cancel([jobId]);
  }

  /** Run a batch the orchestrator sent, to the end: every job's result reported, once, whatever happens. */
  async run(message: Run): Promise<void> {
    const received = performance.now();
    const jobs = message.jobs;
    const batch: RunningBatch = {
      id: message.batchId, model: message.model.name, jobIds: new Set(jobs.map((job) => job.id)), cancelled: new Set(),
      cancel: (jobIds) => { for (const jobId of jobIds) batch.cancelled.add(jobId); }, handedBack: null,
    };
    this.#running.set(batch.id, batch);
    this.#deps.log.debug({ batchId: batch.id, model: message.model.name, jobs: jobs.length }, 'batch received');
    let acquired: LoadedModel | null = null;
    const reports = new BatchReports((report) => this.#deps.send(report), this.#deps.reportDelayMs, this.#deps.clock);
    try {
      let loading = false;
      const { loaded, loadMs, phases } = await this.#deps.residency.acquire(message.model, () => {
        // The jobs' loading phase: a pull, a server started from zero, a session built.
        loading = true;
        this.#deps.send({ type: 'loading', batchId: batch.id, jobIds: [...batch.jobIds] });
      });
      acquired = loaded;
      this.#deps.log.debug({ batchId: batch.id, loadMs }, 'model resident');
      batch.cancel = (jobIds) => {
        for (const jobId of jobIds) batch.cancelled.add(jobId);
        loaded.cancel(jobIds);
      };
      if (batch.cancelled.size > 0) loaded.cancel([...batch.cancelled]);
      reports.report({ type: 'started', batchId: batch.id, jobIds: [...batch.jobIds], ...(loading ? { loadMs, ...(phases ? { phases } : {}) } : {}) });
      // Most batches name no picture: no turn of the loop spent finding that out.
      const fetching = this.#deps.pictures.forJobs(jobs);
      const pictures = fetching ? await fetching : null;
      const computeStart = performance.now();
      const energyStart = this.#deps.energyJ?.(loaded.device.id) ?? null;
      const { outputs, memory } = await loaded.run(
        jobs.map((job) => ({ id: job.id, input: job.input, deadlineAt: job.deadlineAt, ...(pictures?.has(job.id) ? { pictures: pictures.get(job.id)! } : {}) })),
        ({ previews, ...progress }) => {
          // A preview goes at once, on its own: it is worth something only while the job runs.
          for (const preview of previews ?? []) {
            if (!batch.cancelled.has(preview.jobId)) this.#deps.send({ type: 'preview', batchId: batch.id, jobId: preview.jobId, ...progress, png: Buffer.from(preview.png).toString('base64') });
          }
          reports.report({ type: 'progress', batchId: batch.id, jobIds: jobs.map((job) => job.id).filter((id) => !batch.cancelled.has(id)), ...progress });
        },
      );
      const computeMs = performance.now() - computeStart;
      const energyEnd = energyStart === null ? null : this.#deps.energyJ?.(loaded.device.id) ?? null;
      // Each job's share of the batch's energy: equal, as the jobs of one batch share their shape.
      const energyJ = energyStart === null || energyEnd === null ? undefined : Math.max(0, energyEnd - energyStart) / jobs.length;
      reports.end();
      // Outputs that travel (files to upload, or inline for the orchestrator to check and store) keep the batch open
      // a while after the engine is done with it; the engine need not wait for that. Results without files follow at once.
      if (!message.probe && outputs.some((output) => output.ok && (output.files.length > 0 || (output.onDisk?.length ?? 0) > 0))) this.#deps.computed(batch.id);
      // Jobs of one batch share their shape, so the first job's pixels are every job's.
      const pixels = pixelsOf(jobs[0]?.input ?? {});
      const measured: BatchMemoryReport = { ...this.#deps.residency.recordBatch(loaded, pixels * jobs.length, memory), pixels, batchSize: jobs.length };
      this.#deps.log.debug({ batchId: batch.id, model: message.model.name, jobs: jobs.length, pixels, computeMs: Math.round(computeMs), memory }, 'batch computed');
      if (memory && memory.peakMB > loaded.device.budgetMB) {
        this.#deps.log.warn({ batchId: batch.id, peakMB: memory.peakMB, budgetMB: loaded.device.budgetMB }, 'the batch took more than the device budget');
      }
      await Promise.all(outputs.map((output, index) => this.#deliver(message, jobs[index]!, output, { loadMs, computeMs, received, phases: loading ? phases : undefined, energyJ }, memory ? measured : undefined)));
    } catch (error) {
      this.#deps.log.warn({ batchId: batch.id, code: asEngineError(error).code, err: error }, 'batch failed');
      for (const job of jobs) this.#deps.report(failed(job.id, batch.id, batch.handedBack ?? asEngineError(error)));
    } finally {
      reports.end();
      if (acquired) this.#deps.residency.release(acquired);
      this.#running.delete(batch.id);
      this.#deps.ended(batch.model);
    }
  }

  async #deliver(
    message: Run, job: Run['jobs'][number], output: JobOutput, timing: { loadMs: number; computeMs: number; received: number; phases: LoadPhases | undefined; energyJ?: number }, memory: BatchMemoryReport | undefined,
  ): Promise<void> {
    if (!output.ok) {
      const handedBack = this.#running.get(message.batchId)?.handedBack;
      this.#deps.report(failed(job.id, message.batchId, handedBack ?? new EngineError(output.code, output.message, output.retryable)));
      return;
    }
    try {
      await this.#deliverOutputs(message, job, output, timing, memory);
    } finally {
      // Files on disk are the engine's scratch: delivered (or failed) now, so gone.
      await Promise.all((output.onDisk ?? []).map((file) => file.discard().catch((error: unknown) => this.#deps.log.warn({ err: error, path: file.path }, 'could not remove an output file'))));
    }
  }

  async #deliverOutputs(
    message: Run, job: Run['jobs'][number], output: Extract<JobOutput, { ok: true }>, timing: { loadMs: number; computeMs: number; received: number; phases: LoadPhases | undefined; energyJ?: number }, memory: BatchMemoryReport | undefined,
  ): Promise<void> {
    if (message.probe) {
      // A health probe: the orchestrator wants to know the model still runs, not its output.
      this.#deps.report({ type: 'done', jobId: job.id, batchId: message.batchId, artifacts: [], timings: { loadMs: timing.loadMs, computeMs: timing.computeMs, totalMs: performance.now() - timing.received } });
      return;
    }
    try {
      const artifacts: ArtifactReport[] = [];
      // Small outputs ride in the report itself (one hop instead of an upload and a report); the rest are uploaded.
      let inlineBudget = this.#deps.deliver.inlineBytes();
      for (const file of output.files) {
        const described = { mediaType: file.mediaType, width: file.width, height: file.height };
        if (file.bytes.length <= inlineBudget) {
          inlineBudget -= file.bytes.length;
          artifacts.push({ digest: sha256Digest(file.bytes), bytes: file.bytes.length, ...described, inline: Buffer.from(file.bytes).toString('base64') });
          continue;
        }
        artifacts.push({ ...(await uploadOutput(this.#deps.deliver.target, job.id, message.uploadCredential, file)), ...described });
      }
      // Files the engine left on disk (a clip and its poster) are streamed to the upload route, never read whole.
      for (const file of output.onDisk ?? []) {
        const uploaded = await uploadFileOutput(this.#deps.deliver.target, job.id, message.uploadCredential, file);
        artifacts.push({ ...uploaded, mediaType: file.mediaType, width: file.width, height: file.height });
      }
      this.#deps.report({
        type: 'done', jobId: job.id, batchId: message.batchId, artifacts, result: output.result,
        timings: { loadMs: timing.loadMs, computeMs: timing.computeMs, totalMs: performance.now() - timing.received, ...(timing.phases ? { phases: timing.phases } : {}) },
        ...(memory ? { memory } : {}), ...(timing.energyJ !== undefined ? { energyJ: timing.energyJ } : {}),
      });
    } catch (error) {
      this.#deps.report(failed(job.id, message.batchId, asEngineError(error)));
    }
  }
}
