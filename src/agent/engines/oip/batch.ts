import type { ErrorCode } from '../../../protocol/index.js';
import type { EngineJob, JobOutput, Progress } from '../../core/engine.js';
import { ServerError } from '../kit/server-error.js';
import type { ServerBatch } from '../kit/server.js';
import type { OipClient, Tensor } from './client.js';
import { sampleShapeFor, type InferPlan } from './plan.js';
import { elementCount } from './tensors.js';

type JobError = Extract<JobOutput, { ok: false }>;

interface Sample {
  job: EngineJob;
  index: number;
  values: number[];
  shape: number[];
}

/**
 * One batch of tensor jobs against an OIP server: valid jobs are stacked
 * along the batch axis, at most `maxBatch` per infer request (one request per
 * job when the model does not batch); requests go one after another and each
 * finished request is one progress step. A request whose jobs are all
 * cancelled is aborted, or never sent.
 */
export class OipBatch implements ServerBatch {
  readonly #client: OipClient;
  readonly #plan: InferPlan;
  readonly #jobs: readonly EngineJob[];
  readonly #onProgress: (progress: Progress) => void;
  readonly #cancelled = new Set<string>();
  #inFlight: { jobIds: string[]; controller: AbortController } | null = null;

  constructor(client: OipClient, plan: InferPlan, jobs: readonly EngineJob[], onProgress: (progress: Progress) => void) {
    this.#client = client;
    this.#plan = plan;
    this.#jobs = jobs;
    this.#onProgress = onProgress;
  }

  cancel(jobIds: readonly string[]): void {
    for (const id of jobIds) if (this.#jobs.some((job) => job.id === id)) this.#cancelled.add(id);
    const inFlight = this.#inFlight;
    if (inFlight && inFlight.jobIds.every((id) => this.#cancelled.has(id))) inFlight.controller.abort();
  }

  async run(): Promise<JobOutput[]> {
    const outputs: (JobOutput | null)[] = this.#jobs.map(() => null);
    const samples: Sample[] = [];
    for (const [index, job] of this.#jobs.entries()) {
      const sample = this.#sample(job, index);
      if ('code' in sample) outputs[index] = sample;
      else samples.push(sample);
    }
    const requests = this.#chunk(samples);
    for (const [done, request] of requests.entries()) {
      const results = await this.#infer(request);
      request.forEach((sample, i) => (outputs[sample.index] = results[i]!));
      this.#onProgress({ step: done + 1, total: requests.length });
    }
    return outputs.map((output, index) => {
      const jobId = this.#jobs[index]!.id;
      return this.#cancelled.has(jobId) ? { jobId, ok: false, code: 'CANCELLED', message: 'cancelled', retryable: false } : output!;
    });
  }

  #sample(job: EngineJob, index: number): Sample | JobError {
    const x = job.input.x;
    const fail = (message: string): JobError => ({ jobId: job.id, ok: false, code: 'INVALID_INPUT', message, retryable: false });
    if (!Array.isArray(x) || x.length === 0 || !x.every((value) => typeof value === 'number' && Number.isFinite(value))) {
      return fail('x must be a non-empty list of finite numbers');
    }
    const shape = sampleShapeFor(this.#plan, x.length);
    return typeof shape === 'string' ? fail(shape) : { job, index, values: x as number[], shape };
  }

  /** Consecutive jobs of the same shape, at most maxBatch to a request. */
  #chunk(samples: Sample[]): Sample[][] {
    const chunks: Sample[][] = [];
    for (const sample of samples) {
      const last = chunks.at(-1);
      if (last && last.length < this.#plan.maxBatch && last[0]!.shape.join() === sample.shape.join()) last.push(sample);
      else chunks.push([sample]);
    }
    return chunks;
  }

  async #infer(samples: Sample[]): Promise<JobOutput[]> {
    const jobIds = samples.map((sample) => sample.job.id);
    if (jobIds.every((id) => this.#cancelled.has(id))) return samples.map((sample) => this.#error(sample, 'CANCELLED', 'cancelled', false));
    const { input, batching, binary, output, path } = this.#plan;
    const shape = batching ? [samples.length, ...samples[0]!.shape] : samples[0]!.shape;
    const tensor: Tensor = { name: input.name, datatype: input.datatype, shape, values: samples.flatMap((sample) => sample.values) };
    const controller = new AbortController();
    this.#inFlight = { jobIds, controller };
    let outputs: Tensor[];
    try {
      outputs = await this.#client.infer(path, tensor, { binary, output, signal: controller.signal });
    } catch (error) {
      if (controller.signal.aborted) return samples.map((sample) => this.#error(sample, 'CANCELLED', 'cancelled', false));
      const [code, message, retryable] = this.#classify(error);
      return samples.map((sample) => this.#error(sample, code, message, retryable));
    } finally {
      this.#inFlight = null;
    }
    const y = outputs.find((candidate) => candidate.name === output);
    if (!y) return samples.map((sample) => this.#error(sample, 'ENGINE_FAILED', `${this.#client.label} returned no output "${output}"`, false));
    const perJob = y.values.length / samples.length;
    const jobShape = batching ? y.shape.slice(1) : y.shape;
    if (!Number.isInteger(perJob) || (batching && y.shape[0] !== samples.length) || elementCount(jobShape) !== perJob) {
      const message = `${this.#client.label} returned output "${output}" of shape [${y.shape.join(', ')}] with ${y.values.length} values for ${samples.length} job(s)`;
      return samples.map((sample) => this.#error(sample, 'ENGINE_FAILED', message, false));
    }
    const values = Array.from(y.values);
    return samples.map((sample, i) => ({
      jobId: sample.job.id, ok: true, files: [],
      // The same result the built-in tensor pipeline gives: this job's row and its shape.
      result: { y: values.slice(i * perJob, (i + 1) * perJob), shape: jobShape },
    }));
  }

  #classify(error: unknown): [code: ErrorCode, message: string, retryable: boolean] {
    if (error instanceof ServerError && error.failure !== 'protocol') {
      if (error.status === 400) return ['INVALID_INPUT', `${this.#client.label} refused the request: ${error.detail}`, false];
      // A server that cannot take the request now (busy after the retries, unreachable) may be ready on the next attempt.
      if (error.status === null || error.busy) return ['NOT_READY', error.summary, true];
      return ['ENGINE_FAILED', error.summary, error.status >= 500];
    }
    return ['ENGINE_FAILED', `${this.#client.label}: the response could not be read: ${(error as Error).message}`, false];
  }

  #error(sample: Sample, code: ErrorCode, message: string, retryable: boolean): JobError {
    return { jobId: sample.job.id, ok: false, code, message, retryable };
  }
}
