import type { HostAway, RouteSkipReason } from '../../protocol/index.js';
import type { RegisteredModel } from '../registry/index.js';
import type { BreakerBoard } from './breakers.js';
import type { HealthBook } from './health.js';
import { unavailableFor, type HostSession } from './host.js';
import type { HostRegistry } from './hosts.js';
import type { IndexedSet } from './indexed-set.js';
import { SkipLog, type RouteDecision, type Warmth } from './route-log.js';
import type { ThroughputBook } from './throughput.js';
import { workflowSkip, type WorkflowNeeds } from './workflow-fit.js';

/** Why a host that takes no work now is passed over, by what keeps it away. */
const AWAY_REASONS: Record<HostAway['state'], RouteSkipReason> = { yielded: 'yielded', 'off-hours': 'out of hours', hot: 'too hot', asleep: 'asleep' };

/** With more usable replicas than this in the best tier, two are drawn at random and the less loaded wins. */
export const TWO_CHOICES_ABOVE = 4;

/**
 * A mesh of up to this many hosts is routed by looking at every host; a larger one through the host registry's
 * indexes (see `#routeLarge`), so that a decision costs the same with a thousand hosts as with fifty.
 */
export const SCAN_ALL_UP_TO = 64;

/** Random draws from a large pool of free hosts before the router falls back to a scan. */
const DRAWS = 12;

