import type { Logger } from 'pino';
import type { HostAway } from '../../protocol/index.js';
import type { Clock } from '../../protocol/clock.js';
import type { SleepPolicy } from './config.js';

export interface SleeperDeps {
  policy: SleepPolicy;
  clock: Clock;
  log: Logger;
  /** Whether the host has nothing to do now (no batch running, no result unacknowledged). */
  idle(): boolean;
  /** Put the host to sleep: say `asleep`, let the models go, close the link; resolves once it is closed. */
  fallAsleep(away: HostAway): Promise<void>;
  /** Run the owner's sleep command; resolves when it ends (the machine woke, for a command that waits for that). */
  runCommand(command: string | readonly string[]): Promise<void>;
  /** It woke: link again. */
  wake(): void;
}

/**
 * The sleep policy (`sleep.afterIdleS`, `sleep.command` in the host's config): a host that has had nothing to do for
 * that long says it goes to sleep — so the mesh records it `asleep`, not lost, and may wake it with a Wake-on-LAN
 * packet when work waits for it —, lets its models go, closes its link and runs its owner's sleep command. When the
 * command ends it links again.
 */
export class Sleeper {
  readonly #deps: SleeperDeps;
  #idleSince: number | null = null;
  #asleep = false;

  constructor(deps: SleeperDeps) {
    this.#deps = deps;
  }

  get asleep(): boolean {
    return this.#asleep;
  }

  /** Look (with the other policies' checks): asleep once idle for `afterIdleS`. */
  check(): void {
    if (this.#asleep) return;
    const now = this.#deps.clock.now();
    if (!this.#deps.idle()) {
      this.#idleSince = null;
      return;
    }
    this.#idleSince ??= now;
    const afterMs = this.#deps.policy.afterIdleS * 1000;
    if (now - this.#idleSince < afterMs) return;
    void this.#sleep({ state: 'asleep', reason: `asleep after ${this.#deps.policy.afterIdleS} s without work (sleep.afterIdleS)`, since: now, until: null });
  }

  async #sleep(away: HostAway): Promise<void> {
    this.#asleep = true;
    const { log } = this.#deps;
    try {
      log.info({ reason: away.reason }, 'going to sleep');
      await this.#deps.fallAsleep(away);
      await this.#deps.runCommand(this.#deps.policy.command);
      log.info('the sleep command ended: awake again');
    } catch (error) {
      log.warn({ err: error }, 'the sleep command failed; staying awake');
    } finally {
      this.#asleep = false;
      this.#idleSince = null;
      this.#deps.wake();
    }
  }
}
