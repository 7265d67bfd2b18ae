import type { Clock } from '../../protocol/clock.js';
import type { HostSession } from './host.js';

/** Heartbeats this many intervals overdue make a host unhealthy (it is dropped later, at agents.staleAfterMs). */
export const LATE_HEARTBEATS = 2;

interface ReplicaHealth {
  /** The last probe's outcome; null before the first. */
  probeOk: boolean | null;
  lastProbeAt: number | null;
  detail: string | null;
  /** The last time a batch or a probe of this replica succeeded. */
  lastGoodAt: number | null;
  /** The last time a real batch (not a probe) succeeded. */
  lastWorkAt: number | null;
}

export interface HealthBookDeps {
  clock: Clock;
  heartbeatMs: number;
}

/**
 * Health as the router sees it. A host is alive while its heartbeats arrive
 * (the link); a replica is healthy unless its last probe failed and nothing
 * has succeeded on it since. Probes catch the host that answers pings but
 * can no longer run its model; the per-attempt timeout catches one that
 * stalls real work.
 */
export class HealthBook {
  readonly #deps: HealthBookDeps;
  readonly #replicas = new Map<string, Map<string, ReplicaHealth>>();

  constructor(deps: HealthBookDeps) {
    this.#deps = deps;
  }

  /** A probe of `model` on `host` finished. */
  probed(host: string, model: string, ok: boolean, detail: string | null = null): void {
    const entry = this.#entry(host, model);
    const now = this.#deps.clock.now();
    entry.probeOk = ok;
    entry.lastProbeAt = now;
    entry.detail = ok ? null : detail;
    if (ok) entry.lastGoodAt = now;
  }

  /** A real batch of `model` succeeded on `host`: the replica works, whatever an earlier probe said. */
  succeeded(host: string, model: string): void {
    const entry = this.#entry(host, model);
    entry.lastGoodAt = this.#deps.clock.now();
    entry.lastWorkAt = entry.lastGoodAt;
    if (entry.probeOk === false) {
      entry.probeOk = true;
      entry.detail = null;
    }
  }

  /** Why real work of `model` should not go to this host now, or null. */
  unhealthy(host: HostSession, model: string): string | null {
    const late = this.#deps.clock.now() - host.lastSeenAt;
    if (late > LATE_HEARTBEATS * this.#deps.heartbeatMs) return `no heartbeat for ${late} ms`;
    const entry = this.#replicas.get(host.id)?.get(model);
    return entry?.probeOk === false ? `probe failed: ${entry.detail ?? 'no detail'}` : null;
  }

  hostState(host: HostSession): 'healthy' | 'late' {
    return this.#deps.clock.now() - host.lastSeenAt > LATE_HEARTBEATS * this.#deps.heartbeatMs ? 'late' : 'healthy';
  }

  replica(host: string, model: string): {
    state: 'healthy' | 'unhealthy' | 'unknown'; lastProbeAt: number | null; lastGoodAt: number | null; lastWorkAt: number | null; detail: string | null;
  } {
    const entry = this.#replicas.get(host)?.get(model);
    if (!entry) return { state: 'unknown', lastProbeAt: null, lastGoodAt: null, lastWorkAt: null, detail: null };
    const state = entry.probeOk === false ? 'unhealthy' : entry.probeOk === null && entry.lastGoodAt === null ? 'unknown' : 'healthy';
    return { state, lastProbeAt: entry.lastProbeAt, lastGoodAt: entry.lastGoodAt, lastWorkAt: entry.lastWorkAt, detail: entry.detail };
  }

  modelsOf(host: string): string[] {
    return [...(this.#replicas.get(host)?.keys() ?? [])];
  }

  #entry(host: string, model: string): ReplicaHealth {
    let models = this.#replicas.get(host);
    if (!models) this.#replicas.set(host, (models = new Map()));
    let entry = models.get(model);
    if (!entry) models.set(model, (entry = { probeOk: null, lastProbeAt: null, detail: null, lastGoodAt: null, lastWorkAt: null }));
    return entry;
  }
}