/** Where a job may run: its classes in order of preference, and the hosts its grant allows (null: any). */
export interface RouteRequest {
  classes: readonly string[];
  hosts: readonly string[] | null;
  /** Hosts where an earlier attempt of the job failed: taken only when no other usable host of the class is free. */
  avoid?: readonly string[];
  /** A workflow job's graph: only hosts that take workflows for the model, and whose ComfyUI has what it names, may run it. */
  workflow?: WorkflowNeeds | null;
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
  /** A mesh of up to this many hosts is routed by looking at every host; default SCAN_ALL_UP_TO. */
  scanAllUpTo?: number;
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
 * `replicasOnly`, once a usable host of a class holds a replica of the
 * model, only those of that class do (skip reason `no replica`). Among usable
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
    return [...this.#deps.hosts].filter((host) => host.info.classes.some((name) => classes.includes(name)) && host.info.engines.includes(model.manifest.engine)
      && host.mayServe(model.manifest.name));
  }

  route(model: RegisteredModel, request: RouteRequest): RouteDecision {
    const log = new SkipLog();
    this.#logDeparted(request, log);
    return this.#deps.hosts.size > (this.#deps.scanAllUpTo ?? SCAN_ALL_UP_TO) ? this.#routeLarge(model, request, log) : this.#routeSmall(model, request, log);
  }

  /** Every host looked at and given its reason. */
  #routeSmall(model: RegisteredModel, request: RouteRequest, log: SkipLog): RouteDecision {
    const { classes } = request;
    const usable: HostSession[][] = classes.map(() => []);
    for (const host of this.#deps.hosts) {
      const index = this.#classIndex(host, classes);
      const klass = index < 0 ? null : classes[index]!;
      const reason = this.#unusable(host, model, request, klass);
      if (reason) log.add(host.id, klass, reason);
      else usable[index]!.push(host);
    }
    // Placement, class by class: once some usable host of the class has a replica of the model (the autoscaler's,
    // loaded or loading), only those take its batches (one still loading takes them too: they wait there in their
    // loading phase); with none, any usable host of the class loads it on demand. A replica in a fallback class does
    // not keep the job from its preferred class: a host of that class that comes back takes the work back.
    const name = model.manifest.name;
    for (const [index, all] of usable.entries()) {
      const klass = classes[index]!;
      const placed = this.#deps.replicasOnly === true && all.some((host) => host.hasReplica(name));
      const hosts: HostSession[] = [];
      for (const host of all) {
        if (!placed || host.hasReplica(name)) hosts.push(host);
        else log.add(host.id, klass, 'no replica');
      }
      if (hosts.length === 0) continue;
      const free: HostSession[] = [];
      for (const host of hosts) {
        if (host.freeSlots > 0) free.push(host);
        else log.add(host.id, klass, 'no free slot');
      }
      if (free.length === 0) return waiting('a free slot', klass, log);
      return this.#choose(model, klass, this.#avoiding(free, request, klass, log), log);
    }
    return waiting('a host of its classes', null, log);
  }

  /**
   * A large mesh, class by class in the job's order, from the registry's indexes of that class:
   * 1. its free replicas of the model (all of them when few, else a random sample, then the rest in order only
   *    if none drawn was usable);
   * 2. with none, under `replicasOnly`: a usable busy replica (the first found) means the job waits for it;
   * 3. otherwise its free hosts, the same way, to load the model on demand;
   * 4. with none usable, the job waits for the class if a host of it is usable at all, else the next class is tried.
   * This is the small mesh's rule with two differences: among many free candidates only a sample is compared
   * (the best of a dozen rather than of all), and hosts of no class of the job, and those not looked at, are
   * counted in the log rather than named. The scans run only where nothing drawn was usable, and stop at the
   * first usable host.
   */
  #routeLarge(model: RegisteredModel, request: RouteRequest, log: SkipLog): RouteDecision {
    const { hosts } = this.#deps;
    const { classes } = request;
    const name = model.manifest.name;
    log.count('class not granted', hosts.size - hosts.countServing(classes));
    for (const [index, klass] of classes.entries()) {
      const pool = hosts.inClass(klass);
      const looked = new Set<HostSession>();
      /** Looks at `host` once; whether it is usable (slots aside), its skip logged if not. */
      const usable = (host: HostSession): boolean => {
        if (looked.has(host) || this.#classIndex(host, classes) !== index) return false;
        looked.add(host);
        const reason = this.#unusable(host, model, request, klass);
        if (reason) log.add(host.id, klass, reason);
        return reason === null;
      };
      const decided = (found: HostSession[]): RouteDecision => {
        log.count('not sampled', pool.size - looked.size);
        return this.#choose(model, klass, this.#avoiding(found, request, klass, log), log);
      };
      const replicas = this.#sample(hosts.freeReplicasIn(klass, name), usable);
      if (replicas.length > 0) return decided(replicas);
      if (this.#deps.replicasOnly === true) {
        for (const host of hosts.replicasIn(klass, name)) {
          if (!looked.has(host) && usable(host)) {
            log.add(host.id, klass, 'no free slot');
            return waiting('a free slot', klass, log, pool.size - looked.size);
          }
        }
      }
      const onDemand = this.#sample(hosts.freeInClass(klass), usable);
      if (onDemand.length > 0) return decided(onDemand);
      for (const host of pool) {
        if (looked.has(host) || !usable(host)) continue;
        log.add(host.id, klass, 'no free slot');
        return waiting('a free slot', klass, log, pool.size - looked.size);
      }
    }
    return waiting('a host of its classes', null, log);
  }

  /**
   * Usable members of a pool of free hosts: all of them when it is small; else those among DRAWS random draws,
   * and, when none of those was, the first usable one in order.
   */
  #sample(pool: IndexedSet<HostSession>, usable: (host: HostSession) => boolean): HostSession[] {
    const found: HostSession[] = [];
    if (pool.size <= SCAN_ALL_UP_TO) {
      for (const host of pool) if (usable(host)) found.push(host);
      return found;
    }
    for (let i = 0; i < DRAWS; i++) {
      const host = pool.at(Math.floor(this.#random() * pool.size))!;
      if (usable(host)) found.push(host);
    }
    if (found.length > 0) return found;
    for (const host of pool) {
      if (usable(host)) return [host];
    }
    return found;
  }

  /** The index in the job's classes of the first one `host` serves; -1 for none. */
  #classIndex(host: HostSession, classes: readonly string[]): number {
    for (let i = 0; i < classes.length; i++) if (host.info.classes.includes(classes[i]!)) return i;
    return -1;
  }

  /** Hosts that were connected and are not now. */
  #logDeparted(request: RouteRequest, log: SkipLog): void {
    for (const departed of this.#deps.hosts.departed()) {
      const index = request.classes.findIndex((name) => departed.info.classes.includes(name));
      const klass = index < 0 ? null : request.classes[index]!;
      const reason: RouteSkipReason = klass === null ? (unavailableFor(departed.info, request.classes) ? 'class unavailable' : 'class not granted')
        : request.hosts && !request.hosts.includes(departed.info.id) ? 'host not granted' : 'disconnected';
      log.add(departed.info.id, klass, reason);
    }
  }

  /** A retry goes elsewhere when it can: the host that failed it may fail it again. */
  #avoiding(free: HostSession[], request: RouteRequest, klass: string, log: SkipLog): HostSession[] {
    if (!request.avoid?.length) return free;
    const fresh = free.filter((host) => !request.avoid!.includes(host.id));
    if (fresh.length === 0) return free;
    for (const host of free) if (!fresh.includes(host)) log.add(host.id, klass, 'failed this job');
    return fresh;
  }

  /** Why `host` cannot take `model` for this request, or null when it can (slots aside). */
  #unusable(host: HostSession, model: RegisteredModel, request: RouteRequest, klass: string | null): RouteSkipReason | null {
    if (klass === null) return unavailableFor(host.info, request.classes) ? 'class unavailable' : 'class not granted';
    if (request.hosts && !request.hosts.includes(host.id)) return 'host not granted';
    if (!host.mayServe(model.manifest.name)) return 'model not granted';
    if (host.draining) return 'draining';
    if (host.away) return AWAY_REASONS[host.away.state];
    if (!host.info.engines.includes(model.manifest.engine)) return 'engine missing';
    if (model.declaredAs && host.info.configured && !host.info.configured.includes(model.declaredAs)) return 'not configured';
    if (request.workflow) {
      const skip = workflowSkip(host, model, request.workflow);
      if (skip) return skip;
    }
    if (host.largestBudgetMB < model.manifest.memoryMB) return 'model too large';
    if (this.#deps.breakers.blocking(host.id, model.manifest.name)) return 'breaker open';
    if (this.#deps.health.unhealthy(host, model.manifest.name)) return 'unhealthy';
    return null;
  }

  #choose(model: RegisteredModel, klass: string, free: HostSession[], log: SkipLog): RouteDecision {
    const name = model.manifest.name;
    const warmth = (host: HostSession): Warmth => (host.isResident(name) ? 'resident' : host.cached.has(model.manifest.digest) ? 'cached' : 'cold');
    // Residency dominates: loading a model costs far more than waiting behind one batch; a pull costs more still.
    const best = Math.min(...free.map((host) => WARMTH_RANK[warmth(host)]));
    const tier: HostSession[] = [];
    for (const host of free) {
      if (WARMTH_RANK[warmth(host)] === best) tier.push(host);
      else log.add(host.id, klass, 'not resident');
    }
    let contenders = tier;
    if (tier.length > TWO_CHOICES_ABOVE) {
      const first = Math.floor(this.#random() * tier.length);
      const second = (first + 1 + Math.floor(this.#random() * (tier.length - 1))) % tier.length;
      contenders = [tier[first]!, tier[second]!];
      for (const host of tier) if (!contenders.includes(host)) log.add(host.id, klass, 'not sampled');
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
    for (const host of contenders) if (host !== chosen) log.add(host.id, klass, 'busier');
    return { host: chosen, class: klass, warmth: warmth(chosen), skipped: log.named, unlisted: log.unlisted, waitingFor: null };
  }

  /** Seconds the replica needs to finish what it holds plus one more job. */
  #load(host: HostSession, model: string): number {
    return (host.jobsInFlight + 1) / this.#rate(host, model);
  }

  #rate(host: HostSession, model: string): number {
    return this.#deps.throughput.jobsPerSecond(host.id, model) ?? this.#deps.throughput.assumed(model);
  }
}

/** No host now: the job waits for `waitingFor`; `unseen` hosts of the class were not looked at. */
function waiting(waitingFor: 'a free slot' | 'a host of its classes', klass: string | null, log: SkipLog, unseen = 0): RouteDecision {
  log.count('not sampled', unseen);
  return { host: null, class: klass, warmth: null, skipped: log.named, unlisted: log.unlisted, waitingFor };
}
