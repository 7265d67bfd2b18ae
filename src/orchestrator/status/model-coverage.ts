import type { Logger } from 'pino';
import type { EventBus } from '../events/event-bus.js';
import type { ModelRegistry, RegisteredModel } from '../registry/index.js';
import { PerTurn } from '../events/per-turn.js';
import type { HostRegistry, HostSession } from '../routing/index.js';

export interface ModelCoverageDeps {
  hosts: HostRegistry;
  registry: ModelRegistry;
  /** Job type → the host classes that may run it (the config's routing). */
  routing: Readonly<Record<string, readonly string[]>>;
  events: EventBus;
  /** Jobs queued for a model now. */
  depth(model: string): number;
  log: Logger;
}

/**
 * Notices jobs that wait for a model no connected host can run: hosts of the
 * job's classes are connected, but none lists the model's engine in its hello
 * (or none has a device budget the model fits). The router simply finds no
 * candidate for such a job, which waits until its deadline; this says why, in
 * the log (once per model and reason, when a job arrives or the hosts change)
 * and in `GET /v1/status` (`queues.<model>.blocked`). Without any host of the
 * job's classes connected the job is merely waiting for one, which is not
 * reported here.
 */
export class ModelCoverage {
  readonly #deps: ModelCoverageDeps;
  /** The reason last logged per model, so a reason is logged once, and its end once. */
  readonly #reported = new Map<string, string>();
  /** Checked once per turn of the event loop: hosts change with every batch sent and ended, and jobs arrive many a turn. */
  readonly #checks = new PerTurn((models) => (models === 'all' ? this.#recheck() : models.forEach((name) => this.#check(name))));

  constructor(deps: ModelCoverageDeps) {
    this.#deps = deps;
    deps.hosts.onChange(() => this.#checks.request());
    deps.events.subscribeAll((scoped) => {
      if (scoped.kind === 'job' && scoped.event.type === 'queued') this.#checks.request(scoped.event.model);
    });
  }

  /**
   * Why no connected host can run `model`, or null when one can (or no host of its classes is connected). Asked
   * whenever a job is queued and whenever hosts change, so the common answer (null) allocates nothing.
   */
  blocked(model: RegisteredModel): string | null {
    const { manifest } = model;
    let ofClass = false;
    let largest = -1;
    for (const host of this.#deps.hosts) {
      if (!this.#servesClassOf(host, manifest.jobTypes)) continue;
      ofClass = true;
      if (host.info.engines.includes(manifest.engine)) largest = Math.max(largest, host.largestBudgetMB);
    }
    if (!ofClass) return null;
    if (largest < 0) {
      const listed = [...this.#deps.hosts].filter((host) => this.#servesClassOf(host, manifest.jobTypes))
        .map((host) => `${host.id} runs ${host.info.engines.join(', ') || 'none'}`).join('; ');
      return `no connected host runs the "${manifest.engine}" engine (${listed})`;
    }
    if (largest < manifest.memoryMB) {
      return `the model needs ${manifest.memoryMB} MB and the largest device budget among hosts running "${manifest.engine}" is ${largest} MB`;
    }
    return null;
  }

  /** Whether the host serves a class one of these job types routes to. */
  #servesClassOf(host: HostSession, jobTypes: readonly string[]): boolean {
    return jobTypes.some((type) => (this.#deps.routing[type] ?? []).some((klass) => host.info.classes.includes(klass)));
  }

  #recheck(): void {
    for (const model of this.#deps.registry.all()) {
      if (this.#deps.depth(model.manifest.name) > 0 || this.#reported.has(model.manifest.name)) this.#check(model.manifest.name);
    }
  }

  #check(name: string): void {
    const model = this.#deps.registry.get(name);
    if (!model) return;
    const reason = this.blocked(model);
    const before = this.#reported.get(name);
    if (reason === before || (reason === null && before === undefined)) return;
    if (reason === null) {
      this.#reported.delete(name);
      this.#deps.log.info({ model: name }, 'a connected host can run the model again');
      return;
    }
    this.#reported.set(name, reason);
    this.#deps.log.warn({ model: name, engine: model.manifest.engine, queued: this.#deps.depth(name) }, `jobs for model "${name}" wait: ${reason}`);
  }
}
