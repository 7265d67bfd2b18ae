import type { ErrorBody, JobStatus } from './jobs.js';
import type { Device, ResidentModel, ToolReport } from './link.js';

/**
 * Why a routing decision passed a host over. The first nine, and `no replica`, are the reasons a
 * host cannot take the job; the rest name usable hosts that lost to a better
 * one (`failed this job`: an earlier attempt of this job failed there, and
 * another usable host was free). The order is part of the stored route log
 * (each reason is kept as its index), so new reasons are only ever appended.
 */
export const ROUTE_SKIP_REASONS = [
  'disconnected', 'draining', 'breaker open', 'unhealthy', 'class not granted', 'host not granted',
  'model too large', 'no free slot', 'engine missing', 'not resident', 'busier', 'not sampled', 'failed this job',
  // Other hosts hold replicas of the model (the autoscaler's) and this one has no ready one (none, still loading, or being unloaded).
  'no replica',
  // The host's own grant (its `models` caveat) does not allow it the model.
  'model not granted',
  // The host was meant to serve one of the job's classes and cannot (`video` without ffmpeg; its hello says why).
  'class unavailable',
  // The model is a command or a server, which runs only where the host's own config declares it, and this one does not.
  'not configured',
] as const;
export type RouteSkipReason = (typeof ROUTE_SKIP_REASONS)[number];

/** One routing decision, as `GET /v1/jobs/:id` shows it per attempt. */
export interface RouteView {
  /** The host chosen; null when no host could take the job then. */
  host: string | null;
  /** The class of the job's ordered list it was chosen for (a later one is a fallback). */
  class: string | null;
  /** Whether the chosen replica had the model resident, its file cached, or neither. */
  warmth: 'resident' | 'cached' | 'cold' | null;
  /** Hosts passed over, and why: the first 16 by name. */
  skipped: { host: string; reason: RouteSkipReason }[];
  /** The other hosts passed over, counted by reason (`not sampled` for those a large mesh's router did not look at). */
  unlisted: Partial<Record<RouteSkipReason, number>>;
}

export type BreakerState = 'closed' | 'open' | 'half-open';

export interface BreakerView {
  state: BreakerState;
  /** Failures in a row since the last success. */
  consecutiveFailures: number;
  /** While open: when it half-opens to let a trial through. */
  openUntil: string | null;
  /** Times it opened in a row without closing in between (the open period doubles with each). */
  opens: number;
  /** The failure that opened it last. */
  lastFailure: string | null;
  /** While half-open: trials that succeeded so far. */
  trialSuccesses: number;
}

/** One model on one host: its breaker, health and measured speed. */
export interface ReplicaView {
  model: string;
  resident: boolean;
  /** Jobs per second for this model on this host (EWMA over completed batches); null until measured. */
  throughput: number | null;
  /** Batches measured so far. */
  samples: number;
  health: 'healthy' | 'unhealthy' | 'unknown';
  lastProbeAt: string | null;
  healthDetail: string | null;
  breaker: BreakerView;
}

/** A host as `GET /v1/hosts` (and each host entry of `GET /v1/status`) shows it. */
export interface HostView {
  id: string;
  connected: boolean;
  draining: boolean;
  classes: string[];
  /**
   * Classes it was configured to serve and cannot, by class, with why (`{ video: "ffmpeg not found (…)" }`): left
   * out of `classes`. Empty when it serves all it was given.
   */
  unavailable: Record<string, string>;
  /** Programs it found for its work: ffmpeg's path, where it came from (`system`, `package`, `configured`), version. */
  tools: ToolReport[];
  /** Who its engine processes run as, in words (`nobody`; `root: nobody cannot read …`); null: its agent did not say. */
  engineUser: string | null;
  /** The models its own config declares (host.yaml; mesh.yaml for `gpumesh up`'s agent); null: its agent did not say. */
  configured: string[] | null;
  engines: string[];
  /** The models its grant allows it (the `models` caveat of the grant it joined with); null: any. */
  models: string[] | null;
  version: string;
  /** Capacity: batches it runs at once, how many of those slots are free, and what it holds now. */
  concurrency: number;
  freeSlots: number;
  batchesInFlight: number;
  jobsInFlight: number;
  probesInFlight: number;
  devices: Device[];
  resident: ResidentModel[];
  /** Liveness from the link: `late` when heartbeats are overdue (the host is dropped at agents.staleAfterMs). */
  health: 'healthy' | 'late' | 'disconnected';
  /** The host's own breaker (link-level failures). */
  breaker: BreakerView;
  replicas: ReplicaView[];
  connectedAt: string | null;
  lastSeenAt: string;
  lostAt: string | null;
  /** Not connected because it drained and left on purpose (`host:left`), not lost; false while connected. */
  left: boolean;
}

/** What a queued job waits for. */
export type WaitingFor = 'retry backoff' | 'a batch to fill' | 'a free slot' | 'a host of its classes' | 'a model swap' | 'its turn';

/** `GET /v1/jobs/:id/explain`: where a job went and why, or why it is still waiting. */
export interface ExplainView {
  id: string;
  status: JobStatus;
  model: string;
  /** The classes it may run on, in routing order (its type's routing narrowed by its grant). */
  classes: string[];
  /** The hosts its grant allows; null: any. */
  hosts: string[] | null;
  /** One sentence. */
  summary: string;
  attempts: { n: number; host: string; status: string; error: ErrorBody | null; route: RouteView | null }[];
  /** For a queued job. */
  waiting: {
    for: WaitingFor;
    detail: string;
    /** Jobs ahead of it in its model's queue, and how many are queued there. */
    position: { ahead: number; queued: number } | null;
    /** Its compatibility group: jobs in it, the size that releases it at once, and when it leaves regardless. */
    batch: { size: number; target: number; releaseBy: string | null } | null;
    retryAt: string | null;
    /**
     * Hosts by name (the first 16 passed over), whether each could take the job now, and if not why; `detail` says
     * more where the host told why (`class unavailable`: `ffmpeg not found (…)`).
     */
    hosts: { host: string; class: string | null; canTake: boolean; reason: RouteSkipReason | null; detail?: string | null }[];
    /** The other hosts, counted by why they cannot take it (or were not looked at). */
    unlisted: Partial<Record<RouteSkipReason, number>>;
  } | null;
}
