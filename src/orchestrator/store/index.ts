// The store as the rest of the orchestrator reaches it: the contract (what any store answers), and the SQLite store,
// the default. The PostgreSQL store is loaded only where a mesh.yaml names it, from postgres/index.ts.
export type { MeshStore, MeshTables } from './contract/mesh-store.js';
export type { Commits } from './contract/commits.js';
export type { Migration } from './contract/migration.js';
export { encodeCursor, decodeCursor } from './contract/cursors.js';
export type { JobCaps, JobEnd, JobRecord, NewJob, JobFilter, SucceededAttempt } from './contract/jobs.js';
export type { ArtifactRecord, ArtifactFilter } from './contract/artifacts.js';
export type { EndedAttempt } from './contract/attempts.js';
export type { BlobRecord } from './contract/blobs.js';
export type { GrantRecord } from './contract/grants.js';
export type { AuditFilter, AuditRecord, NewAuditRecord } from './contract/audit.js';
export type { DeliveryRecord, DeliveryStatus, DeliveryTry } from './contract/webhooks.js';
export type { StagedUploadRecord } from './contract/staged-uploads.js';
export type { ModelRecord, ModelRoute } from './contract/models.js';
export type { ImageVerdict } from './contract/input-images.js';
export type { PipelineRecord } from './contract/pipelines.js';
export type { MeshLease, Fence, LeaseHolder, OrchestratorRow } from './contract/mesh-lease.js';

export { SqliteStore } from './sqlite/sqlite-store.js';
export { openDb, migrate, type Db } from './sqlite/db.js';
export { GroupCommit, UNWAITED_COMMIT_MS } from './sqlite/group-commit.js';
export { Checkpointer } from './sqlite/checkpointer.js';
export { MIGRATIONS } from './sqlite/migrations.js';
// SQLite's queries table by table, as functions of a connection (tests and benchmarks call them directly).
export * as jobs from './sqlite/jobs.js';
export * as attempts from './sqlite/attempts.js';
export * as artifacts from './sqlite/artifacts.js';
export * as blobs from './sqlite/blobs.js';
export * as grants from './sqlite/grants.js';
export * as audit from './sqlite/audit.js';
export * as clientBlobs from './sqlite/client-blobs.js';
export * as stagedUploads from './sqlite/staged-uploads.js';
export * as inputImages from './sqlite/input-images.js';
export * as pipelines from './sqlite/pipelines.js';
export * as storedModels from './sqlite/models.js';
