import type { Logger } from 'pino';
import type { ModelReplicas, ReplicaState } from '../../protocol/api/index.js';
import { MeshError } from '../../protocol/index.js';
import type { Clock, Timer } from '../../protocol/clock.js';
import type { ReplicaPolicy } from '../config/config.js';
import type { EventBus } from '../events/event-bus.js';
import { PerTurn } from '../events/per-turn.js';
import type { RegisteredModel } from '../registry/index.js';
import type { HostRegistry, HostSession, Router } from '../routing/index.js';
import { placementOrder } from './placement.js';
import { backoffDelay } from '../../net/backoff.js';

export interface AutoscalerDeps {
  clock: Clock;
  hosts: HostRegistry;
  /** Which hosts could run a model at all (they serve one of its classes and run its engine). */
  router: Pick<Router, 'candidates'>;
  models(): RegisteredModel[];
  /** The host classes a model's jobs route to (the config's routing of its job types), most preferred first. */
  classesOf(model: RegisteredModel): string[];
  /** A circuit breaker stops batches of the model there (host or host × model open): no replica is placed or counted there. */
  blocked?(host: string, model: string): unknown;
  /**
   * Loading the model on this host would evict a model there that still has work: no replica is placed there (the
   * scheduler's swap policy times that swap, scheduler/swap-policy.ts). Absent: any eligible host.
   */
  displacesWork?(host: HostSession, model: RegisteredModel): boolean;
  /** Jobs of the model waiting in its queue. */
  queued(model: string): number;
  /** Job events tell it about new demand at once; refusals become mesh events. */
  events: EventBus;
  metrics: { replicaLoadRefused(host: string, model: string, code: string): void; replicas(model: string, ready: number, desired: number): void };
  log: Logger;
  /** How often every model is looked at, besides the looks that changes trigger. */
  intervalMs: number;
}

/** Where a load someone asked for goes (`Autoscaler.planLoad`). */
export interface LoadPlan {
  /** How many hosts should hold the model once the load is done: max(1, minReplicas), or the count asked, capped by maxReplicas. */
  wanted: number;
  /** The count asked for (the default, max(1, minReplicas), when none was). */
  asked: number;
  /** The model's maxReplicas (null: no limit), which capped `asked` to `wanted` if it is lower. */
  max: number | null;
  /** Every host that could take it, in the order to ask them: the first `wanted` at once, the next one for each that refuses. */
  hosts: HostSession[];
}

/** One model's replicas as `GET /v1/status` shows them, with the model's name. */
export type ModelReplicasView = ModelReplicas & { model: string };

interface ModelState {
  /** seen[k]: the last time the need was at least k replicas (k ≥ 1); never increasing in k. */
  seen: number[];
  /** The need at the previous look; it held until this one. */
  need: number;
  /** The model's replica policy at its last full look (null before one): what a look after a turn reckons its need by. */
  policy: ReplicaPolicy | null;
  desired: number;
  demand: number;
  /** Hosts that would not load the model: not asked again until `until`; `count` refusals in a row. */
  refusals: Map<HostSession, { until: number; count: number }>;
  /**
   * Host id → since when its replica has been idle: when it was first seen holding the model (loaded, joined with
   * it), moved on by every batch of the model dispatched there. Only a replica idle for the whole window is unloaded.
   */
  idleSince: Map<string, number>;
}

/** A load not answered by then is forgotten (the host counts as it reports); a pull of a large model can take minutes. */
const LOAD_ANSWER_MS = 10 * 60_000;
/** An unload not seen done by then is forgotten: the model counts as a replica again. */
const UNLOAD_ANSWER_MS = 2 * 60_000;
/** A host that refused a model is not asked again for 10 s, doubling with each refusal in a row up to 5 min. */
const REFUSAL_BACKOFF_MS = 10_000;
const REFUSAL_BACKOFF_MAX_MS = 5 * 60_000;

