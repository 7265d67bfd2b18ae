import type { Logger } from 'pino';
import { MeshError, type HostAway } from '../../protocol/index.js';
import type { Clock } from '../../protocol/clock.js';
import { EngineError } from '../core/engine.js';
import type { OwnerPolicy } from './config.js';

export interface YieldingDeps {
  host: string;
  owner: OwnerPolicy | undefined;
  clock: Clock;
  log: Logger;
  /** The batches running now: how many, and giving them all back. */
  batches: { readonly size: number; handBack(error: EngineError): void };
  /** The models resident now, and letting them all go. */
  residency: { resident(): readonly unknown[]; unloadAll(): Promise<void> };
}

/**
 * What a host that takes no work does about the work and the memory it holds (HostAvailability says when):
 * - `yielded` (its owner is using it): the batches running finish (`owner.running: finish`) or are handed back at once
 *   (`requeue`); whatever still runs `owner.unloadWithinS` after the owner came is handed back then; once nothing
 *   runs, every model is unloaded, so the GPU is the owner's.
 * - `off-hours`: the batches running finish; then every model is unloaded (the machine is its owner's again).
 * - `hot`: the batches running finish and the models stay; nothing new comes until the GPU has cooled.
 * A batch that reaches it meanwhile (sent before the orchestrator heard) is handed back as it arrives (`refusal`).
 */
export class Yielding {
  readonly #deps: YieldingDeps;
  #unloading: Promise<void> | null = null;

  constructor(deps: YieldingDeps) {
    this.#deps = deps;
  }

  /** The error a job handed back fails with: HOST_AWAY, retryable, naming the reason. */
  refusal(away: HostAway): EngineError {
    return new EngineError('HOST_AWAY', new MeshError('HOST_AWAY', { host: this.#deps.host, detail: away.reason }).message, true);
  }

  /** After each check: hand work back and let memory go as `away` asks. */
  enforce(away: HostAway | null): void {
    if (!away || away.state === 'hot') return;
    const { batches, owner, clock } = this.#deps;
    if (away.state === 'yielded' && batches.size > 0) {
      const overdue = clock.now() - away.since >= (owner?.unloadWithinS ?? 0) * 1000;
      if (owner?.running === 'requeue' || overdue) {
        this.#deps.log.info({ batches: batches.size, reason: away.reason }, 'handing the running batches back: the owner needs the machine');
        batches.handBack(this.refusal(away));
      }
    }
    if (batches.size === 0 && this.#deps.residency.resident().length > 0) this.#unloadAll(away);
  }

  #unloadAll(away: HostAway): void {
    this.#unloading ??= (async () => {
      this.#deps.log.info({ state: away.state, reason: away.reason }, 'unloading every model: the machine is its owner\'s now');
      await this.#deps.residency.unloadAll();
    })().catch((error: unknown) => this.#deps.log.warn({ err: error }, 'could not unload the models')).finally(() => {
      this.#unloading = null;
    });
  }
}
