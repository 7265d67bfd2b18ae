import type { OpenDoorView } from '../auth/open-doors.js';
import type { DiskView, HostView, ReplicaView, StatusView, StorageView } from '../../protocol/api/index.js';
import type { ModelReplicasView } from '../autoscale/index.js';
import type { ModelRegistry, RegisteredModel } from '../registry/index.js';
import type { BreakerBoard, DepartedHost, HealthBook, HostInfo, HostRegistry, HostSession, ThroughputBook } from '../routing/index.js';
import type { Scheduler } from '../scheduler/index.js';

export interface MeshStatusDeps {
  hosts: HostRegistry;
  registry: ModelRegistry;
  scheduler: Scheduler;
  breakers: BreakerBoard;
  health: HealthBook;
  throughput: ThroughputBook;
  /** Jobs in each state. */
  counts(): Promise<Record<string, number>>;
  storeOpen(): boolean;
  /** Why no connected host can run a model (ModelCoverage), or null. */
  blocked?(model: RegisteredModel): string | null;
  /** Each model's replicas: where the autoscaler placed them, and how many it wants. */
  placement?(): ModelReplicasView[];
  /** When a sleeping host was last sent a Wake-on-LAN packet, or null. */
  wokenAt?(host: string): number | null;
  /** Energy since start (Wh), by model and host. */
  energy?(): { byModel: Record<string, number>; byHost: Record<string, number> };
  /** The orchestrators sharing the store (PostgreSQL): which runs the mesh, which stand by (the lease's rows, as they are). */
  orchestrators?(): Promise<readonly object[]>;
  /** What the store holds and how long it keeps finished jobs (`GET /v1/storage`). */
  storage?(): Promise<StorageView>;
  /** The data folder's disk against its floor (storage.minFreeMB): in the status, so the mesh view can say it is low. */
  disk?(): Promise<DiskView>;
  /** The front doors opened to networks for requests without credentials (mesh.yaml `doors`). */
  doors?(): OpenDoorView[];
}

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

/** What a host cannot serve, and the programs it uses, as the host view shows them. */
const capabilities = (info: HostInfo): Pick<HostView, 'unavailable' | 'tools' | 'engineUser' | 'configured' | 'platform' | 'governance'> => ({
  platform: info.platform ?? null,
  governance: info.governance ?? null,
  configured: info.configured ? [...info.configured] : null,
  unavailable: Object.fromEntries((info.unavailable ?? []).map((entry) => [entry.class, entry.reason])),
  tools: [...(info.tools ?? [])],
  engineUser: info.engineUser ?? null,
});

/**
 * What `GET /v1/status`, `GET /v1/hosts` and `gpumesh status` show: hosts (health, breakers, capacity, speed), queues,
 * each model's replicas (where, desired) and job counts.
 */
export class MeshStatus {
  readonly #deps: MeshStatusDeps;

  constructor(deps: MeshStatusDeps) {
    this.#deps = deps;
  }

  get agentsConnected(): number {
    return this.#deps.hosts.size;
  }

