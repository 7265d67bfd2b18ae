import { z } from 'zod';
import { JOB_STATUSES, ROUTE_SKIP_REASONS, type ArtifactView, type AttemptView, type BulkItemResult, type ErrorBody, type JobView, type RouteView } from '../../protocol/index.js';
import type { RemovedResults } from '../gallery/gallery-service.js';
import { BINARY, errorResponses, MeshErrorBody, type DocResponse } from './openapi.js';

/**
 * What the jobs API answers, as zod schemas for `/openapi.json` (the routes' `config.openapi`): a client generated
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

/** A JSON answer, documented. */
export const json = (description: string, schema: z.ZodType): DocResponse => ({ description, content: { 'application/json': schema } });

/** The errors every jobs route may answer besides its own: no grant, a grant that may not. */
export const GRANT_ERRORS = { 401: 'No grant, or one that is not valid (expired, revoked, malformed)', 403: 'The grant does not allow this (the caveat that failed is named)' };

export const jobErrors = (reasons: Record<number, string>): Record<number, DocResponse> => errorResponses(MeshErrorBody, { ...GRANT_ERRORS, ...reasons });

/** Bytes of a given media type, documented. */
export const bytesOf = (description: string, mediaTypes: readonly string[]): DocResponse => ({
  description, content: Object.fromEntries(mediaTypes.map((type) => [type, BINARY])),
});
