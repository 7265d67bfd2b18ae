import type { Logger } from 'pino';
import { formatError } from '../../protocol/index.js';
import { EngineError } from '../core/engine.js';
import type { Clock, Timer } from '../../protocol/clock.js';
import { describeExit, exitError, type ExitReason } from './exit-reason.js';
import type { ManagedServer } from './managed-server.js';
import type { RestartPolicy } from '../../protocol/engines/process-settings.js';

/** The delay before restart number `failures` (1 for the first): exponential from initialDelayMs, capped at maxDelayMs. */
export function restartDelay(policy: RestartPolicy, failures: number): number {
  return Math.min(policy.maxDelayMs, policy.initialDelayMs * policy.factor ** Math.max(0, failures - 1));
}

export interface RestartingServerOptions {
  name: string;
  /** Start one instance (usually `() => startServer(governor, launch, log)`). An error here is not retried: it is a configuration problem. */
  launch: () => Promise<ManagedServer>;
  policy: RestartPolicy;
  clock: Clock;
  log: Logger;
  /** Told of each exit nobody asked for, with the delay before the restart, or null when it gave up. */
  onExit?: (reason: ExitReason, restartInMs: number | null) => void;
}

/**
 * Keeps a server up: started on the first `ready()`, restarted when it exits
 * on its own — after 1×, 2×, 4×… the initial delay, capped — until it has
 * failed `maxConsecutiveFailures` times in a row (a run that lasted
 * `stableAfterMs` starts the count again). Then it stops trying and the
 * waiting callers get the last error; the next `ready()` tries afresh. A
 * stop the agent asked for (stop(), idle) is not restarted.
 */
export class RestartingServer {
  readonly #options: RestartingServerOptions;
  #server: ManagedServer | null = null;
  #readyServer: ManagedServer | null = null;
  #waiters: { resolve(server: ManagedServer): void; reject(error: Error): void }[] = [];
  #wanted = false;
  #failures = 0;
  #restarts = 0;
  #timer: Timer | null = null;

  constructor(options: RestartingServerOptions) {
    this.#options = options;
  }

  /** The running instance once it is ready; starts it if nothing runs. Rejects when the keeper gives up or is stopped. */
  ready(): Promise<ManagedServer> {
    if (this.#readyServer) return Promise.resolve(this.#readyServer);
    const waiting = new Promise<ManagedServer>((resolve, reject) => this.#waiters.push({ resolve, reject }));
    if (!this.#wanted) {
      this.#wanted = true;
      this.#failures = 0;
      void this.#launch();
    }
    return waiting;
  }

  /** The current instance (ready or not), or null between runs. */
  get current(): ManagedServer | null {
    return this.#server;
  }

  /** Restarts so far. */
  get restarts(): number {
    return this.#restarts;
  }

  /** Failures in a row (reset by a stable run). */
  get consecutiveFailures(): number {
    return this.#failures;
  }

  /** Stop the instance and any pending restart; waiting callers get an error. */
  async stop(): Promise<void> {
    this.#wanted = false;
    this.#timer?.cancel();
    this.#timer = null;
    this.#rejectWaiters(new EngineError('ENGINE_FAILED', formatError('ENGINE_FAILED', { detail: `${this.#options.name} was stopped` })));
    const server = this.#server;
    if (server) await server.stop();
  }

  async #launch(): Promise<void> {
    this.#timer = null;
    let server: ManagedServer;
    try {
      server = await this.#options.launch();
    } catch (error) {
      this.#wanted = false;
      this.#options.log.error({ engine: this.#options.name, err: error }, 'the server cannot be started');
      this.#rejectWaiters(error as Error);
      return;
    }
    if (!this.#wanted) {
      await server.stop();
      return;
    }
    this.#server = server;
    const startedAt = this.#options.clock.now();
    server.ready.then(() => {
      if (this.#server !== server) return;
      this.#readyServer = server;
      for (const waiter of this.#waiters.splice(0)) waiter.resolve(server);
    }, () => { /* reported through exited */ });
    void server.exited.then((reason) => this.#onExit(server, reason, startedAt));
  }

  #onExit(server: ManagedServer, reason: ExitReason, startedAt: number): void {
    if (this.#server !== server) return;
    this.#server = null;
    this.#readyServer = null;
    const { policy, clock, log, name } = this.#options;
    if (!this.#wanted) return;
    if (reason.kind === 'stopped') {
      // An idle stop: scale to zero. Start again at once if someone is already waiting.
      this.#wanted = false;
      if (this.#waiters.length > 0) {
        this.#wanted = true;
        void this.#launch();
      }
      return;
    }
    if (clock.now() - startedAt >= policy.stableAfterMs) this.#failures = 0;
    this.#failures++;
    if (this.#failures >= policy.maxConsecutiveFailures) {
      this.#wanted = false;
      log.error({ engine: name, failures: this.#failures, kind: reason.kind }, `giving up on ${name} after ${this.#failures} failures in a row: ${reason.message}`);
      this.#options.onExit?.(reason, null);
      const error = exitError(reason);
      error.message = `${error.message} (gave up after ${this.#failures} failures in a row)`;
      this.#rejectWaiters(error);
      return;
    }
    const delay = restartDelay(policy, this.#failures);
    log.warn({ engine: name, failures: this.#failures, restartInMs: delay }, `${describeExit(reason)}; restarting in ${delay} ms`);
    this.#options.onExit?.(reason, delay);
    this.#timer = clock.setTimer(delay, () => {
      this.#restarts++;
      void this.#launch();
    });
  }

  #rejectWaiters(error: Error): void {
    for (const waiter of this.#waiters.splice(0)) waiter.reject(error);
  }
}
