export { Scheduler, type SchedulerDeps } from './scheduler.js';
export { ModelQueue, effectivePriority, compareJobs, type QueuedJob } from './queue.js';
export { releaseDecision, type BatchingPolicy, type ReleaseDecision } from './batcher.js';
export { Admission } from './admission.js';
export { MemoryEstimator, MemoryPlanner, type MemoryHost, type MemoryModel } from './memory.js';
