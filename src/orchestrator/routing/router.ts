import type { RouteSkipReason } from '../../protocol/index.js';
import type { RegisteredModel } from '../registry/index.js';
import type { BreakerBoard } from './breakers.js';
import type { HealthBook } from './health.js';
import type { HostSession } from './host.js';
import type { HostRegistry } from './hosts.js';
import type { RouteDecision, Skip, Warmth } from './route-log.js';
import type { ThroughputBook } from './throughput.js';

/** With more usable replicas than this in the best tier, two are drawn at random and the less loaded wins. */
export const TWO_CHOICES_ABOVE = 4;

/** Where a job may run: its classes in order of preference, and the hosts its grant allows (null: any). */
export interface RouteRequest {
  classes: readonly string[];
  hosts: readonly string[] | null;
  /** Hosts where an earlier attempt of the job failed: taken only when no other usable host of the class is free. */
  avoid?: readonly string[];
}

export interface RouterDeps {
  hosts: HostRegistry;
  breakers: BreakerBoard;
  health: HealthBook;
  throughput: ThroughputBook;
  /** Uniform in [0, 1), for the two random choices. Default Math.random. */
  random?: () => number;
  /**
   * Once the model has a replica on a usable host (the autoscaler placed it: resident, loading, or running it, and
   * not being unloaded), send its batches only to such hosts; with none usable (none placed yet, or all blocked,
   * unhealthy or draining), any usable host loads it on demand. Off: always on demand.
   */
  replicasOnly?: boolean;
}

const WARMTH_RANK: Record<Warmth, number> = { resident: 0, cached: 1, cold: 2 };

/**
 * Picks the host for a batch and says why. The job's classes are tried in
 * order: the first class with a usable replica wins, later classes are
 * fallbacks; a usable replica of an earlier class that is merely busy is
 * waited for, not spilled past. A replica is usable when its host is
 * connected, not draining, runs the model's engine, has a device the model
 * fits, both its breakers (host and host × model) are closed and it is
 * healthy — and the job's grant allows its class and host; with
 * `replicasOnly`, once a usable host holds a replica of the model, only
 * those do (skip reason `no replica`). Among usable
 * replicas with a free slot: the model resident first, then its file cached,
 * then the lowest load relative to capacity, (jobs in flight + 1) ÷ the
 * replica's measured jobs per second, so a fast GPU takes proportionally more
 * work than a slow one; with many candidates, the better of two random ones.
 * A retry passes over the hosts that failed it while another is free.
 * Every host passed over is named in the decision with its reason.
 */
export class Router {
  readonly #deps: RouterDeps;
  readonly #random: () => number;

  constructor(deps: RouterDeps) {
    this.#deps = deps;
    this.#random = deps.random ?? Math.random;
  }

