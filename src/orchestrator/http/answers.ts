import { z } from 'zod';
import {
  Device, JOB_STATUSES, ModelManifest, ResidentModel, ROUTE_SKIP_REASONS, ToolReport,
  type ArtifactView, type AttemptView, type BreakerView, type BulkItemResult, type ErrorBody, type ExplainView, type HostView, type JobView, type ReplicaView, type RouteView,
} from '../../protocol/index.js';
import type { AuditView } from '../../protocol/audit.js';
import type { GrantView } from '../auth/issuer.js';
import type { LoadAnswer } from '../autoscale/replica-requests.js';
import type { GalleryView, RemovedResults } from '../gallery/gallery-service.js';
import type { SeriesView } from '../metrics/series.js';
import type { ModelFamilyView } from '../registry/catalog.js';
import type { StorageView } from '../status/mesh-status.js';
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
  configured: z.array(z.string()).nullable().describe('the models its own config declares (commands, servers: they run only where declared); null: the agent did not say'),
  engineUser: z.string().nullable().describe('who its engine processes run as, in words (`nobody`; `root: nobody cannot read …`); null: the agent did not say'),
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

// The mesh: status, series, health.

/** The data folder's disk (storage/free-space.ts's DiskView). */
export const DiskSchema = z.strictObject({
  path: z.string().describe('the data folder, whose filesystem is measured'),
  freeBytes: z.int().describe('free space, as last measured (at most a second ago when asked here)'),
  totalBytes: z.int(),
  minFreeBytes: z.int().describe('storage.minFreeMB: below it new uploads, jobs and model adds are refused (507 STORAGE_FULL); 0: no floor'),
  low: z.boolean().describe('below the floor now: new work is refused until space is back'),
  checkedAt: z.string().nullable().describe('when it was measured; null if it could not be'),
});

export const StatusSchema = z.strictObject({
  hosts: z.array(HostViewSchema).describe('the connected hosts'),
  queues: z.record(z.string(), z.strictObject({
    depth: z.int(), limit: z.int(), blocked: z.string().nullable().describe('why no connected host can run the model; null when one can'),
  })).describe('per model'),
  models: z.record(z.string(), z.strictObject({
    desired: z.int(), min: z.int(), max: z.int().nullable(), targetInFlight: z.number(), idleWindowS: z.number(), demand: z.number(),
    replicas: z.array(z.strictObject({ host: z.string(), state: z.enum(['loading', 'ready', 'draining', 'unloading']), held: z.boolean() })),
  })).describe('per model: its replicas, wanted and where'),
  jobs: z.record(z.string(), z.int()).describe('jobs by status'),
  orchestrators: z.array(z.record(z.string(), z.unknown())).optional().describe('on a shared store: every orchestrator on it, its role and when it was seen'),
  disk: DiskSchema.optional().describe('the data folder\'s disk against its floor: `low` while new work is refused'),
});

export const SeriesSchema = z.strictObject({
  stepMs: z.int(),
  windowMs: z.int(),
  times: z.array(z.int()).describe('each point\'s time, seconds since the epoch'),
  models: z.record(z.string(), z.strictObject({
    succeededPerSecond: z.array(z.number().nullable()), failedPerSecond: z.array(z.number().nullable()), queueDepth: z.array(z.number().nullable()),
    p50Ms: z.array(z.number().nullable()), p99Ms: z.array(z.number().nullable()),
  })),
  devices: z.record(z.string(), z.strictObject({ host: z.string(), device: z.string(), budgetMB: z.number(), usedMB: z.array(z.number().nullable()) })).describe('keyed host/device'),
});

export const StorageSchema = z.strictObject({
  blobs: z.strictObject({ location: z.string().describe('a folder, or s3://bucket/prefix'), count: z.int(), bytes: z.int() }),
  jobs: z.strictObject({
    retentionDays: z.int().describe('finished jobs no published result names are deleted this long after they ended; 0: never'),
    counts: z.record(z.string(), z.int()).describe('jobs kept, by status'),
  }),
  disk: DiskSchema.optional().describe('the data folder\'s disk (always sent by this version)'),
});

export const LiveSchema = z.strictObject({ ok: z.literal(true) });
export const ReadySchema = z.strictObject({ ok: z.literal(true), agents: z.int().describe('agents connected') });

// Models.

