import { z } from 'zod';
import {
  Device, JOB_STATUSES, ResidentModel, ROUTE_SKIP_REASONS, ToolReport,
  type ArtifactView, type AttemptView, type BreakerView, type BulkItemResult, type ErrorBody, type ExplainView, type HostView, type JobView, type ReplicaView, type RouteView,
} from '../../protocol/index.js';
import type { RemovedResults } from '../gallery/gallery-service.js';
import { BINARY, errorResponses, MeshErrorBody, type DocResponse } from './openapi.js';

/**
 * What the jobs API (and the mesh's hosts, and a job's explanation) answers, as zod schemas for `/openapi.json` (the routes' `config.openapi`): a client generated
 * from the document gets typed jobs, attempts and results. The answers themselves are built from the protocol's
 * types (protocol/jobs.ts), not parsed with these: `Same` below fails the build when the two drift apart, and
 * `test/integration/openapi.test.ts` holds real answers of a running mesh to these schemas, strictly.
 */
const Time = z.string().describe('an ISO 8601 time, UTC');

export const ErrorBodySchema = z.strictObject({ code: z.string(), message: z.string() });

export const RouteViewSchema = z.strictObject({
  host: z.string().nullable().describe('the host chosen; null when no host could take the job then'),
  class: z.string().nullable().describe('the class of the job type\'s list it was chosen for (a later one is a fallback)'),
  warmth: z.enum(['resident', 'cached', 'cold']).nullable(),
  skipped: z.array(z.strictObject({ host: z.string(), reason: z.enum(ROUTE_SKIP_REASONS) })).describe('hosts passed over and why, the first 16 by name'),
  unlisted: z.partialRecord(z.enum(ROUTE_SKIP_REASONS), z.number()).describe('the other hosts passed over, counted by reason'),
});

export const AttemptViewSchema = z.strictObject({
  n: z.int(),
  host: z.string(),
  replica: z.string(),
  batchId: z.string(),
  batchSize: z.int(),
  status: z.enum(['running', 'succeeded', 'failed', 'lost', 'cancelled']),
  dispatchedAt: Time,
  startedAt: Time.nullable(),
  finishedAt: Time.nullable(),
  loadMs: z.number().nullable().describe('how long making the model resident took (0: it was)'),
  computeMs: z.number().nullable(),
  error: ErrorBodySchema.nullable(),
  route: RouteViewSchema.nullable().describe('why the attempt went to its host'),
});

export const ArtifactViewSchema = z.strictObject({
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
  createdAt: Time,
});

export const JobViewSchema = z.strictObject({
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
  attempts: z.array(AttemptViewSchema),
  batch: z.strictObject({ id: z.string(), size: z.int() }).nullable(),
  artifacts: z.array(ArtifactViewSchema),
  result: z.unknown().describe('what the engine answered beside its files (a tensor job\'s outputs, OCR\'s lines)'),
  error: ErrorBodySchema.nullable(),
  links: z.strictObject({ self: z.string(), events: z.string() }),
});

export const JobAcceptedSchema = z.strictObject({
  id: z.string(),
  status: z.enum(JOB_STATUSES),
  links: z.strictObject({ self: z.string(), events: z.string() }),
  created: z.boolean().describe('false: an idempotent repeat got the job its key named'),
});

export const JobPageSchema = z.strictObject({ jobs: z.array(JobViewSchema), nextCursor: z.string().nullable() });
export const ArtifactPageSchema = z.strictObject({ artifacts: z.array(ArtifactViewSchema), nextCursor: z.string().nullable() });

export const BulkResultsSchema = z.strictObject({
  results: z.array(z.union([
    z.strictObject({ status: z.union([z.literal(202), z.literal(200)]), id: z.string(), jobStatus: z.enum(JOB_STATUSES), created: z.boolean() }),
    z.strictObject({ status: z.int(), error: ErrorBodySchema }),
  ])),
});

export const RemovedResultsSchema = z.strictObject({
  jobId: z.string(),
  deleted: z.array(z.string()).describe('the digests that left the gallery and the job'),
  freed: z.array(z.string()).describe('those whose bytes left the store (nothing else named them)'),
  freedBytes: z.int(),
});

export const BreakerViewSchema = z.strictObject({
  state: z.enum(['closed', 'open', 'half-open']),
  consecutiveFailures: z.int(),
  openUntil: Time.nullable().describe('while open: when it half-opens to let a trial through'),
  opens: z.int().describe('times it opened in a row (the open period doubles with each)'),
  lastFailure: z.string().nullable(),
  trialSuccesses: z.int(),
});

