export { JobLifecycle, promptOf, type LifecycleDeps } from './lifecycle.js';
export { JobService, canSee, encodeCursor, decodeCursor, DEFAULT_ALBUM, type ListQuery } from './service.js';
export { jobView, artifactView, blobUrl } from './views.js';
