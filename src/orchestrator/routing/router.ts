import type { RegisteredModel } from '../registry/index.js';
import type { HostSession } from './host.js';

export interface RouterOptions {
  /**
   * Send a model's batches only to hosts where a replica of it is ready (resident, not being unloaded): the
   * autoscaler decides where replicas live. Off: any eligible host, which loads the model on demand (the job-role tests).
   */
  replicasOnly?: boolean;
}

/**
 * Picks the host for a batch: among connected hosts that serve one of the
 * job's classes, run the model's engine, have room for the model, are not
 * draining, have a free slot (and, with `replicasOnly`, a ready replica),
 * prefer one where the model is resident, then one that has its file
 * cached, then the one with the least work in flight.
 */
export class Router {
  readonly #hosts: Iterable<HostSession>;
  readonly #replicasOnly: boolean;

  constructor(hosts: Iterable<HostSession>, options: RouterOptions = {}) {
    this.#hosts = hosts;
    this.#replicasOnly = options.replicasOnly ?? false;
  }

  candidates(model: RegisteredModel, classes: readonly string[]): HostSession[] {
    const result: HostSession[] = [];
    for (const host of this.#hosts) {
      if (!host.info.classes.some((name) => classes.includes(name))) continue;
      if (!host.info.engines.includes(model.manifest.engine)) continue;
      if (host.largestBudgetMB < model.manifest.memoryMB) continue;
      result.push(host);
    }
    return result;
  }

  pick(model: RegisteredModel, classes: readonly string[]): HostSession | null {
    let best: HostSession | null = null;
    let bestScore = Infinity;
    for (const host of this.candidates(model, classes)) {
      if (host.draining) continue; // skip reason: draining
      if (host.freeSlots === 0) continue;
      if (this.#replicasOnly && !host.hasReadyReplica(model.manifest.name)) continue; // skip reason: no replica
      // Residency dominates: loading a model costs far more than waiting behind one batch; a pull costs more still.
      const warmth = host.isResident(model.manifest.name) ? 0 : host.cached.has(model.manifest.digest) ? 1 : 2;
      const score = warmth * 1_000_000 + host.jobsInFlight;
      if (score < bestScore) {
        best = host;
        bestScore = score;
      }
    }
    return best;
  }
}
