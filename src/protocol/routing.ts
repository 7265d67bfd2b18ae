/**
 * Why a routing decision passed a host over. The first nine, and `no replica`, are the reasons a
 * host cannot take the job; the rest name usable hosts that lost to a better
 * one (`failed this job`: an earlier attempt of this job failed there, and
 * another usable host was free). The order is part of the stored route log
 * (each reason is kept as its index), so new reasons are only ever appended.
 */
export const ROUTE_SKIP_REASONS = [
  'disconnected', 'draining', 'breaker open', 'unhealthy', 'class not granted', 'host not granted',
  'model too large', 'no free slot', 'engine missing', 'not resident', 'busier', 'not sampled', 'failed this job',
  // Other hosts hold replicas of the model (the autoscaler's) and this one has no ready one (none, still loading, or being unloaded).
  'no replica',
  // The host's own grant (its `models` caveat) does not allow it the model.
  'model not granted',
  // The host was meant to serve one of the job's classes and cannot (`video` without ffmpeg; its hello says why).
  'class unavailable',
  // The model is a command or a server, which runs only where the host's own config declares it, and this one does not.
  'not configured',
  // The host takes no work now: its owner is using it, it is outside its hours, or its GPUs are too hot (HostAway).
  'yielded', 'out of hours', 'too hot',
  // The host said it goes to sleep (its sleep policy) and is leaving.
  'asleep',
  // A workflow job: the host's owner did not let this model run clients' workflows there (ComfyUI's acceptWorkflows).
  'no workflows',
  // A workflow job: the host's ComfyUI lacks a node class or a model (a combo input's value) the workflow names.
  'missing nodes',
] as const;
export type RouteSkipReason = (typeof ROUTE_SKIP_REASONS)[number];

/** A circuit breaker's states (a host's own, or one replica's). */
export const BREAKER_STATES = ['closed', 'open', 'half-open'] as const;
export type BreakerState = (typeof BREAKER_STATES)[number];