/**
 * Decides where each model's replicas live. A replica is a model resident on
 * one host (the agent keeps at most one per host); the router sends a model's
 * batches only to hosts with a ready replica.
 *
 * The rule, per model, at each look: the need is
 * ⌈(queued + running jobs) ÷ targetInFlight⌉ replicas. Below
 * max(minReplicas, need) it loads the model on more eligible hosts at once (up
 * to maxReplicas); above max(minReplicas, the highest need of the last
 * idleWindow) it unloads replicas that have been idle (no batch of the model
 * dispatched there, and loaded) for the whole window. So it scales out
 * immediately and in only after the demand has stayed lower, and the replica
 * unused, for the whole window — and never
 * below minReplicas, which are loaded as soon as eligible hosts join and held
 * (`load` with `hold`) so the agents keep them.
 *
 * Eligible hosts serve one of the model's classes, run its engine, have a
 * budget it fits in, are not draining and no breaker blocks the model there.
 * They are chosen by class (the routing order: a fallback class only after
 * the preferred one), then resident first (a replica being unloaded there),
 * then with the model's file cached, then with the least work in flight, then
 * best fit (the smallest budget that takes the model, keeping large hosts for
 * large models). The orchestrator only rules out hosts whose whole budget is too
 * small: which resident models an agent could evict is the agent's to know, so
 * an agent may refuse (`load-refused`). A refusal is logged, counted and
 * published as a `replica:refused` mesh event, and the autoscaler moves on to
 * another host, asking that one again only after a growing pause.
 *
 * It sends nothing but `load` and `unload`, and keeps no timer but its own:
 * it looks every `intervalMs`, and at once (coalesced) when jobs are queued,
 * hosts join, leave or load a model, and when a load is refused.
 */
export class Autoscaler {
  readonly #deps: AutoscalerDeps;
  readonly #models = new Map<string, ModelState>();
  readonly #unsubscribe: () => void;
  readonly #unwatchHosts: () => void;
  #timer: Timer;
  /** The models the coming look is for: 'all', or those whose demand changed (a job queued changes its model's only). */
  #pending: Set<string> | 'all' | null = null;
  /** Looks that can wait for the end of the turn: one covers every job queued in it (see #queued). */
  readonly #afterTurn = new PerTurn((models) => (models === 'all' ? this.look() : this.#lookIfNeedRose(models)));
  #closed = false;

