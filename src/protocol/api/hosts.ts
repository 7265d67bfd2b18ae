import { z } from 'zod';
import { Device, ResidentModel, ToolReport } from '../link.js';
import { BREAKER_STATES } from '../routing.js';
import { Time } from './time.js';

/** A circuit breaker: the host's own (link-level failures), or one replica's. */
export const BreakerView = z.strictObject({
  state: z.enum(BREAKER_STATES),
  /** Failures in a row since the last success. */
  consecutiveFailures: z.int(),
  openUntil: Time.nullable().describe('while open: when it half-opens to let a trial through'),
  /** Times it opened in a row without closing in between (the open period doubles with each). */
  opens: z.int().describe('times it opened in a row (the open period doubles with each)'),
  /** The failure that opened it last. */
  lastFailure: z.string().nullable(),
  /** While half-open: trials that succeeded so far. */
  trialSuccesses: z.int(),
});
export type BreakerView = z.infer<typeof BreakerView>;

/** One model on one host: its breaker, health and measured speed. */
export const ReplicaView = z.strictObject({
  model: z.string(),
  resident: z.boolean(),
  /** Jobs per second for this model on this host (EWMA over completed batches); null until measured. */
  throughput: z.number().nullable().describe('jobs per second measured on this host (EWMA over batches); null until measured'),
  /** Batches measured so far. */
  samples: z.int(),
  health: z.enum(['healthy', 'unhealthy', 'unknown']),
  lastProbeAt: Time.nullable(),
  healthDetail: z.string().nullable(),
  breaker: BreakerView,
});
export type ReplicaView = z.infer<typeof ReplicaView>;

/** A host as `GET /v1/hosts` (and each host entry of `GET /v1/status`) shows it. */
export const HostView = z.strictObject({
  id: z.string(),
  connected: z.boolean(),
  draining: z.boolean(),
  /**
   * Linked and taking no work now, and why: its owner is using the machine (`yielded`), it is outside its hours
   * (`off-hours`), its GPUs are too hot (`hot`); `until` is when it expects to take work again. Null when it takes work.
   */
  away: z.strictObject({
    state: z.enum(['yielded', 'off-hours', 'hot', 'asleep']), reason: z.string(), since: Time, until: Time.nullable(),
  }).nullable().describe('why a linked host takes no work now (yielded, off-hours, hot), or that a departed one sleeps (asleep); null when it takes work'),
  /** Wake-on-LAN: when the orchestrator last sent this host a magic packet (it sleeps and work waits for it); null: never. */
  wokenAt: Time.nullable().describe('when the orchestrator last sent this host a Wake-on-LAN packet; null: never'),
  classes: z.array(z.string()),
  /**
   * Classes it was configured to serve and cannot, by class, with why (`{ video: "ffmpeg not found (…)" }`): left
   * out of `classes`. Empty when it serves all it was given.
   */
  unavailable: z.record(z.string(), z.string()).describe('classes it was given and cannot serve, with why'),
  /** Programs it found for its work: ffmpeg's path, where it came from (`system`, `package`, `configured`), version. */
  tools: z.array(ToolReport),
  /** The models its own config declares (host.yaml; mesh.yaml for `gpumesh up`'s agent); null: its agent did not say. */
  configured: z.array(z.string()).nullable().describe('the models its own config declares (commands, servers: they run only where declared); null: the agent did not say'),
  /** The ComfyUI models its owner opened to clients (`passthrough: true` in its own config): `/comfyui/<host>/<model>/…`. */
  passthrough: z.array(z.string()).describe('the ComfyUI models whose server its owner opened to clients with a grant, at /comfyui/<host>/<model>/ (the pass-through); empty: none'),
  platform: z.string().nullable().describe('its platform: `linux`, `windows`, `macos`, …; null: the agent did not say'),
  governance: z.string().nullable().describe('how it governs its engine processes: `cgroup v2`, `cgroup v1`, `process groups`, `job objects` or `portable`; null: the agent did not say'),
  engineUser: z.string().nullable().describe('who its engine processes run as, in words (`nobody`; `root: nobody cannot read …`); null: the agent did not say'),
  engines: z.array(z.string()),
  /** The models its grant allows it (the `models` caveat of the grant it joined with); null: any. */
  models: z.array(z.string()).nullable().describe('the models its grant allows; null: any'),
  version: z.string(),
  /** Capacity: batches it runs at once, how many of those slots are free, and what it holds now. */
  concurrency: z.int(),
  freeSlots: z.int(),
  batchesInFlight: z.int(),
  jobsInFlight: z.int(),
  probesInFlight: z.int(),
  devices: z.array(Device),
  resident: z.array(ResidentModel),
  /** Liveness from the link: `late` when heartbeats are overdue (the host is dropped at agents.staleAfterMs). */
  health: z.enum(['healthy', 'late', 'disconnected']),
  /** The host's own breaker (link-level failures). */
  breaker: BreakerView,
  replicas: z.array(ReplicaView),
  connectedAt: Time.nullable(),
  lastSeenAt: Time,
  lostAt: Time.nullable(),
  left: z.boolean().describe('not connected because it drained and left on purpose'),
});
export type HostView = z.infer<typeof HostView>;

/** `GET /v1/hosts`: every host the orchestrator knows of, connected ones first. */
export const Hosts = z.strictObject({ hosts: z.array(HostView) });
export type Hosts = z.infer<typeof Hosts>;

/** `POST /v1/hosts/:id/drain`. */
export const Draining = z.strictObject({ host: z.string(), draining: z.literal(true), jobsInFlight: z.int() });
export type Draining = z.infer<typeof Draining>;
