import { z } from 'zod';
import { HostView } from './hosts.js';
import { DiskView } from './storage.js';

/** Where a replica of a model stands on its host, as the autoscaler placed it. */
export const ReplicaState = z.enum(['loading', 'ready', 'draining', 'unloading']);
export type ReplicaState = z.infer<typeof ReplicaState>;

/** A model's replicas: how many the autoscaler wants, within what bounds, for what demand, and where they are. */
export const ModelReplicas = z.strictObject({
  desired: z.int(), min: z.int(), max: z.int().nullable(), targetInFlight: z.number(), idleWindowS: z.number(),
  /** Jobs queued and running on serving replicas: what the replicas are sized for. */
  demand: z.number(),
  replicas: z.array(z.strictObject({ host: z.string(), state: ReplicaState, held: z.boolean() })),
});
export type ModelReplicas = z.infer<typeof ModelReplicas>;

/** The front doors for clients of other projects' APIs: ComfyUI's and AUTOMATIC1111's. */
export const DOORS = ['comfyui', 'a1111'] as const;
export type DoorName = (typeof DOORS)[number];

/** A front door opened to networks: requests from there without credentials act as its grant (mesh.yaml `doors`). */
export const OpenDoorView = z.strictObject({
  door: z.enum(DOORS), openTo: z.array(z.string()), grantId: z.string(), caveats: z.array(z.string()),
});
export type OpenDoorView = z.infer<typeof OpenDoorView>;

/** `GET /v1/status` (and `gpumesh status`): the connected hosts, the queues, each model's replicas, jobs by status. */
export const StatusView = z.strictObject({
  hosts: z.array(HostView).describe('the connected hosts'),
  queues: z.record(z.string(), z.strictObject({
    depth: z.int(), limit: z.int(), blocked: z.string().nullable().describe('why no connected host can run the model; null when one can'),
  })).describe('per model'),
  models: z.record(z.string(), ModelReplicas).describe('per model: its replicas, wanted and where'),
  jobs: z.record(z.string(), z.int()).describe('jobs by status'),
  orchestrators: z.array(z.record(z.string(), z.unknown())).optional().describe('on a shared store: every orchestrator on it, its role and when it was seen'),
  disk: DiskView.optional().describe('the data folder\'s disk against its floor: `low` while new work is refused'),
  /** Energy jobs took since this orchestrator started (Wh), by model and by host, where GPUs reported their power. */
  energy: z.strictObject({ byModel: z.record(z.string(), z.number()), byHost: z.record(z.string(), z.number()) })
    .describe('energy since this orchestrator started (Wh), by model and host, where GPUs reported power'),
  doors: z.array(OpenDoorView).describe('front doors the owner opened to networks for requests without credentials (mesh.yaml `doors`): where, and the grant they act as'),
});
export type StatusView = z.infer<typeof StatusView>;

/** `GET /healthz`. */
export const Live = z.strictObject({ ok: z.literal(true) });
/** `GET /readyz`, when ready. */
export const Ready = z.strictObject({ ok: z.literal(true), agents: z.int().describe('agents connected') });