export const ModelVersionSchema = ModelManifest.extend({ policy: z.record(z.string(), z.unknown()).describe('batching, queue, replicas and timeouts in effect') });
export const ModelsSchema = z.strictObject({
  models: z.array(ModelVersionSchema),
  families: z.array(z.strictObject({
    name: z.string(), versions: z.array(z.string()), pinned: z.string().nullable(), split: z.record(z.string(), z.number()).nullable(), route: z.string(),
  })).describe('the models with versions, and which version a bare name runs'),
});
export const ModelFamilySchema = z.strictObject({
  name: z.string(),
  pinned: z.string().nullable(),
  split: z.record(z.string(), z.number()).nullable(),
  pinnedIn: z.enum(['mesh.yaml', 'api']).nullable(),
  route: z.string().describe('which version a job naming only the model runs now, in words'),
  versions: z.array(ModelVersionSchema),
});
const ReplicaChangeSchema = z.strictObject({
  host: z.string(), model: z.string(), change: z.enum(['loaded', 'unloaded']), device: z.string().nullable(), memoryMB: z.number().nullable(),
  before: z.array(Device).describe('the host\'s devices before'), after: z.array(Device).describe('and after'),
});
export const LoadAnswerSchema = z.strictObject({
  model: z.string(),
  wanted: z.int().describe('how many hosts should hold it'),
  loaded: z.array(ReplicaChangeSchema),
  note: z.string().nullable().describe('why fewer than wanted, or why the count asked was cut'),
});
export const UnloadAnswerSchema = z.strictObject({ unloaded: z.array(ReplicaChangeSchema) });

// Grants and the audit log.

export const GrantViewSchema = z.strictObject({
  id: z.string(), kind: z.string(), note: z.string().nullable(), caveats: z.array(z.string()).nullable(), createdAt: Time, revokedAt: Time.nullable(),
});
export const MintedSchema = z.strictObject({ id: z.string(), kind: z.string(), token: z.string().describe('the grant: send it as "Authorization: Bearer <token>"'), caveats: z.array(z.string()) });
export const NarrowedSchema = z.strictObject({ token: z.string(), caveats: z.array(z.string()) });
export const GrantPageSchema = z.strictObject({ grants: z.array(GrantViewSchema), nextCursor: z.string().nullable() });
export const AuditViewSchema = z.strictObject({
  at: Time, event: z.string(), grantId: z.string().nullable(), actor: z.string().nullable(), route: z.string().nullable(), client: z.string().nullable(),
  status: z.int().nullable(), code: z.string().nullable(), detail: z.string().nullable(),
});
export const AuditPageSchema = z.strictObject({ entries: z.array(AuditViewSchema), nextCursor: z.string().nullable() });

// The gallery, hosts draining.

export const GalleryViewSchema = z.strictObject({
  albums: z.array(z.string()).describe('albums the grant may see that hold results, and any it is limited to'),
  defaultAlbum: z.string(),
  may: z.strictObject({ submit: z.boolean(), delete: z.boolean() }),
});
export const DrainingSchema = z.strictObject({ host: z.string(), draining: z.literal(true), jobsInFlight: z.int() });

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
agree<Same<z.output<typeof SeriesSchema>, SeriesView>>();
agree<Same<z.output<typeof StorageSchema>, StorageView>>();
agree<Same<z.output<typeof ModelFamilySchema>, Omit<ModelFamilyView, 'versions'> & { versions: z.output<typeof ModelVersionSchema>[] }>>();
agree<Same<z.output<typeof LoadAnswerSchema>, LoadAnswer>>();
agree<Same<z.output<typeof GrantViewSchema>, GrantView>>();
agree<Same<z.output<typeof AuditViewSchema>, AuditView>>();
agree<Same<z.output<typeof GalleryViewSchema>, GalleryView>>();

/** A JSON answer, documented. */
export const json = (description: string, schema: z.ZodType): DocResponse => ({ description, content: { 'application/json': schema } });

const GRANT_ERRORS = { 401: 'No grant, or one that is not valid (expired, revoked, malformed)', 403: 'The grant does not allow this (the caveat that failed is named)' };

/** The error answers of a route that needs a grant: no grant or one not valid (401), one that may not (403), and its own. */
export const errorAnswers = (reasons: Record<number, string>): Record<number, DocResponse> => errorResponses(MeshErrorBody, { ...GRANT_ERRORS, ...reasons });

/** Bytes of a given media type, documented. */
export const bytesOf = (description: string, mediaTypes: readonly string[]): DocResponse => ({
  description, content: Object.fromEntries(mediaTypes.map((type) => [type, BINARY])),
});
