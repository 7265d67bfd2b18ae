export { Scheduler, type SchedulerDeps, type Release, type PickHost } from './scheduler.js';
export { ModelQueue, effectivePriority, compareRanks, type QueuedJob, type Rank } from './queue.js';
export { releaseDecision, worthWaiting, type BatchingPolicy, type ReleaseDecision } from './batcher.js';
export { ArrivalRate } from './arrivals.js';
export { Admission } from './admission.js';
export { GrantRateLimiter } from './rates.js';
export { MemoryEstimator, MemoryPlanner, type MemoryHost, type MemoryModel } from './memory.js';
export { SwapPolicy, displacedBy, type SwapPolicyName, type SwapPolicyOptions, type SwapHold, type ReadyModels } from './swap-policy.js';
export { LineageCaps, type LineageCapsDeps, type CapUse } from './caps.js';
