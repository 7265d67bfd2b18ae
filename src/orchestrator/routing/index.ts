export { HostSession, type HostInfo, type InFlightBatch } from './host.js';
export { HostRegistry } from './hosts.js';
export { Router } from './router.js';
