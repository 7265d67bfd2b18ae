import type { Logger } from 'pino';
import type { AgentMessage, ModelManifest } from '../../protocol/index.js';
import { EngineError, type LoadedModel } from '../core/engine.js';
import type { Residency } from './residency.js';

export interface LoadRequestsDeps {
  residency: Pick<Residency, 'acquire' | 'release' | 'unload' | 'resident'>;
  send(message: AgentMessage): void;
  /** Whether a batch of this model is running now: an unload waits until it ends. */
  busy(model: string): boolean;
  /** The agent is leaving: it loads nothing new. */
  draining(): boolean;
  log: Logger;
}

/**
 * The orchestrator's `load` and `unload` requests on this host (its
 * autoscaler places replicas). The agent keeps its own memory budget: a load
 * that does not fit is answered `load-refused` with the residency's reason.
 *
 * A held model (`load` with `hold`, one of its model's minReplicas) is
 * acquired once and not released until `unload`: the residency's idle unload
 * and its eviction both leave models in use alone, so that is all holding
 * takes. Requests about one model run one after another, in the order they came.
 */
export class LoadRequests {
  readonly #deps: LoadRequestsDeps;
  /** Held models, by name: the acquisition each hold keeps (released on `unload`). */
  readonly #held = new Map<string, LoadedModel>();
  readonly #unloadWanted = new Set<string>();
  readonly #chains = new Map<string, Promise<void>>();

  constructor(deps: LoadRequestsDeps) {
    this.#deps = deps;
  }

  /** Models held for the orchestrator's minReplicas. */
  get held(): string[] {
    return [...this.#held.keys()];
  }

  load(manifest: ModelManifest, hold: boolean): Promise<void> {
    return this.#serially(manifest.name, () => this.#load(manifest, hold));
  }

  unload(model: string): Promise<void> {
    return this.#serially(model, async () => {
      this.#unloadWanted.add(model);
      this.#releaseHold(model);
      await this.#unloadIfIdle(model);
    });
  }

  /** A batch of the model ended: an unload that waited for it may go ahead. */
  batchEnded(model: string): void {
    if (this.#unloadWanted.has(model)) void this.#serially(model, () => this.#unloadIfIdle(model));
  }

  async #load(manifest: ModelManifest, hold: boolean): Promise<void> {
    const { residency, log } = this.#deps;
    const name = manifest.name;
    if (this.#deps.draining()) return this.#refuse(name, new EngineError('NOT_READY', 'this host is draining; it loads nothing new'));
    this.#unloadWanted.delete(name);
    const before = residency.resident().find((entry) => entry.model === name);
    // A hold on an older version of the model ends with it: acquiring the new version unloads the old one.
    if (before && before.digest !== manifest.digest) this.#releaseHold(name);
    let loaded: LoadedModel;
    try {
      ({ loaded } = await residency.acquire(manifest));
    } catch (error) {
      return this.#refuse(name, error);
    }
    const previous = this.#held.get(name);
    if (hold && previous !== loaded) {
      // Keep this acquisition: held until unload. A previous hold is on a model that is gone (its engine died).
      this.#held.set(name, loaded);
      if (previous) residency.release(previous);
    } else {
      residency.release(loaded);
      if (!hold) this.#releaseHold(name);
    }
    log.info({ model: name, hold }, 'replica loaded as the orchestrator asked');
    // A model that was already resident raised no `loaded` event; the orchestrator is waiting for one.
    const now = residency.resident().find((entry) => entry.model === name);
    if (before?.digest === manifest.digest && now) {
      this.#deps.send({ type: 'loaded', model: name, digest: now.digest, device: now.device, memoryMB: now.memoryMB });
    }
  }

  #releaseHold(model: string): void {
    const held = this.#held.get(model);
    if (!held) return;
    this.#held.delete(model);
    this.#deps.residency.release(held);
  }

  async #unloadIfIdle(model: string): Promise<void> {
    if (!this.#unloadWanted.has(model) || this.#deps.busy(model)) return;
    this.#unloadWanted.delete(model);
    await this.#deps.residency.unload(model);
  }

  #refuse(model: string, error: unknown): void {
    const code = error instanceof EngineError ? error.code : 'ENGINE_FAILED';
    const message = error instanceof Error ? error.message : String(error);
    this.#deps.log.warn({ model, code, reason: message }, 'refused to load a replica');
    this.#deps.send({ type: 'load-refused', model, error: { code, message } });
  }

  #serially(model: string, step: () => Promise<void>): Promise<void> {
    const chain = (this.#chains.get(model) ?? Promise.resolve())
      .then(step)
      .catch((error: unknown) => this.#deps.log.warn({ err: error, model }, 'a load or unload request failed'));
    this.#chains.set(model, chain);
    void chain.then(() => {
      if (this.#chains.get(model) === chain) this.#chains.delete(model);
    });
    return chain;
  }
}
