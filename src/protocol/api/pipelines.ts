import { z } from 'zod';
import { ErrorBody } from '../errors.js';
import { JOB_STATUSES } from '../jobs.js';
import { JobView } from './jobs.js';
import { Time } from './time.js';

/**
 * Where a pipeline stands, from its steps: `running` while any step has not ended, else `succeeded` when every step
 * did, else how the first step that did not succeed ended.
 */
export const PIPELINE_STATUSES = ['running', 'succeeded', 'failed', 'cancelled', 'expired'] as const;

const PipelineLinks = z.strictObject({ self: z.string(), events: z.string() });

/** What `POST /v1/pipelines` answers (202): the pipeline's id and each step's job. */
export const PipelineAccepted = z.strictObject({
  id: z.string(),
  steps: z.array(z.strictObject({ id: z.string(), jobId: z.string(), status: z.enum(JOB_STATUSES) })),
  links: PipelineLinks,
});
export type PipelineAccepted = z.infer<typeof PipelineAccepted>;

/** `GET /v1/pipelines/:id`: the pipeline and each step's job as `GET /v1/jobs/:id` shows it. */
export const PipelineView = z.strictObject({
  id: z.string(),
  status: z.enum(PIPELINE_STATUSES),
  createdAt: Time,
  steps: z.array(z.strictObject({ id: z.string(), job: JobView })),
  links: PipelineLinks,
});
export type PipelineView = z.infer<typeof PipelineView>;

/**
 * A pipeline's end as its callback receives it (the `data` of a `pipeline.<status>` event): each step's job, where it
 * ended and the digests of what it made, and — unless it succeeded — the step that first did not succeed and why (a
 * step failed with SOURCE_FAILED only because a step before it did is not the cause; the step before is).
 */
export const PipelineEndSummary = z.strictObject({
  id: z.string(),
  status: z.enum(PIPELINE_STATUSES).exclude(['running']),
  createdAt: Time,
  steps: z.array(z.strictObject({
    id: z.string(), jobId: z.string(), type: z.string(), model: z.string(), status: z.enum(JOB_STATUSES),
    artifacts: z.array(z.strictObject({ digest: z.string(), mediaType: z.string() })),
    error: ErrorBody.nullable(),
  })),
  cause: z.strictObject({ step: z.string(), jobId: z.string(), status: z.enum(JOB_STATUSES), error: ErrorBody.nullable() }).nullable(),
  links: PipelineLinks,
});
export type PipelineEndSummary = z.infer<typeof PipelineEndSummary>;
