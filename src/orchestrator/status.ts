import type { ModelRegistry, RegisteredModel } from './registry/index.js';
import type { HostRegistry } from './routing/index.js';
import type { Scheduler } from './scheduler/index.js';

export interface MeshStatusDeps {
  hosts: HostRegistry;
  registry: ModelRegistry;
  scheduler: Scheduler;
  /** Jobs in each state. */
  counts(): Record<string, number>;
  storeOpen(): boolean;
  /** Why no connected host can run a model (ModelCoverage), or null. */
  blocked?(model: RegisteredModel): string | null;
}

/** What `GET /v1/status` and `gpumesh status` show: hosts, queues and job counts. */
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

  view() {
    const { hosts, registry, scheduler } = this.#deps;
    return {
      hosts: [...hosts].map((host) => ({
        id: host.id, classes: host.info.classes, engines: host.info.engines, version: host.info.version,
        concurrency: host.info.concurrency, devices: host.devices, resident: host.resident,
        batchesInFlight: host.batches.size, jobsInFlight: host.jobsInFlight,
        connectedAt: new Date(host.connectedAt).toISOString(), lastSeenAt: new Date(host.lastSeenAt).toISOString(),
      })),
      queues: Object.fromEntries(registry.all().map((model) => [model.manifest.name, {
        depth: scheduler.depth(model.manifest.name), limit: model.policy.maxQueueSize,
        /** Why no connected host can run the model (its engine missing, no budget large enough); null when one can. */
        blocked: this.#deps.blocked?.(model) ?? null,
      }])),
      jobs: this.#deps.counts(),
    };
  }
}
