export { openDb, migrate, GroupCommit, type Db } from './db.js';
export { MIGRATIONS, type Migration } from './migrations.js';
export * as jobs from './jobs.js';
export * as attempts from './attempts.js';
export * as artifacts from './artifacts.js';
export * as blobs from './blobs.js';
export * as grants from './grants.js';
export type { JobRecord, NewJob } from './jobs.js';
export type { ArtifactRecord } from './artifacts.js';