  /** Connected hosts that could ever run `model` for these classes (they serve one and run its engine), busy or not. */
  candidates(model: RegisteredModel, classes: readonly string[]): HostSession[] {
    return [...this.#deps.hosts].filter((host) => host.info.classes.some((name) => classes.includes(name)) && host.info.engines.includes(model.manifest.engine));
  }

  route(model: RegisteredModel, request: RouteRequest): RouteDecision {
    const { classes } = request;
    const skipped: Skip[] = [];
    const usable: HostSession[][] = classes.map(() => []);
    for (const host of this.#deps.hosts) {
      const index = classes.findIndex((name) => host.info.classes.includes(name));
      const klass = index < 0 ? null : classes[index]!;
      const reason = this.#unusable(host, model, request, klass);
      if (reason) skipped.push({ host: host.id, class: klass, reason });
      else usable[index]!.push(host);
    }
    for (const departed of this.#deps.hosts.departed()) {
      const index = classes.findIndex((name) => departed.info.classes.includes(name));
      const klass = index < 0 ? null : classes[index]!;
      const reason: RouteSkipReason = klass === null ? 'class not granted'
        : request.hosts && !request.hosts.includes(departed.info.id) ? 'host not granted' : 'disconnected';
      skipped.push({ host: departed.info.id, class: klass, reason });
    }
    // Placement: once some usable host has a replica of the model (the autoscaler's, loaded or loading), only those
    // take its batches (one still loading takes them too: they wait there in their loading phase); with none, any
    // usable host loads it on demand.
    const name = model.manifest.name;
    const placed = this.#deps.replicasOnly === true && usable.some((hosts) => hosts.some((host) => host.hasReplica(name)));
    for (const [index, all] of usable.entries()) {
      const klass = classes[index]!;
      const hosts: HostSession[] = [];
      for (const host of all) {
        if (!placed || host.hasReplica(name)) hosts.push(host);
        else skipped.push({ host: host.id, class: klass, reason: 'no replica' });
      }
      if (hosts.length === 0) continue;
      const free: HostSession[] = [];
      for (const host of hosts) {
        if (host.freeSlots > 0) free.push(host);
        else skipped.push({ host: host.id, class: klass, reason: 'no free slot' });
      }
      if (free.length === 0) return { host: null, class: klass, warmth: null, skipped, waitingFor: 'a free slot' };
      // A retry goes elsewhere when it can: the host that failed it may fail it again.
      const fresh = request.avoid?.length ? free.filter((host) => !request.avoid!.includes(host.id)) : free;
      if (fresh.length > 0 && fresh.length < free.length) {
        for (const host of free) if (!fresh.includes(host)) skipped.push({ host: host.id, class: klass, reason: 'failed this job' });
      }
      return this.#choose(model, klass, fresh.length > 0 ? fresh : free, skipped);
    }
    return { host: null, class: null, warmth: null, skipped, waitingFor: 'a host of its classes' };
  }

  /** Why `host` cannot take `model` for this request, or null when it can (slots aside). */
  #unusable(host: HostSession, model: RegisteredModel, request: RouteRequest, klass: string | null): RouteSkipReason | null {
    if (klass === null) return 'class not granted';
    if (request.hosts && !request.hosts.includes(host.id)) return 'host not granted';
    if (host.draining) return 'draining';
    if (!host.info.engines.includes(model.manifest.engine)) return 'engine missing';
    if (host.largestBudgetMB < model.manifest.memoryMB) return 'model too large';
    if (this.#deps.breakers.blocking(host.id, model.manifest.name)) return 'breaker open';
    if (this.#deps.health.unhealthy(host, model.manifest.name)) return 'unhealthy';
    return null;
  }

  #choose(model: RegisteredModel, klass: string, free: HostSession[], skipped: Skip[]): RouteDecision {
    const name = model.manifest.name;
    const warmth = (host: HostSession): Warmth => (host.isResident(name) ? 'resident' : host.cached.has(model.manifest.digest) ? 'cached' : 'cold');
    // Residency dominates: loading a model costs far more than waiting behind one batch; a pull costs more still.
    const best = Math.min(...free.map((host) => WARMTH_RANK[warmth(host)]));
    const tier: HostSession[] = [];
    for (const host of free) {
      if (WARMTH_RANK[warmth(host)] === best) tier.push(host);
      else skipped.push({ host: host.id, class: klass, reason: 'not resident' });
    }
    let contenders = tier;
    if (tier.length > TWO_CHOICES_ABOVE) {
      const first = Math.floor(this.#random() * tier.length);
      const second = (first + 1 + Math.floor(this.#random() * (tier.length - 1))) % tier.length;
      contenders = [tier[first]!, tier[second]!];
      for (const host of tier) if (!contenders.includes(host)) skipped.push({ host: host.id, class: klass, reason: 'not sampled' });
    }
    let chosen = contenders[0]!;
    let chosenLoad = this.#load(chosen, name);
    for (const host of contenders.slice(1)) {
      const load = this.#load(host, name);
      // Equal load (idle hosts): the faster one; then the host id, so the choice is stable.
      if (load < chosenLoad || (load === chosenLoad && (this.#rate(host, name) > this.#rate(chosen, name) || (this.#rate(host, name) === this.#rate(chosen, name) && host.id < chosen.id)))) {
        chosen = host;
        chosenLoad = load;
      }
    }
    for (const host of contenders) if (host !== chosen) skipped.push({ host: host.id, class: klass, reason: 'busier' });
    return { host: chosen, class: klass, warmth: warmth(chosen), skipped, waitingFor: null };
  }

  /** Seconds the replica needs to finish what it holds plus one more job. */
  #load(host: HostSession, model: string): number {
    return (host.jobsInFlight + 1) / this.#rate(host, model);
  }

  #rate(host: HostSession, model: string): number {
    return this.#deps.throughput.jobsPerSecond(host.id, model) ?? this.#deps.throughput.assumed(model);
  }
}
