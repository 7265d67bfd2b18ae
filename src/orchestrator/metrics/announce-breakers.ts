import type { Logger } from 'pino';
import type { Clock } from '../../protocol/clock.js';
import type { EventBus } from '../events/event-bus.js';
import type { MeshMetrics } from './mesh-metrics.js';
import type { BreakerBoard } from '../routing/breakers.js';

/**
 * Make breaker changes visible: each one is a mesh event on `/v1/events`
 * (`breaker:opened`, `breaker:half-open`, `breaker:closed`), a log line and a
 * count in `gpumesh_breaker_transitions_total`.
 */
export function announceBreakers(deps: { breakers: BreakerBoard; events: EventBus; metrics: MeshMetrics; log: Logger; clock: Clock }): void {
  const { breakers, events, metrics, log, clock } = deps;
  breakers.onChange((change) => {
    const at = new Date(clock.now()).toISOString();
    const { host, model } = change;
    metrics.breakerChanged(host, model, change.to);
    const scope = model === null ? `host ${host}` : `${host}/${model}`;
    if (change.to === 'open') {
      log.warn({ host, model, reason: change.reason, openForMs: change.openForMs }, `breaker of ${scope} opened`);
      events.publishMesh({ type: 'breaker:opened', host, model, reason: change.reason ?? 'failures', openForMs: change.openForMs ?? 0, at });
    } else if (change.to === 'half-open') {
      log.info({ host, model }, `breaker of ${scope} half-open: a probe is its trial`);
      events.publishMesh({ type: 'breaker:half-open', host, model, at });
    } else {
      log.info({ host, model }, `breaker of ${scope} closed`);
      events.publishMesh({ type: 'breaker:closed', host, model, at });
    }
  });
}