  constructor(deps: AutoscalerDeps) {
    this.#deps = deps;
    this.#unsubscribe = deps.events.subscribeAll((scoped) => {
      if (scoped.kind !== 'job') return;
      if (scoped.event.type === 'queued') this.#queued(scoped.scope.model);
      else if (scoped.event.type === 'dispatched') this.#state(scoped.scope.model).idleSince.set(scoped.event.host, deps.clock.now());
    }).unsubscribe;
    this.#unwatchHosts = deps.hosts.onChange(() => this.requestLook());
    this.#timer = this.#arm();
  }

  /**
   * Look again after the current turn's work (many triggers in one turn make one look): at `model` alone, or at
   * every model (hosts changed, a load was refused).
   */
  requestLook(model?: string): void {
    if (this.#closed || this.#pending === 'all') return;
    const first = this.#pending === null;
    if (model === undefined) this.#pending = 'all';
    else {
      const models = this.#pending ?? new Set<string>();
      models.add(model);
      this.#pending = models;
    }
    if (!first) return;
    queueMicrotask(() => {
      const pending = this.#pending;
      this.#pending = null;
      this.look(pending === 'all' || pending === null ? undefined : pending);
    });
  }

  /**
   * A job was queued for `model`. A model scaled to zero is looked at before the job is routed, so that its first
   * replica goes where the policy places it; one that has replicas wanted only saw its demand grow by a job, and one
   * look after the turn covers every job of the turn — a busy mesh queues thousands a second.
   */
  #queued(model: string): void {
    if ((this.#models.get(model)?.desired ?? 0) > 0) this.#afterTurn.request(model);
    else this.requestLook(model);
  }

  /** Compare the models' replicas (every model's, or only those named) with their demand and policy, and load or unload where they differ. */
  look(only?: ReadonlySet<string>): void {
    if (this.#closed) return;
    const now = this.#deps.clock.now();
    let sent = false;
    for (const model of this.#deps.models()) if (!only || only.has(model.manifest.name)) sent = this.#lookAt(model, now) || sent;
    // Unload marks change where batches may go; the dispatcher listens to this.
    if (sent) this.#deps.hosts.changed();
  }

  /**
   * After a turn that queued jobs of models with replicas wanted: only a model whose need rose above the need of its
   * last look can want more replicas now; the others only record their need, as a look would. The rest of a look —
   * the time-driven scale-in, the floor, loads to retry — is the interval's and the host changes' to start. This is
   * the look a tiny job paid for on its way (about 17 µs of the orchestrator's thread each, bench:overhead's mlp);
   * a model's need moves far less often than its jobs arrive.
   */
  #lookIfNeedRose(models: ReadonlySet<string>): void {
    const now = this.#deps.clock.now();
    let rose: Set<string> | null = null;
    for (const name of models) {
      const state = this.#models.get(name);
      const policy = state?.policy;
      if (!state || !policy) {
        (rose ??= new Set()).add(name);
        continue;
      }
      const demand = this.#deps.queued(name) + this.#running(name);
      const need = Math.min(this.#cap(policy), Math.ceil(demand / policy.targetInFlight));
      if (need > state.need) (rose ??= new Set()).add(name);
      else {
        state.demand = demand;
        this.#recentNeed(state, need, now, policy.idleWindowMs);
      }
    }
    if (rose) this.look(rose);
  }

  /** An agent would not load a model it was asked to: try elsewhere, and ask this host again only after a pause. */
  refused(host: HostSession, model: string, error: { code: string; message: string }): void {
    const { clock, log, metrics, events } = this.#deps;
    const now = clock.now();
    if (host.replicaChanges.get(model)?.change === 'load') host.replicaChanges.delete(model);
    host.held.delete(model);
    const state = this.#state(model);
    const count = (state.refusals.get(host)?.count ?? 0) + 1;
    const pauseMs = backoffDelay({ initialMs: REFUSAL_BACKOFF_MS, maxMs: REFUSAL_BACKOFF_MAX_MS }, count);
    state.refusals.set(host, { until: now + pauseMs, count });
    log.warn({ host: host.id, model, code: error.code, reason: error.message, askAgainInMs: pauseMs }, 'a host refused to load a replica; trying another');
    metrics.replicaLoadRefused(host.id, model, error.code);
    events.publishMesh({ type: 'replica:refused', host: host.id, model, code: error.code, message: error.message, at: new Date(now).toISOString() });
    this.requestLook();
  }

  /** Every model's replicas: where they are, in which state, and how many are wanted. */
  view(): ModelReplicasView[] {
    return this.#deps.models().map((model) => {
      const name = model.manifest.name;
      const policy = model.policy.replicas;
      const state = this.#models.get(name);
      const replicas: ModelReplicasView['replicas'] = [];
      for (const host of this.#deps.hosts) {
        const change = host.replicaChanges.get(name)?.change;
        if (change !== 'unload' && !host.hasReplica(name)) continue;
        const status: ReplicaState = change === 'unload' ? 'unloading' : host.draining ? 'draining' : host.isResident(name) ? 'ready' : 'loading';
        replicas.push({ host: host.id, state: status, held: host.held.has(name) });
      }
      return {
        model: name, desired: state?.desired ?? policy.min, min: policy.min, max: policy.max, targetInFlight: policy.targetInFlight,
        idleWindowS: policy.idleWindowMs / 1000, demand: state?.demand ?? 0, replicas,
      };
    });
  }

  close(): void {
    this.#closed = true;
    this.#afterTurn.close();
    this.#timer.cancel();
    this.#unsubscribe();
    this.#unwatchHosts();
  }

  #arm(): Timer {
    return this.#deps.clock.setTimer(this.#deps.intervalMs, () => {
      if (this.#closed) return;
      this.look();
      this.#timer = this.#arm();
    });
  }

  #state(model: string): ModelState {
    let state = this.#models.get(model);
    if (!state) this.#models.set(model, (state = { seen: [], need: 0, policy: null, desired: 0, demand: 0, refusals: new Map(), idleSince: new Map() }));
    return state;
  }

  /** Returns whether it sent anything. */
  #lookAt(model: RegisteredModel, now: number): boolean {
    const name = model.manifest.name;
    const policy = model.policy.replicas;
    const state = this.#state(name);
    const hosts = [...this.#deps.hosts];
    this.#settle(name, hosts, state, now);
    const serving = hosts.filter((host) => this.#serves(host, name));
    state.policy = policy;
    state.demand = this.#deps.queued(name) + this.#running(name);
    const cap = this.#cap(policy);
    const need = Math.min(cap, Math.ceil(state.demand / policy.targetInFlight));
    const recent = this.#recentNeed(state, need, now, policy.idleWindowMs);
    const scaleOutTo = Math.min(cap, Math.max(policy.min, need));
    const scaleInTo = Math.min(cap, Math.max(policy.min, recent));
    let sent = false;
    if (serving.length < scaleOutTo) {
      sent = this.#scaleOut(model, serving, scaleOutTo - serving.length, state, now);
      state.desired = scaleOutTo;
    } else if (serving.length > scaleInTo) {
      sent = this.#scaleIn(model, serving, serving.length - scaleInTo, state, now);
      state.desired = scaleInTo;
    } else {
      state.desired = serving.length;
    }
    sent = this.#holdFloor(model, policy, state, now) || sent;
    let ready = 0;
    for (const host of hosts) if (this.#serves(host, name) && host.hasReadyReplica(name)) ready++;
    this.#deps.metrics.replicas(name, ready, state.desired);
    return sent;
  }

  /** More replicas than hosts can never be placed; the cap keeps the need's history short. */
  #cap(policy: ReplicaPolicy): number {
    return Math.min(policy.max ?? Infinity, Math.max(policy.min, this.#deps.hosts.size));
  }

  /** The model's jobs in batches on the hosts where its replicas count (#serves). */
  #running(model: string): number {
    let running = 0;
    for (const host of this.#deps.hosts) {
      let jobs = 0;
      for (const batch of host.batches.values()) if (batch.model === model) jobs += batch.jobIds.size;
      if (jobs > 0 && this.#serves(host, model)) running += jobs;
    }
    return running;
  }

  /**
   * The highest need seen within the idle window. A need holds from one look
   * to the next, so the previous look's need is recorded as seen until now.
   */
  #recentNeed(state: ModelState, need: number, now: number, windowMs: number): number {
    for (let k = 1; k <= Math.max(state.need, need); k++) state.seen[k] = now;
    state.need = need;
    let recent = 0;
    for (let k = 1; k < state.seen.length; k++) {
      if (now - state.seen[k]! > windowMs) break;
      recent = k;
    }
    return recent;
  }

  /** Forget changes that happened (or were never answered) and refusals of hosts that left. */
  #settle(model: string, hosts: HostSession[], state: ModelState, now: number): void {
    for (const host of hosts) {
      const resident = host.isResident(model);
      if (resident) state.refusals.delete(host); // it loaded: its next refusal starts the pauses over
      const change = host.replicaChanges.get(model);
      if (!change) continue;
      if (change.change === 'load' && (resident || now - change.at > LOAD_ANSWER_MS)) host.replicaChanges.delete(model);
      if (change.change === 'unload' && (!resident || now - change.at > UNLOAD_ANSWER_MS)) host.replicaChanges.delete(model);
    }
    for (const host of state.refusals.keys()) if (this.#deps.hosts.get(host.id) !== host) state.refusals.delete(host);
    // A replica's idle clock starts when it is first seen, and a batch of the model running there restarts it.
    for (const host of hosts) {
      if (host.hasReplica(model) && (runsModel(host, model) || !state.idleSince.has(host.id))) state.idleSince.set(host.id, now);
    }
    for (const id of state.idleSince.keys()) if (!this.#deps.hosts.get(id)?.hasReplica(model)) state.idleSince.delete(id);
  }

  /**
   * Where a load someone asked for (`gpumesh models load`) goes. A named host: that one, if it could hold the model at
   * all (one of its classes, its engine, a budget it fits, not draining). Otherwise the hosts that can serve the model
   * (a router candidate with a budget it fits, not draining, no breaker blocking it there), in the order to ask them:
   * those already holding a replica first — they count —, then those the autoscaler would place a replica on next, in
   * its order; a host it passes over for now (a refusal's pause, a load that would evict a model with work) is still
   * asked, since someone asked, but last. `wanted`: max(1, minReplicas), or the count asked, capped by maxReplicas.
   * NOT_FOUND naming why when no host may take it.
   */
  planLoad(model: RegisteredModel, ask: { host?: string; replicas?: number } = {}): LoadPlan {
    const name = model.manifest.name;
    const classes = this.#deps.classesOf(model);
    const fits = this.#deps.router.candidates(model, classes).filter((host) => host.takesWork && host.largestBudgetMB >= model.manifest.memoryMB);
    if (ask.host !== undefined) {
      const host = fits.find((candidate) => candidate.id === ask.host);
      if (!host) throw new MeshError('NOT_FOUND', { what: `A connected host ${ask.host} that can load ${name} (one of its classes, its engine, a budget it fits, not draining)` });
      return { wanted: 1, asked: 1, max: model.policy.replicas.max, hosts: [host] };
    }
    const now = this.#deps.clock.now();
    const refusals = this.#models.get(name)?.refusals;
    const rank = (host: HostSession): number => host.hasReplica(name) ? 0
      : (refusals?.get(host)?.until ?? 0) > now || this.#deps.displacesWork?.(host, model) ? 2 : 1;
    const order = placementOrder(model, classes);
    const hosts = fits.filter((host) => !this.#deps.blocked?.(host.id, name)).sort((a, b) => rank(a) - rank(b) || order(a, b));
    if (hosts.length === 0) throw new MeshError('NOT_FOUND', { what: `A connected host that can load ${name}` });
    const policy = model.policy.replicas;
    const asked = ask.replicas ?? Math.max(1, policy.min);
    return { wanted: Math.min(asked, policy.max ?? Infinity), asked, max: policy.max, hosts };
  }

  /**
   * Send the load someone asked for to one host of a `planLoad`. A replica the autoscaler holds stays held (a load
   * without `hold` would let the agent's idle unload take one of the model's minReplicas); any other is an ordinary
   * replica: the residency rules (idle unload, eviction) stay as they are, and the autoscaler holds it if the floor
   * needs it.
   */
  loadOn(model: RegisteredModel, host: HostSession): void {
    const name = model.manifest.name;
    const hold = host.held.has(name);
    host.replicaChanges.set(name, { change: 'load', at: this.#deps.clock.now() });
    host.send({ type: 'load', model: model.manifest, hold });
    this.#deps.log.info({ model: name, host: host.id, hold }, 'loading a replica (asked for)');
  }

  /** Unload `model` from the named host, or from every host that holds it (asked for); returns the hosts asked. */
  unloadNow(name: string, hostId?: string): HostSession[] {
    const now = this.#deps.clock.now();
    const hosts = [...this.#deps.hosts].filter((host) => host.hasReplica(name) && (hostId === undefined || host.id === hostId));
    for (const host of hosts) {
      host.held.delete(name);
      host.replicaChanges.set(name, { change: 'unload', at: now });
      host.send({ type: 'unload', model: name });
      this.#deps.log.info({ model: name, host: host.id }, 'unloading a replica (asked for)');
    }
    return hosts;
  }

  /** A replica that counts: the host is not draining and no breaker blocks the model there. */
  #serves(host: HostSession, model: string): boolean {
    return host.takesWork && host.hasReplica(model) && !this.#deps.blocked?.(host.id, model);
  }

  #scaleOut(model: RegisteredModel, serving: HostSession[], count: number, state: ModelState, now: number): boolean {
    const name = model.manifest.name;
    const classes = this.#deps.classesOf(model);
    const candidates = this.#deps.router.candidates(model, classes)
      .filter((host) => host.takesWork && host.largestBudgetMB >= model.manifest.memoryMB && !host.hasReplica(name)
        && !this.#deps.blocked?.(host.id, name) && (state.refusals.get(host)?.until ?? 0) <= now
        && !this.#deps.displacesWork?.(host, model))
      .sort(placementOrder(model, classes));
    const chosen = candidates.slice(0, count);
    if (chosen.length < count) this.#deps.log.debug({ model: name, wanted: count, eligible: chosen.length }, 'not enough eligible hosts for more replicas');
    let held = serving.filter((host) => host.held.has(name)).length;
    for (const host of chosen) {
      const hold = held < model.policy.replicas.min;
      if (hold) {
        held++;
        host.held.add(name);
      }
      host.replicaChanges.set(name, { change: 'load', at: now });
      host.send({ type: 'load', model: model.manifest, hold });
      this.#deps.log.info({ model: name, host: host.id, hold, demand: state.demand, replicas: serving.length }, 'loading a replica');
    }
    return chosen.length > 0;
  }

  #scaleIn(model: RegisteredModel, serving: HostSession[], count: number, state: ModelState, now: number): boolean {
    const name = model.manifest.name;
    const idleSince = (host: HostSession): number => state.idleSince.get(host.id) ?? now;
    // Only replicas that did nothing for the whole idle window: loaded (not loading), no batch of the model in flight
    // or dispatched there since. Unheld ones first, then the longest idle.
    const windowMs = model.policy.replicas.idleWindowMs;
    const idle = serving
      .filter((host) => host.replicaChanges.get(name) === undefined && !runsModel(host, name) && now - idleSince(host) > windowMs)
      .sort((a, b) => Number(a.held.has(name)) - Number(b.held.has(name))
        || idleSince(a) - idleSince(b)
        || a.id.localeCompare(b.id));
    const chosen = idle.slice(0, count);
    for (const host of chosen) {
      host.held.delete(name);
      host.replicaChanges.set(name, { change: 'unload', at: now });
      host.send({ type: 'unload', model: name });
      this.#deps.log.info({ model: name, host: host.id, demand: state.demand, replicas: serving.length }, 'unloading a replica');
    }
    return chosen.length > 0;
  }

  /** The first minReplicas replicas are held, so their agents keep them; a replica that was not is asked to (an idempotent load). */
  #holdFloor(model: RegisteredModel, policy: ReplicaPolicy, state: ModelState, now: number): boolean {
    if (policy.min === 0) return false;
    const name = model.manifest.name;
    const serving = [...this.#deps.hosts].filter((host) => this.#serves(host, name));
    let missing = policy.min - serving.filter((host) => host.held.has(name)).length;
    let sent = false;
    for (const host of serving) {
      if (missing <= 0) break;
      if (host.held.has(name) || (state.refusals.get(host)?.until ?? 0) > now) continue;
      host.held.add(name);
      host.send({ type: 'load', model: model.manifest, hold: true });
      missing--;
      sent = true;
    }
    return sent;
  }
}

/** Whether a batch of `model` is in flight on the host. */
function runsModel(host: HostSession, model: string): boolean {
  for (const batch of host.batches.values()) if (batch.model === model) return true;
  return false;
}
