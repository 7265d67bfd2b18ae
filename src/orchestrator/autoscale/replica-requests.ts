import type { LoadAnswer, MeshEvent, ReplicaChange } from '../../protocol/api/index.js';
import { MeshError, type Device } from '../../protocol/index.js';
import type { Clock } from '../../protocol/clock.js';
import type { EventBus } from '../events/event-bus.js';
import type { RegisteredModel } from '../registry/index.js';
import type { HostRegistry, HostSession } from '../routing/index.js';
import type { Autoscaler, LoadPlan } from './autoscaler.js';

export interface ReplicaRequestsDeps {
  autoscaler: Pick<Autoscaler, 'planLoad' | 'loadOn' | 'unloadNow'>;
  hosts: HostRegistry;
  events: EventBus;
  clock: Clock;
  /** How often agents report their devices' memory: an answer waits at most two of these for the report after a change. */
  heartbeatMs: number;
  /** How long a load may take before the answer gives up waiting (the load goes on). Default 10 minutes. */
  timeoutMs?: number;
}

/** A replica's change as it came, with its host's count of device reports then. */
interface SeenChange {
  event: MeshEvent;
  reports: number;
}

/**
 * Make a model resident on its hosts, or let it go, because someone asked (`gpumesh models load|unload`,
 * `POST /v1/models/:name/load|unload`), and answer once it happened, with the devices' memory before and after: the
 * agent's `loaded` (or `load-refused`, the refusal's words) or `unloaded`, then the report of its devices it sends
 * next (right after the change), which carries the memory it now uses.
 */
export class ReplicaRequests {
  readonly #deps: ReplicaRequestsDeps;

  constructor(deps: ReplicaRequestsDeps) {
    this.#deps = deps;
  }

  /**
   * Load the model where `ask` says (see `Autoscaler.planLoad`): on the named host, else on as many hosts as its
   * minReplicas (at least one) or the count asked. Every host is asked at once; one that refuses is replaced by the next
   * in the plan's order, if there is one. Answers once each has answered, with what was loaded and, when that is fewer
   * than wanted (or maxReplicas cut the count asked), a note saying how many of how many and why. Fails only when
   * nothing was loaded: NO_ROOM with the refusals, or NOT_READY when no host answered in time.
   */
  async load(model: RegisteredModel, ask: { host?: string; replicas?: number } = {}): Promise<LoadAnswer> {
    const name = model.manifest.name;
    const waiting = this.#await((event) => (event.type === 'replica:loaded' || event.type === 'replica:refused') && event.model === name, name);
    let plan: LoadPlan;
    try {
      plan = this.#deps.autoscaler.planLoad(model, ask);
    } catch (error) {
      waiting.cancel();
      throw error;
    }
    const standby = plan.hosts.slice(plan.wanted);
    const asked = new Map<string, { host: HostSession; before: Device[] }>();
    const askHost = (host: HostSession): void => {
      asked.set(host.id, { host, before: [...host.devices] });
      this.#deps.autoscaler.loadOn(model, host);
    };
    for (const host of plan.hosts.slice(0, plan.wanted)) askHost(host);
    const loaded: { host: HostSession; before: Device[]; event: Extract<MeshEvent, { type: 'replica:loaded' }>; reports: number }[] = [];
    const refusals: string[] = [];
    let unanswered: string[] = [];
    try {
      while (asked.size > 0) {
        const seen = await waiting.until((candidate) => 'host' in candidate && asked.has(candidate.host));
        const event = seen.event as Extract<MeshEvent, { type: 'replica:loaded' | 'replica:refused' }>;
        const { host, before } = asked.get(event.host)!;
        asked.delete(event.host);
        if (event.type === 'replica:loaded') {
          loaded.push({ host, before, event, reports: seen.reports });
          continue;
        }
        refusals.push(`${host.id} refused: ${event.code}: ${event.message}`);
        const next = standby.shift();
        if (next) askHost(next);
      }
    } catch (error) {
      // Out of time: what was loaded is the answer, the hosts still loading are named (the loads go on).
      if (loaded.length === 0) throw error;
      unanswered = [...asked.keys()];
    } finally {
      waiting.cancel();
    }
    if (loaded.length === 0) throw new MeshError('NO_ROOM', { model: name, detail: refusals.join('; ') });
    const changes = await Promise.all(loaded.map(async ({ host, before, event, reports }): Promise<ReplicaChange> => ({
      host: host.id, model: name, change: 'loaded', device: event.device, memoryMB: event.memoryMB, before, after: await this.#nextReport(host, reports),
    })));
    return { model: name, wanted: plan.wanted, loaded: changes, note: loadNote(plan, changes.length, refusals, unanswered) };
  }

