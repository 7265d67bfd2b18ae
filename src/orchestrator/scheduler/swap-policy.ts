import type { Logger } from 'pino';
import type { RegisteredModel } from '../registry/index.js';
import type { HostSession } from '../routing/index.js';

/**
 * What to do when a batch would make a host swap models (the model is not resident there and there is no room
 * for it beside the ones that are): `lru` sends it at once and the agent evicts its least recently used idle
 * model (the naive rule); `batch-before-swap` first drains the batches ready for the model the host holds,
 * for at most `maxSwapHoldMs`, so one swap serves many batches instead of one.
 */
export type SwapPolicyName = 'batch-before-swap' | 'lru';

export interface SwapPolicyOptions {
  policy: SwapPolicyName;
  /** The longest a host keeps its model for the batches ready for it while another model waits for the device. */
  maxSwapHoldMs: number;
  /** A model's declared memory (MB), for the models a host is loading or running but has not reported resident yet. */
  memoryMB?: (model: string) => number | undefined;
  log?: Logger;
}

/** A swap held back on one host: the models it keeps (they have batches ready), the one that waits, and until when at most. */
export interface SwapHold {
  host: string;
  keeping: string[];
  waiting: string;
  since: number;
  until: number;
}

/** The best effective priority level (1 is highest) among each model's ready batches. */
export type ReadyModels = ReadonlyMap<string, number>;

/**
 * Batch-before-swap. Loading a model costs far more than a batch (a server started, weights read), so when two
 * models cannot both fit on a device and their jobs alternate, sending work in arrival order swaps the device
 * on every batch. This policy holds a batch that would swap a host's model out while the model it holds still
 * has batches ready, and lets it go when that model has none left, or when the host has held off a swap for
 * `maxSwapHoldMs` (the bound: a waiting job waits at most that long, plus the batch running then, beyond the
 * moment a slot first freed for it), or when the waiting batch has a better priority level than every batch of
 * the models held. The hold starts when a swap is first held back on the host and ends when the host is sent
 * a model it does not hold (the swap happens).
 *
 * It keeps no timers: the scheduler asks it about each candidate batch and wakes at a hold's end.
 */
export class SwapPolicy {
  readonly #options: SwapPolicyOptions;
  /** Hosts holding a swap off, by host id: since when, and for which model (the first that waited). */
  readonly #holds = new Map<string, { since: number; waiting: string }>();

  constructor(options: SwapPolicyOptions) {
    this.#options = options;
  }

  get name(): SwapPolicyName {
    return this.#options.policy;
  }

  /**
   * Whether a batch of `model` (best priority level `level`) should wait instead of going to `host` now; the hold
   * when it should, else null. `ready`: the models with a batch ready, and their best levels. `start` false asks
   * without starting a hold (to explain a job).
   */
  hold(model: RegisteredModel, level: number, host: HostSession, now: number, ready: ReadyModels, start = true): SwapHold | null {
    if (this.#options.policy === 'lru') return null;
    const displaced = displacedBy(model, host, this.#options.memoryMB);
    if (displaced.length === 0) return null; // no swap: it fits (or is the model the host holds)
    const keeping = displaced.filter((name) => {
      const best = ready.get(name);
      return best !== undefined && best <= level; // a waiting batch of a better level is not held for lesser work
    });
    const current = this.#holds.get(host.id);
    if (keeping.length === 0) {
      if (start) this.#holds.delete(host.id); // nothing left to hold for: the swap goes ahead
      return null;
    }
    const since = current?.since ?? now;
    const until = since + this.#options.maxSwapHoldMs;
    if (now >= until) return null; // held long enough: the swap goes now (the hold ends when it is sent)
    if (start && !current) {
      this.#holds.set(host.id, { since: now, waiting: model.manifest.name });
      this.#options.log?.info({ host: host.id, keeping, waiting: model.manifest.name, maxSwapHoldMs: this.#options.maxSwapHoldMs },
        'holding a model swap: the host keeps its model for the batches ready for it');
    }
    return { host: host.id, keeping, waiting: model.manifest.name, since, until };
  }

  /** A batch of `model` is going to `host`: if the host does not hold the model, the swap is happening and its hold ends. */
  released(model: string, host: HostSession, now: number): void {
    const current = this.#holds.get(host.id);
    if (!current || host.isResident(model)) return;
    this.#holds.delete(host.id);
    this.#options.log?.info({ host: host.id, model, heldMs: now - current.since }, 'swapping models after a hold');
  }

  /**
   * Whether loading `model` on `host` now would evict a model there that still has work (queued, or running on
   * the host): the autoscaler does not place a replica there then — the swap is the scheduler's to time. Always
   * false under `lru`.
   */
  displacesWork(model: RegisteredModel, host: HostSession, hasWork: (model: string) => boolean): boolean {
    if (this.#options.policy === 'lru') return false;
    return displacedBy(model, host, this.#options.memoryMB).some((name) => hasWork(name) || [...host.batches.values()].some((batch) => batch.model === name));
  }
}

/**
 * The models a load of `model` on `host` would evict: none when it is resident there or some device has room for
 * it (its declared memory) beside what that device holds; else the models on the device with the most room.
 * Models the host is loading (a replica asked for) or running without having reported them resident yet take room
 * too, on the device with the most room, at their declared memory (`memoryMB`; unknown: none).
 */
export function displacedBy(model: RegisteredModel, host: HostSession, memoryMB: (model: string) => number | undefined = () => undefined): string[] {
  const name = model.manifest.name;
  if (host.isResident(name)) return [];
  const devices = host.devices.map((device) => {
    const here = host.resident.filter((entry) => entry.device === device.id);
    return { budgetMB: device.budgetMB, free: device.budgetMB - here.reduce((sum, entry) => sum + entry.memoryMB, 0), models: here.map((entry) => entry.model) };
  });
  const pending = new Set<string>();
  for (const [other, change] of host.replicaChanges) if (change.change === 'load') pending.add(other);
  for (const batch of host.batches.values()) pending.add(batch.model);
  for (const other of pending) {
    if (other === name || host.isResident(other)) continue;
    const roomiest = devices.reduce<(typeof devices)[number] | null>((best, device) => (!best || device.free > best.free ? device : best), null);
    if (!roomiest) break;
    roomiest.free -= memoryMB(other) ?? 0;
    roomiest.models.push(other);
  }
  if (devices.every((device) => device.models.length === 0)) return [];
  const need = model.manifest.memoryMB;
  let best: (typeof devices)[number] | null = null;
  for (const device of devices) {
    if (device.free >= need) return [];
    if (device.budgetMB >= need && (!best || device.free > best.free)) best = device;
  }
  return best?.models ?? [];
}
