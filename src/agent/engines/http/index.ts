/** What HTTP engines share. The endpoint seam (where the server is) is every server engine's: ../shared/endpoint.ts. */
export { frontedUrl } from '../shared/endpoint.js';
export type { EndpointProvider, ServerEndpoint } from '../shared/endpoint.js';
export { splitLines } from './lines.js';
export { request } from './client.js';
export type { HttpReply, HttpRequest } from './client.js';
export { errorForStatus, serverMessage, badReply } from './errors.js';
export type { RequestContext } from './errors.js';
export { pngFromBase64, checkedPng } from './png.js';
export { Backoff, sleep, retryAfterMs, workClock } from './timing.js';
export type { BackoffOptions } from './timing.js';
export { retryWhileBusy } from './busy.js';
export { JobBatch, JobStopped } from './batch.js';
export type { JobContext, RunOne, JobBatchOptions, StopReason } from './batch.js';
export { parseSettings } from '../shared/settings.js';
export { imageRequest, manifestParam } from './image-input.js';
export type { ImageRequest, RequestDefaults } from './image-input.js';
