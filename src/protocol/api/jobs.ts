import { z } from 'zod';
import { ErrorBody } from '../errors.js';
import { JOB_STATUSES } from '../jobs.js';
import { ROUTE_SKIP_REASONS } from '../routing.js';
import { Time } from './time.js';

/**
 * A job as the jobs API answers it: the job, its attempts (each with the routing decision behind it) and its
 * artifacts; what a submit answers; pages of jobs. Each answer is its zod schema, from which `/openapi.json` is made
 * and its type inferred: the routes, the services that build the answers and the CLI use the same one.
 */

/** One routing decision, as `GET /v1/jobs/:id` shows it per attempt. */
export const RouteView = z.strictObject({
  /** The host chosen; null when no host could take the job then. */
  host: z.string().nullable().describe('the host chosen; null when no host could take the job then'),
  /** The class of the job's ordered list it was chosen for (a later one is a fallback). */
  class: z.string().nullable().describe('the class of the job type\'s list it was chosen for (a later one is a fallback)'),
  /** Whether the chosen replica had the model resident, its file cached, or neither. */
  warmth: z.enum(['resident', 'cached', 'cold']).nullable(),
  /** Hosts passed over, and why: the first 16 by name. */
  skipped: z.array(z.strictObject({ host: z.string(), reason: z.enum(ROUTE_SKIP_REASONS) })).describe('hosts passed over and why, the first 16 by name'),
  /** The other hosts passed over, counted by reason (`not sampled` for those a large mesh's router did not look at). */
  unlisted: z.partialRecord(z.enum(ROUTE_SKIP_REASONS), z.number()).describe('the other hosts passed over, counted by reason'),
});
export type RouteView = z.infer<typeof RouteView>;

export const AttemptView = z.strictObject({
  n: z.int(),
  host: z.string(),
  replica: z.string(),
  batchId: z.string(),
  batchSize: z.int(),
  status: z.enum(['running', 'succeeded', 'failed', 'lost', 'cancelled']),
  dispatchedAt: Time,
  startedAt: Time.nullable(),
  finishedAt: Time.nullable(),
  /** How long the host took to make the model resident for this attempt (0: it was; null: not known yet, or never started). */
  loadMs: z.number().nullable().describe('how long making the model resident took (0: it was)'),
  computeMs: z.number().nullable(),
  error: ErrorBody.nullable(),
  /** The routing decision that sent this attempt to its host (null for attempts made before route logs). */
  route: RouteView.nullable().describe('why the attempt went to its host'),
});
export type AttemptView = z.infer<typeof AttemptView>;

/** A published result: one file of a job, with what made it. */
export const ArtifactView = z.strictObject({
  digest: z.string().describe('sha256:<64 hex>'),
  mediaType: z.string(),
  bytes: z.int(),
  url: z.string().describe('/v1/blobs/<digest>'),
  jobId: z.string(),
  model: z.string(),
  host: z.string(),
  type: z.string(),
  prompt: z.string().nullable(),
  album: z.string(),
  width: z.int().nullable(),
  height: z.int().nullable(),
  computeMs: z.number().nullable(),
  totalMs: z.number().nullable(),
  /** The energy its job took (Wh), its share of its batch's, from the GPU's reported power; null where none was reported. */
  energyWh: z.number().nullable().describe('the energy its job took (Wh), from the GPU\'s reported power; null where none was reported'),
  createdAt: Time,
});
export type ArtifactView = z.infer<typeof ArtifactView>;

const JobLinks = z.strictObject({ self: z.string(), events: z.string() });

export const JobView = z.strictObject({
  id: z.string(),
  type: z.string(),
  model: z.string().describe('the version that ran it, <model>@<version> for a versioned model'),
  status: z.enum(JOB_STATUSES),
  priority: z.int(),
  album: z.string(),
  input: z.record(z.string(), z.unknown()).describe('the input as admitted: normalized, defaults (the seed drawn) filled in'),
  createdAt: Time,
  updatedAt: Time,
  finishedAt: Time.nullable(),
  deadlineAt: Time.nullable(),
  attempts: z.array(AttemptView),
  batch: z.strictObject({ id: z.string(), size: z.int() }).nullable(),
  artifacts: z.array(ArtifactView),
  result: z.unknown().describe('what the engine answered beside its files (a tensor job\'s outputs, OCR\'s lines)'),
  error: ErrorBody.nullable(),
  links: JobLinks,
});
export type JobView = z.infer<typeof JobView>;

/** What `POST /v1/jobs` answers (202; 200 for an idempotent repeat). */
export const JobAccepted = z.strictObject({
  id: z.string(),
  status: z.enum(JOB_STATUSES),
  links: JobLinks,
  created: z.boolean().describe('false: an idempotent repeat got the job its key named'),
});
export type JobAccepted = z.infer<typeof JobAccepted>;

export const JobPage = z.strictObject({ jobs: z.array(JobView), nextCursor: z.string().nullable() });
export type JobPage = z.infer<typeof JobPage>;

/** One item of a bulk submit's answer: each job is admitted or refused on its own. */
export const BulkItemResult = z.union([
  z.strictObject({ status: z.union([z.literal(202), z.literal(200)]), id: z.string(), jobStatus: z.enum(JOB_STATUSES), created: z.boolean() }),
  z.strictObject({ status: z.int(), error: ErrorBody }),
]);
export type BulkItemResult = z.infer<typeof BulkItemResult>;

export const BulkResults = z.strictObject({ results: z.array(BulkItemResult) });
export type BulkResults = z.infer<typeof BulkResults>;
