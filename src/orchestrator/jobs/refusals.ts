import type { Logger } from 'pino';
import type { Clock } from '../../protocol/clock.js';
import type { EventBus } from '../events/event-bus.js';
import type { MeshMetrics } from '../metrics/mesh-metrics.js';

/** The job ids a refusal's log line and event name; the count says how many there were. */
const NAMED = 10;

export interface LinkRefusalsDeps {
  clock: Clock;
  events: EventBus;
  metrics: MeshMetrics;
  log: Logger;
}

/**
 * What a host said that was refused — reports about jobs it does not hold, models its grant does not allow — told
 * once per message however much it named: one log line, one `link:refused` event and the metric counted by the
 * number refused. One message then costs what it is worth: a frame naming 150,000 jobs it does not hold is one
 * line and one event, not 150,000 of each on every subscriber's stream.
 */
export class LinkRefusals {
  readonly #deps: LinkRefusalsDeps;
  readonly #listeners: ((session: string, count: number) => void)[] = [];

  constructor(deps: LinkRefusalsDeps) {
    this.#deps = deps;
  }

  /** Be told how much each link session had refused: the hub charges it to that link's budget. */
  onRefused(listener: (session: string, count: number) => void): void {
    this.#listeners.push(listener);
  }

  /** `what`: the message type (and why, where it is not "a job this host does not hold"); `ids`: what it named. */
  refuse(host: { id: string; session: string }, what: string, ids: readonly string[], why = 'about jobs this host does not hold'): void {
    if (ids.length === 0) return;
    const named = ids.slice(0, NAMED);
    this.#deps.log.warn({ host: host.id, session: host.session, message: what, count: ids.length, ids: named }, `refused ${ids.length} report${ids.length === 1 ? '' : 's'} ${why}`);
    this.#deps.metrics.reportRefused(host.id, what, ids.length);
    this.#deps.events.publishMesh({
      type: 'link:refused', host: host.id, what, count: ids.length, jobIds: named, jobId: named[0] ?? null, at: new Date(this.#deps.clock.now()).toISOString(),
    });
    for (const listener of this.#listeners) listener(host.session, ids.length);
  }
}
