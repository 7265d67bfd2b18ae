export interface BatchingPolicy {
  maxBatchSize: number;
  preferredBatchSizes: readonly number[];
  maxQueueDelayMs: number;
}

export type ReleaseDecision =
  | { release: true; size: number; reason: 'max' | 'preferred' | 'delay' }
  | { release: false; wakeAt: number };

/**
 * When a group of compatible jobs becomes a batch (the rule documented in
 * docs/architecture.md): at `maxBatchSize`; else at the largest preferred size
 * the group has reached; else once its oldest job has waited `maxQueueDelayMs`,
 * with whatever is there. Otherwise wait until that moment.
 */
export function releaseDecision(size: number, oldestAt: number, now: number, policy: BatchingPolicy): ReleaseDecision {
  if (size >= policy.maxBatchSize) return { release: true, size: policy.maxBatchSize, reason: 'max' };
  let preferred = 0;
  for (const candidate of policy.preferredBatchSizes) {
    if (candidate <= size && candidate <= policy.maxBatchSize && candidate > preferred) preferred = candidate;
  }
  if (preferred > 0) return { release: true, size: preferred, reason: 'preferred' };
  const wakeAt = oldestAt + policy.maxQueueDelayMs;
  if (now >= wakeAt) return { release: true, size, reason: 'delay' };
  return { release: false, wakeAt };
}

/**
 * Work conservation: when a group is not ready by the rule above but a
 * replica is idle, is it still worth holding it back for company? Only if the
 * jobs arriving now will, by the time the delay runs out, bring it to the next
 * batch size worth having (the smallest preferred size above it, else the
 * maximum). A lone job on an idle replica with nothing arriving leaves at once.
 */
export function worthWaiting(size: number, policy: BatchingPolicy, expectedArrivals: number): boolean {
  const next = [...policy.preferredBatchSizes, policy.maxBatchSize].filter((candidate) => candidate > size && candidate <= policy.maxBatchSize);
  const target = next.length > 0 ? Math.min(...next) : policy.maxBatchSize;
  return size + expectedArrivals >= target;
}