export const ReplicaViewSchema = z.strictObject({
  model: z.string(),
  resident: z.boolean(),
  throughput: z.number().nullable().describe('jobs per second measured on this host (EWMA over batches); null until measured'),
  samples: z.int(),
  health: z.enum(['healthy', 'unhealthy', 'unknown']),
  lastProbeAt: Time.nullable(),
  healthDetail: z.string().nullable(),
  breaker: BreakerViewSchema,
});

export const HostViewSchema = z.strictObject({
  id: z.string(),
  connected: z.boolean(),
  draining: z.boolean(),
  classes: z.array(z.string()),
  unavailable: z.record(z.string(), z.string()).describe('classes it was given and cannot serve, with why'),
  tools: z.array(ToolReport),
  engines: z.array(z.string()),
  models: z.array(z.string()).nullable().describe('the models its grant allows; null: any'),
  version: z.string(),
  concurrency: z.int(),
  freeSlots: z.int(),
  batchesInFlight: z.int(),
  jobsInFlight: z.int(),
  probesInFlight: z.int(),
  devices: z.array(Device),
  resident: z.array(ResidentModel),
  health: z.enum(['healthy', 'late', 'disconnected']),
  breaker: BreakerViewSchema,
  replicas: z.array(ReplicaViewSchema),
  connectedAt: Time.nullable(),
  lastSeenAt: Time,
  lostAt: Time.nullable(),
  left: z.boolean().describe('not connected because it drained and left on purpose'),
});

export const HostsSchema = z.strictObject({ hosts: z.array(HostViewSchema) });

export const ExplainViewSchema = z.strictObject({
  id: z.string(),
  status: z.enum(JOB_STATUSES),
  model: z.string(),
  classes: z.array(z.string()).describe('the classes it may run on, in routing order'),
  hosts: z.array(z.string()).nullable().describe('the hosts its grant allows; null: any'),
  summary: z.string().describe('one sentence'),
  attempts: z.array(z.strictObject({ n: z.int(), host: z.string(), status: z.string(), error: ErrorBodySchema.nullable(), route: RouteViewSchema.nullable() })),
  waiting: z.strictObject({
    for: z.enum(['retry backoff', 'a batch to fill', 'a free slot', 'a host of its classes', 'a model swap', 'its turn']),
    detail: z.string(),
    position: z.strictObject({ ahead: z.int(), queued: z.int() }).nullable(),
    batch: z.strictObject({ size: z.int(), target: z.int(), releaseBy: Time.nullable() }).nullable(),
    retryAt: Time.nullable(),
    hosts: z.array(z.strictObject({
      host: z.string(), class: z.string().nullable(), canTake: z.boolean(), reason: z.enum(ROUTE_SKIP_REASONS).nullable(), detail: z.string().nullable().optional(),
    })),
    unlisted: z.partialRecord(z.enum(ROUTE_SKIP_REASONS), z.number()),
  }).nullable().describe('for a queued job: what it waits for'),
});

/** Compile-time: a schema's output and the type the route builds its answer from are the same type. */
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const agree = <_T extends true>(): void => undefined;
agree<Same<z.output<typeof ErrorBodySchema>, ErrorBody>>();
agree<Same<z.output<typeof RouteViewSchema>, RouteView>>();
agree<Same<z.output<typeof AttemptViewSchema>, AttemptView>>();
agree<Same<z.output<typeof ArtifactViewSchema>, ArtifactView>>();
agree<Same<z.output<typeof JobViewSchema>, JobView>>();
agree<Same<z.output<typeof BulkResultsSchema>['results'][number], BulkItemResult>>();
agree<Same<Omit<z.output<typeof RemovedResultsSchema>, 'jobId'>, RemovedResults>>();
agree<Same<z.output<typeof BreakerViewSchema>, BreakerView>>();
agree<Same<z.output<typeof ReplicaViewSchema>, ReplicaView>>();
agree<Same<z.output<typeof HostViewSchema>, HostView>>();
agree<Same<z.output<typeof ExplainViewSchema>, ExplainView>>();

/** A JSON answer, documented. */
export const json = (description: string, schema: z.ZodType): DocResponse => ({ description, content: { 'application/json': schema } });

const GRANT_ERRORS = { 401: 'No grant, or one that is not valid (expired, revoked, malformed)', 403: 'The grant does not allow this (the caveat that failed is named)' };

/** The error answers of a route that needs a grant: no grant or one not valid (401), one that may not (403), and its own. */
export const errorAnswers = (reasons: Record<number, string>): Record<number, DocResponse> => errorResponses(MeshErrorBody, { ...GRANT_ERRORS, ...reasons });

/** Bytes of a given media type, documented. */
export const bytesOf = (description: string, mediaTypes: readonly string[]): DocResponse => ({
  description, content: Object.fromEntries(mediaTypes.map((type) => [type, BINARY])),
});
