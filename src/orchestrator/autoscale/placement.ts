import type { RegisteredModel } from '../registry/index.js';
import type { HostSession } from '../routing/index.js';

/**
 * The order in which a model's replicas are placed on eligible hosts, best first: the class order of its routing list
 * (a fallback class only after the preferred ones), then a host where it is still resident (an unload on its way:
 * nothing to load), then one with its file cached (nothing to pull), then the fewest jobs in flight, then the smallest
 * budget that takes it (best fit: large hosts stay free for large models), then the host id, so that equal hosts are
 * chosen the same way every time. The autoscaler places its replicas in this order, and `gpumesh models load` its own.
 */
export function placementOrder(model: RegisteredModel, classes: readonly string[]): (a: HostSession, b: HostSession) => number {
  const { name, digest } = model.manifest;
  const classRank = (host: HostSession): number => classes.findIndex((klass) => host.info.classes.includes(klass));
  return (a, b) => classRank(a) - classRank(b)
    || Number(b.isResident(name)) - Number(a.isResident(name))
    || Number(b.cached.has(digest)) - Number(a.cached.has(digest))
    || a.jobsInFlight - b.jobsInFlight
    || a.largestBudgetMB - b.largestBudgetMB
    || a.id.localeCompare(b.id);
}
