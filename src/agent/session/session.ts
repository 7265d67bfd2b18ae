import { LINK_PROTOCOL_VERSION, type AgentMessage } from '../../protocol/index.js';
import { every, type Clock } from '../../protocol/clock.js';
import { VERSION } from '../../version.js';
import type { Result } from '../batches/batch-runner.js';

type Hello = Extract<AgentMessage, { type: 'hello' }>;
type Heartbeat = Extract<AgentMessage, { type: 'heartbeat' }>;

/** What the hello says of the host itself: everything but the protocol, the version and the work it holds. */
export type HostDescription = Omit<Hello, 'type' | 'protocol' | 'version' | 'inFlight' | 'draining'>;

export interface SessionDeps {
  /** Send over the link; false when it is down (nothing is queued: what must arrive is sent again after the next welcome). */
  send(message: AgentMessage): boolean;
  /** For the heartbeat (a fake in tests). */
  clock: Clock;
  /** The host as its hello describes it, read fresh for each connection. */
  describe(): HostDescription;
  /** The jobs of the batches running now. */
  running(): { jobId: string; batchId: string }[];
  draining(): boolean;
  /** What a heartbeat carries: the models resident and the devices' use. */
  beat(): Omit<Heartbeat, 'type'>;
  /** Results were acknowledged or given up: the work held shrank (a drain may be done). */
  settled(): void;
}

/**
 * The agent's side of one session with the orchestrator, across connections: the hello each connection starts with,
 * the heartbeat while linked, and the results not acknowledged yet — kept, listed in every hello and sent again
 * after every welcome (the orchestrator ignores duplicates), so a restart of either side loses no finished work.
 */
export class Session {
  readonly #deps: SessionDeps;
  readonly #unacknowledged = new Map<string, Result>();
  #stopHeartbeat: (() => void) | null = null;

  constructor(deps: SessionDeps) {
    this.#deps = deps;
  }

  /** Results the orchestrator has not acknowledged yet. */
  get unacknowledged(): number {
    return this.#unacknowledged.size;
  }

  /** Built fresh for each connection, so it carries the work in flight right now. */
  hello(): Hello {
    return {
      type: 'hello', protocol: LINK_PROTOCOL_VERSION, version: VERSION, ...this.#deps.describe(),
      // What this host still holds: batches running, and results not acknowledged (they arrive again after welcome).
      inFlight: [
        ...this.#deps.running(),
        ...[...this.#unacknowledged.values()].map((result) => ({ jobId: result.jobId, batchId: result.batchId })),
      ],
      draining: this.#deps.draining(),
    };
  }

  /** A job's result: sent now if the link is up, and kept until the orchestrator acknowledges it. */
  report(result: Result): void {
    this.#unacknowledged.set(result.jobId, result);
    this.#deps.send(result);
  }

  acknowledged(jobIds: readonly string[]): void {
    for (const jobId of jobIds) this.#unacknowledged.delete(jobId);
    this.#deps.settled();
  }

  /** The orchestrator cancelled the job: a result it will not take (the job moved on or ended) is not worth sending again. */
  forget(jobId: string): void {
    this.#unacknowledged.delete(jobId);
    this.#deps.settled();
  }

  /** Welcomed: send the results the previous connection may not have delivered, and beat every `heartbeatMs`. */
  welcomed(heartbeatMs: number): void {
    for (const result of this.#unacknowledged.values()) this.#deps.send(result);
    this.#stopHeartbeat?.();
    this.#stopHeartbeat = every(this.#deps.clock, heartbeatMs, () => this.beat());
  }

  /** A heartbeat now, out of turn (a batch raised a model's memory figure: the mesh should not wait for the next beat). */
  beat(): void {
    this.#deps.send({ type: 'heartbeat', ...this.#deps.beat() });
  }

  /** The link went down (or the agent is closing): no beats until the next welcome. */
  disconnected(): void {
    this.#stopHeartbeat?.();
    this.#stopHeartbeat = null;
  }
}
