export { Scheduler, type SchedulerDeps, type Release, type PickHost } from './scheduler.js';
export { ModelQueue, effectivePriority, compareJobs, type QueuedJob } from './queue.js';
export { releaseDecision, type BatchingPolicy, type ReleaseDecision } from './batcher.js';
export { Admission } from './admission.js';
export { GrantRateLimiter } from './rates.js';