  async unload(name: string, hostId?: string): Promise<ReplicaChange[]> {
    const waiting = this.#await((event) => event.type === 'replica:unloaded' && event.model === name, name);
    const hosts = this.#deps.autoscaler.unloadNow(name, hostId);
    if (hosts.length === 0) {
      waiting.cancel();
      throw new MeshError('NOT_FOUND', { what: `A connected host${hostId ? ` ${hostId}` : ''} holding ${name}` });
    }
    const before = new Map(hosts.map((host) => [host.id, [...host.devices]]));
    const changes: ReplicaChange[] = [];
    const remaining = new Set(hosts.map((host) => host.id));
    while (remaining.size > 0) {
      const seen = await waiting.until((candidate) => 'host' in candidate && remaining.has(candidate.host));
      const event = seen.event as Extract<MeshEvent, { type: 'replica:unloaded' }>;
      remaining.delete(event.host);
      const host = hosts.find((candidate) => candidate.id === event.host)!;
      changes.push({ host: host.id, model: name, change: 'unloaded', device: event.device, memoryMB: null, before: before.get(host.id)!, after: await this.#nextReport(host, seen.reports) });
    }
    waiting.cancel();
    return changes;
  }

  /**
   * Mesh events matching `filter`, kept from now on (the change may come before the caller starts waiting), each with
   * how many device reports its host had sent when it came: the figure after the change is in the next one.
   */
  #await(filter: (event: MeshEvent) => boolean, model: string): { until(match: (event: MeshEvent) => boolean): Promise<SeenChange>; cancel(): void } {
    const seen: SeenChange[] = [];
    let wake: (() => void) | null = null;
    const { unsubscribe } = this.#deps.events.subscribeAll((scoped) => {
      if (scoped.kind !== 'mesh' || !filter(scoped.event)) return;
      const host = 'host' in scoped.event ? this.#deps.hosts.get(scoped.event.host) : undefined;
      seen.push({ event: scoped.event, reports: host?.reports ?? 0 });
      wake?.();
    });
    const timeoutMs = this.#deps.timeoutMs ?? 10 * 60_000;
    return {
      until: async (match) => {
        const deadline = this.#deps.clock.now() + timeoutMs;
        for (;;) {
          const index = seen.findIndex((change) => match(change.event));
          if (index >= 0) return seen.splice(index, 1)[0]!;
          const left = deadline - this.#deps.clock.now();
          if (left <= 0) {
            unsubscribe();
            throw new MeshError('NOT_READY', { detail: `${model} did not change on the host within ${timeoutMs} ms (the request goes on: see gpumesh status)` });
          }
          await new Promise<void>((resolve) => {
            const timer = this.#deps.clock.setTimer(left, resolve);
            wake = () => {
              timer.cancel();
              resolve();
            };
          });
          wake = null;
        }
      },
      cancel: unsubscribe,
    };
  }

  /**
   * The host's devices as its first report after a change reports them (`reports`: its count when the change came),
   * or as they are if none comes within two heartbeats. Counted, not timed: the agent reports right after a change,
   * often within the same millisecond as the change's own message.
   */
  async #nextReport(host: HostSession, reports: number): Promise<Device[]> {
    const deadline = this.#deps.clock.now() + 2 * this.#deps.heartbeatMs;
    while (host.reports === reports && this.#deps.clock.now() < deadline) {
      await new Promise<void>((resolve) => this.#deps.clock.setTimer(Math.min(50, this.#deps.heartbeatMs), resolve));
    }
    return [...host.devices];
  }
}

/**
 * How far a load fell short of what was wanted, and why: `2 of 3 replicas: only 2 hosts can serve it`, refusals and
 * hosts that did not answer in time; or that maxReplicas cut the count asked. Null when it went as asked.
 */
export function loadNote(plan: Pick<LoadPlan, 'wanted' | 'asked' | 'max'> & { hosts: readonly unknown[] }, loaded: number, refusals: string[], unanswered: string[]): string | null {
  const capped = plan.asked > plan.wanted ? ` (${plan.asked} asked; maxReplicas is ${plan.max})` : '';
  if (loaded >= plan.wanted) return capped ? `${loaded} ${loaded === 1 ? 'replica' : 'replicas'}${capped}` : null;
  const why: string[] = [];
  if (plan.hosts.length < plan.wanted) why.push(`only ${plan.hosts.length} ${plan.hosts.length === 1 ? 'host' : 'hosts'} can serve it`);
  why.push(...refusals);
  if (unanswered.length > 0) why.push(`${unanswered.join(', ')} did not answer in time (still loading: see gpumesh status)`);
  return `${loaded} of ${plan.wanted} replicas${capped}: ${why.join('; ')}`;
}
