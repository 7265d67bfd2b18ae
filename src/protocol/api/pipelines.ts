import { z } from 'zod';
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
