export { HostSession, type HostInfo, type InFlightBatch } from './host.js';
export { Router } from './router.js';
