export { HostSession, type HostInfo, type InFlightBatch } from './host.js';
export { HostRegistry } from './hosts.js';
export { Router, type RouterOptions } from './router.js';
