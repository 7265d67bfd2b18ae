// The PostgreSQL store's public entry, loaded only where a mesh.yaml names it (pg stays unloaded otherwise): the store,
// and the mesh lease orchestrators sharing it take turns by (standby/).
export { PostgresStore, type PostgresStoreOptions } from './postgres-store.js';
export { FencedError } from './pg-commits.js';
export { openMeshLease, type MeshLeaseOptions } from './mesh-lease.js';
