import { z } from 'zod';
import { LIMITS, SubmitJobBody } from './jobs.js';

/** A step's name within its pipeline: what later steps name it by. */
export const StepId = z.string().regex(/^[a-z][a-z0-9_-]{0,39}$/i, 'must be a name of letters, digits, _ and - (at most 40), starting with a letter');

/**
 * An earlier step's output as a step's input, in a picture field: `{ "fromStep": "picture", "output": 0 }`. The step
 * is admitted with `{ "fromJob": "<that step's job>", "output": 0 }` in its place (a job reference, protocol/jobs.ts).
 */
export const StepReference = z.strictObject({
  fromStep: StepId,
  output: z.int().min(0).max(63).default(0),
  artifact: z.string().regex(/^[a-z]+\/[a-z0-9.+-]+$/, 'must be a media type (image/png)').max(100).optional(),
});
export type StepReference = z.infer<typeof StepReference>;

/** One step: a job as `POST /v1/jobs` takes it (no idempotency key: the pipeline is one request), with its name. */
export const PipelineStep = SubmitJobBody.omit({ idempotencyKey: true }).extend({ id: StepId });
export type PipelineStep = z.infer<typeof PipelineStep>;

/**
 * `POST /v1/pipelines`: a small DAG of steps submitted at once. Later steps take earlier ones' outputs by
 * `fromStep`; at most `LIMITS.pipeline.steps` steps and `LIMITS.pipeline.depth` in the longest chain.
 */
export const SubmitPipelineBody = z.strictObject({
  steps: z.array(PipelineStep).min(1).max(LIMITS.pipeline.steps),
  /**
   * Where the pipeline's end is POSTed, once, when its last step ends (`pipeline.succeeded`, `pipeline.failed`, …), signed
   * (Standard Webhooks): a URL mesh.yaml's `webhooks.allow` allows. Default: the grant's `webhook` caveat, if any (a
   * grant with one allows no other URL). A step's own `webhook` is called back at that step's end, as a job's is.
   */
  webhook: z.string().min(1).max(2000).optional(),
});
export type SubmitPipelineBody = z.infer<typeof SubmitPipelineBody>;
