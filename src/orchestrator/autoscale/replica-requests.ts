import { MeshError, type Device, type MeshEvent } from '../../protocol/index.js';
import type { Clock } from '../../protocol/clock.js';
import type { EventBus } from '../events/event-bus.js';
import type { RegisteredModel } from '../registry/index.js';
import type { HostRegistry, HostSession } from '../routing/index.js';
import type { Autoscaler } from './autoscaler.js';

export interface ReplicaRequestsDeps {
  autoscaler: Pick<Autoscaler, 'loadNow' | 'unloadNow'>;
  hosts: HostRegistry;
  events: EventBus;
  clock: Clock;
  /** How often agents report their devices' memory: the figure after a change arrives with the next heartbeat. */
  heartbeatMs: number;
  /** How long a load may take before the answer gives up waiting (the load goes on). Default 10 minutes. */
  timeoutMs?: number;
}

/** A replica's change on one host, and its device's memory before and after it. */
export interface ReplicaChange {
  host: string;
  model: string;
  change: 'loaded' | 'unloaded';
  device: string | null;
  memoryMB: number | null;
  before: Device[];
  after: Device[];
}

/**
 * Make a model resident on a host, or let it go, because someone asked (`gpumesh models load|unload`,
 * `POST /v1/models/:name/load|unload`), and answer once it happened, with the devices' memory before and after: the
 * agent's `loaded` (or `load-refused`, the refusal's words) or `unloaded`, then its next heartbeat, which carries the
 * memory it now uses.
 */
export class ReplicaRequests {
  readonly #deps: ReplicaRequestsDeps;

  constructor(deps: ReplicaRequestsDeps) {
    this.#deps = deps;
  }

  async load(model: RegisteredModel, hostId?: string): Promise<ReplicaChange> {
    const name = model.manifest.name;
    const waiting = this.#await((event) => (event.type === 'replica:loaded' || event.type === 'replica:refused') && event.model === name, name);
    let host: HostSession;
    try {
      host = this.#deps.autoscaler.loadNow(model, hostId);
    } catch (error) {
      waiting.cancel();
      throw error;
    }
    const before = [...host.devices];
    const event = await waiting.until((candidate) => 'host' in candidate && candidate.host === host.id);
    if (event.type === 'replica:refused') throw new MeshError('NO_ROOM', { model: name, detail: `${host.id} refused: ${event.code}: ${event.message}` });
    const loaded = event as Extract<MeshEvent, { type: 'replica:loaded' }>;
    return { host: host.id, model: name, change: 'loaded', device: loaded.device, memoryMB: loaded.memoryMB, before, after: await this.#nextReport(host) };
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
      const event = await waiting.until((candidate) => 'host' in candidate && remaining.has(candidate.host)) as Extract<MeshEvent, { type: 'replica:unloaded' }>;
      remaining.delete(event.host);
      const host = hosts.find((candidate) => candidate.id === event.host)!;
      changes.push({ host: host.id, model: name, change: 'unloaded', device: event.device, memoryMB: null, before: before.get(host.id)!, after: await this.#nextReport(host) });
    }
    waiting.cancel();
    return changes;
  }

  /** Mesh events matching `filter`, kept from now on (the change may come before the caller starts waiting). */
  #await(filter: (event: MeshEvent) => boolean, model: string): { until(match: (event: MeshEvent) => boolean): Promise<MeshEvent>; cancel(): void } {
    const seen: MeshEvent[] = [];
    let wake: (() => void) | null = null;
    const { unsubscribe } = this.#deps.events.subscribeAll((scoped) => {
      if (scoped.kind !== 'mesh' || !filter(scoped.event)) return;
      seen.push(scoped.event);
      wake?.();
    });
    const timeoutMs = this.#deps.timeoutMs ?? 10 * 60_000;
    return {
      until: async (match) => {
        const deadline = this.#deps.clock.now() + timeoutMs;
        for (;;) {
          const index = seen.findIndex(match);
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

  /** The host's devices as its next heartbeat reports them (or as they are, if none comes within two intervals). */
  async #nextReport(host: HostSession): Promise<Device[]> {
    const seenAt = host.lastSeenAt;
    const deadline = this.#deps.clock.now() + 2 * this.#deps.heartbeatMs;
    while (host.lastSeenAt === seenAt && this.#deps.clock.now() < deadline) {
      await new Promise<void>((resolve) => this.#deps.clock.setTimer(Math.min(50, this.#deps.heartbeatMs), resolve));
    }
    return [...host.devices];
  }
}