  /** Why the mesh cannot take work now; empty when it can. */
  notReady(): string[] {
    const reasons: string[] = [];
    if (!this.#deps.storeOpen()) reasons.push('the store is closed');
    if (this.#deps.hosts.size === 0) reasons.push('no agent is connected');
    return reasons;
  }

  async view(): Promise<StatusView> {
    const { hosts, registry, scheduler } = this.#deps;
    const [jobs, orchestrators, disk] = await Promise.all([this.#deps.counts(), this.#deps.orchestrators?.(), this.#deps.disk?.()]);
    return {
      hosts: [...hosts].map((host) => this.#connected(host)),
      queues: Object.fromEntries(registry.all().map((model) => [model.manifest.name, {
        depth: scheduler.depth(model.manifest.name), limit: model.policy.maxQueueSize,
        /** Why no connected host can run the model (its engine missing, no budget large enough); null when one can. */
        blocked: this.#deps.blocked?.(model) ?? null,
      }])),
      models: Object.fromEntries((this.#deps.placement?.() ?? []).map(({ model, ...view }) => [model, view])),
      jobs,
      ...(orchestrators ? { orchestrators: orchestrators.map((row) => ({ ...row })) } : {}),
      ...(disk ? { disk } : {}),
      energy: this.#deps.energy?.() ?? { byModel: {}, byHost: {} },
      doors: this.#deps.doors?.() ?? [],
    };
  }

  /** What the store holds: its blobs and their bytes, the jobs kept and for how long. */
  async storage(): Promise<StorageView> {
    if (!this.#deps.storage) throw new Error('this mesh status was built without a storage view');
    return this.#deps.storage();
  }

  /** Every host the orchestrator knows: connected ones, then those that left (newest departure first). */
  hosts(): HostView[] {
    return [...[...this.#deps.hosts].map((host) => this.#connected(host)), ...[...this.#deps.hosts.departed()].reverse().map((host) => this.#departed(host))];
  }

  #connected(host: HostSession): HostView {
    const resident = new Set(host.resident.map((entry) => entry.model));
    return {
      id: host.id, connected: true, draining: host.draining,
      away: host.away ? { state: host.away.state, reason: host.away.reason, since: iso(host.away.since)!, until: iso(host.away.until) } : null,
      wokenAt: iso(this.#deps.wokenAt?.(host.id) ?? null), classes: host.info.classes, ...capabilities(host.info), engines: host.info.engines, models: host.info.models ? [...host.info.models] : null, version: host.info.version,
      concurrency: host.info.concurrency, freeSlots: host.freeSlots, batchesInFlight: host.batches.size, jobsInFlight: host.jobsInFlight,
      probesInFlight: host.probes.size, devices: [...host.devices], resident: [...host.resident],
      health: this.#deps.health.hostState(host), breaker: this.#deps.breakers.view(host.id, null),
      replicas: this.#replicas(host.id, resident),
      connectedAt: iso(host.connectedAt), lastSeenAt: iso(host.lastSeenAt)!, lostAt: null, left: false,
    };
  }

  #departed(host: DepartedHost): HostView {
    return {
      id: host.info.id, connected: false, draining: false,
      // A host that said it went to sleep is asleep, not lost: work for it may wake it (Wake-on-LAN).
      away: host.asleep ? { state: 'asleep', reason: 'asleep', since: iso(host.lostAt)!, until: null } : null,
      wokenAt: iso(this.#deps.wokenAt?.(host.info.id) ?? null), classes: host.info.classes, ...capabilities(host.info), engines: host.info.engines, models: host.info.models ? [...host.info.models] : null, version: host.info.version,
      concurrency: host.info.concurrency, freeSlots: 0, batchesInFlight: 0, jobsInFlight: 0, probesInFlight: 0, devices: host.info.devices, resident: [],
      health: 'disconnected', breaker: this.#deps.breakers.view(host.info.id, null), replicas: this.#replicas(host.info.id, new Set()),
      connectedAt: null, lastSeenAt: iso(host.lastSeenAt)!, lostAt: iso(host.lostAt), left: host.left,
    };
  }

  /** Each model the host has run, holds, or has a breaker or health record for. */
  #replicas(host: string, resident: ReadonlySet<string>): ReplicaView[] {
    const { breakers, health, throughput } = this.#deps;
    const models = new Set([...resident, ...throughput.modelsOf(host), ...breakers.modelsOf(host), ...health.modelsOf(host)]);
    return [...models].sort().map((model) => {
      const replica = health.replica(host, model);
      return {
        model, resident: resident.has(model), throughput: throughput.jobsPerSecond(host, model), samples: throughput.samples(host, model),
        health: replica.state, lastProbeAt: iso(replica.lastProbeAt), healthDetail: replica.detail, breaker: breakers.view(host, model),
      };
    });
  }
}
