import { z } from 'zod';
import { ErrorBody } from '../errors.js';
import { JOB_STATUSES } from '../jobs.js';
import { ROUTE_SKIP_REASONS } from '../routing.js';
import { RouteView } from './jobs.js';
import { Time } from './time.js';

/** What a queued job waits for. */
export const WaitingFor = z.enum(['retry backoff', 'a batch to fill', 'a free slot', 'a host of its classes', 'a model swap', 'its turn', 'its source jobs']);
export type WaitingFor = z.infer<typeof WaitingFor>;

/** `GET /v1/jobs/:id/explain`: where a job went and why, or why it is still waiting. */
export const ExplainView = z.strictObject({
  id: z.string(),
  status: z.enum(JOB_STATUSES),
  model: z.string(),
  /** The classes it may run on, in routing order (its type's routing narrowed by its grant). */
  classes: z.array(z.string()).describe('the classes it may run on, in routing order'),
  /** The hosts its grant allows; null: any. */
  hosts: z.array(z.string()).nullable().describe('the hosts its grant allows; null: any'),
  summary: z.string().describe('one sentence'),
  attempts: z.array(z.strictObject({ n: z.int(), host: z.string(), status: z.string(), error: ErrorBody.nullable(), route: RouteView.nullable() })),
  /** For a queued job, or a waiting one (`for`: its source jobs; `detail` names each and where it stands). */
  waiting: z.strictObject({
    for: WaitingFor,
    detail: z.string(),
    /** Jobs ahead of it in its model's queue, and how many are queued there. */
    position: z.strictObject({ ahead: z.int(), queued: z.int() }).nullable(),
    /** Its compatibility group: jobs in it, the size that releases it at once, and when it leaves regardless. */
    batch: z.strictObject({ size: z.int(), target: z.int(), releaseBy: Time.nullable() }).nullable(),
    retryAt: Time.nullable(),
    /**
     * Hosts by name (the first 16 passed over), whether each could take the job now, and if not why; `detail` says
     * more where the host told why (`class unavailable`: `ffmpeg not found (…)`).
     */
    hosts: z.array(z.strictObject({
      host: z.string(), class: z.string().nullable(), canTake: z.boolean(), reason: z.enum(ROUTE_SKIP_REASONS).nullable(), detail: z.string().nullable().optional(),
    })),
    /** The other hosts, counted by why they cannot take it (or were not looked at). */
    unlisted: z.partialRecord(z.enum(ROUTE_SKIP_REASONS), z.number()),
  }).nullable().describe('for a queued or waiting job: what it waits for'),
});
export type ExplainView = z.infer<typeof ExplainView>;
