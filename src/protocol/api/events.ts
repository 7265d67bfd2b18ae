import type { ErrorBody } from '../errors.js';
import type { LoadPhases } from '../link.js';
import type { ArtifactView } from './jobs.js';

/**
 * Job events as they travel over SSE: the SSE `event:` field is the `type`
 * and the `data:` field is the whole object as JSON.
 */
export type JobEvent =
  /** The job takes other jobs' outputs and waits for them (`for`: their ids) to succeed; `queued` follows when they do. */
  | { type: 'waiting'; jobId: string; model: string; jobType: string; prompt: string | null; for: string[]; at: string }
  /**
   * `waitsFor`: when every host that could run it takes no work for its hours, which and until when (`nightbox: out
   * of hours until Mon 22:00 (Europe/Berlin)`); live only (a replayed history has no such field).
   */
  | { type: 'queued'; jobId: string; model: string; jobType: string; prompt: string | null; waitsFor?: string; at: string }
  | { type: 'dispatched'; jobId: string; host: string; replica: string; batchId: string; batchSize: number; attempt: number; at: string }
  /**
   * The host is making the job's model resident (pulling its file, starting its server, building its session): sent
   * when loading begins, and again with `loadMs` when the model is ready and the job starts (scale from zero), then
   * with `phases`, where the agent measured that time went (pull, evict, spawn, ready, init: see LoadPhases).
   */
  | { type: 'loading'; jobId: string; model: string; host: string; loadMs?: number; phases?: LoadPhases; at: string }
  | { type: 'running'; jobId: string; host: string; at: string }
  | { type: 'progress'; jobId: string; step: number; total: number; pct: number; at: string }
  /**
   * A picture of the job's work so far (the refinement after `step` of `total`), when its input asked for previews:
   * PNG as base64. Sent live to the job's followers only: never kept for replay.
   */
  | { type: 'preview'; jobId: string; step: number; total: number; mediaType: 'image/png'; b64: string; at: string }
  | { type: 'succeeded'; jobId: string; artifacts: ArtifactView[]; result: unknown; at: string }
  | { type: 'failed'; jobId: string; error: ErrorBody; at: string }
  | { type: 'cancelled'; jobId: string; at: string }
  | { type: 'expired'; jobId: string; at: string };

export type JobEventType = JobEvent['type'];
export const TERMINAL_EVENTS: ReadonlySet<JobEventType> = new Set(['succeeded', 'failed', 'cancelled', 'expired']);

export function isTerminalEvent(event: JobEvent): boolean {
  return TERMINAL_EVENTS.has(event.type);
}

/**
 * Events about the mesh rather than one job, named `noun:verb`; they reach
 * `GET /v1/events` for grants that may read mesh status.
 */
export type MeshEvent =
  | { type: 'host:joined'; host: string; classes: string[]; at: string }
  | { type: 'host:lost'; host: string; reason: string; at: string }
  /** The host finishes its work in flight and takes no more (SIGTERM, `gpumesh agent drain`, or an admin's drain). */
  | { type: 'host:draining'; host: string; jobsInFlight: number; at: string }
  /**
   * A linked host stopped taking work (`state`: its owner is using it, it is outside its hours, its GPUs are too hot),
   * or took work again (`host:back`). `until`: when it expects to be back (its next window), null when it cannot say.
   */
  | { type: 'host:away'; host: string; state: 'yielded' | 'off-hours' | 'hot' | 'asleep'; reason: string; since: string; until: string | null; at: string }
  /** Work waited for a sleeping host: the orchestrator sent it a Wake-on-LAN packet. */
  | { type: 'host:waking'; host: string; at: string }
  | { type: 'host:back'; host: string; at: string }
  /** A draining host finished and closed its link on purpose. */
  | { type: 'host:left'; host: string; at: string }
  /** An agent would not load a replica the autoscaler asked for; the autoscaler tries another host. */
  | { type: 'replica:refused'; host: string; model: string; code: string; message: string; at: string }
  /** A host made a model resident (it said `loaded`): the dashboard's memory bars and resident models change. */
  | { type: 'replica:loaded'; host: string; model: string; device: string; memoryMB: number; at: string }
  /** A host let a resident model go (idle, asked to, or to make room). */
  | { type: 'replica:unloaded'; host: string; model: string; device: string; at: string }
  /**
   * Reports of one message a host sent about jobs it does not hold, refused together: `count` of them, the first
   * `jobIds` (at most 10; `jobId` is the first, or null), `what` the message type.
   */
  | { type: 'link:refused'; host: string; what: string; count: number; jobIds: string[]; jobId: string | null; at: string }
  /** A stored blob failed its integrity check (and was moved to quarantine). */
  | { type: 'blob:corrupt'; digest: string; check: 'size' | 'hash'; quarantined: boolean; at: string }
  /**
   * A circuit breaker changed state. `model` names the replica's model; null is the host's own breaker (link-level
   * failures). `reason` is the failure that opened it; `openForMs` how long it stays open before a trial.
   */
  | { type: 'breaker:opened'; host: string; model: string | null; reason: string; openForMs: number; at: string }
  | { type: 'breaker:half-open'; host: string; model: string | null; at: string }
  | { type: 'breaker:closed'; host: string; model: string | null; at: string };

export type MeshEventType = MeshEvent['type'];

/**
 * Every event name a stream may carry, for checking the names a client asks for (`GET /v1/events?types=`). A record
 * over both unions: an event type added to either without its name here does not compile.
 */
const EVENT_NAMES: Record<JobEventType | MeshEventType, true> = {
  waiting: true, queued: true, dispatched: true, loading: true, running: true, progress: true, preview: true, succeeded: true, failed: true, cancelled: true, expired: true,
  'host:joined': true, 'host:lost': true, 'host:draining': true, 'host:away': true, 'host:back': true, 'host:waking': true, 'host:left': true, 'replica:refused': true, 'replica:loaded': true, 'replica:unloaded': true,
  'link:refused': true,
  'blob:corrupt': true, 'breaker:opened': true, 'breaker:half-open': true, 'breaker:closed': true,
};
export const EVENT_TYPES: readonly (JobEventType | MeshEventType)[] = Object.keys(EVENT_NAMES) as (JobEventType | MeshEventType)[];

/**
 * The last event of a stream whose grant ended while it was open (revoked, or
 * past its expiry); the stream closes after it. Reconnecting with the same
 * grant is refused with the same code.
 */
export interface GrantEndedEvent {
  type: 'grant:ended';
  reason: 'revoked' | 'expired';
  error: ErrorBody;
  at: string;
}
