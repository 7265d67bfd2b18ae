import { join } from 'node:path';
import { systemClock, type Clock } from '../../../protocol/clock.js';
import type { MeshStore } from '../contract/mesh-store.js';
import { artifactTable } from './artifacts.js';
import { attemptTable } from './attempts.js';
import { auditTable } from './audit.js';
import { blobTable } from './blobs.js';
import { Checkpointer } from './checkpointer.js';
import { clientBlobTable } from './client-blobs.js';
import { openDb, type Db } from './db.js';
import { grantTable } from './grants.js';
import { GroupCommit } from './group-commit.js';
import { inputImageTable } from './input-images.js';
import { pipelineTable } from './pipelines.js';
import { jobTable } from './jobs.js';
import { modelTable } from './models.js';
import { stagedUploadTable } from './staged-uploads.js';
import { webhookTable } from './webhooks.js';

/**
 * The store in SQLite (`<data>/store.sqlite`, WAL): the embedded default, one orchestrator's own. Every query is one
 * of the table modules beside this file, run on the one connection; writes join the group commit's open transaction
 * at once, so their answers are SQLite's own, and reads see them before the commit.
 */
export class SqliteStore implements MeshStore {
  readonly kind = 'sqlite';
  readonly location: string;
  readonly db: Db;
  readonly commits: GroupCommit;
  readonly #checkpointer: Checkpointer | null;

  /** `path`: the database file, or ':memory:' (tests; no checkpointer). `clock`: when migrations are recorded as applied. */
  constructor(path: string, clock: Clock = systemClock) {
    this.location = path;
    this.db = openDb(path, clock);
    this.#checkpointer = path === ':memory:' ? null : Checkpointer.start(this.db, path);
    this.commits = new GroupCommit(this.db);
    this.jobs = jobTable(this.db);
    this.attempts = attemptTable(this.db);
    this.artifacts = artifactTable(this.db);
    this.blobs = blobTable(this.db);
    this.grants = grantTable(this.db);
    this.audit = auditTable(this.db);
    this.clientBlobs = clientBlobTable(this.db);
    this.stagedUploads = stagedUploadTable(this.db);
    this.inputImages = inputImageTable(this.db);
    this.pipelines = pipelineTable(this.db);
    this.models = modelTable(this.db);
    this.webhooks = webhookTable(this.db);
  }

  /** The store of a data folder. */
  static inFolder(data: string, clock: Clock = systemClock): SqliteStore {
    return new SqliteStore(join(data, 'store.sqlite'), clock);
  }

  readonly jobs: MeshStore['jobs'];
  readonly attempts: MeshStore['attempts'];
  readonly artifacts: MeshStore['artifacts'];
  readonly blobs: MeshStore['blobs'];
  readonly grants: MeshStore['grants'];
  readonly audit: MeshStore['audit'];
  readonly clientBlobs: MeshStore['clientBlobs'];
  readonly stagedUploads: MeshStore['stagedUploads'];
  readonly inputImages: MeshStore['inputImages'];
  readonly pipelines: MeshStore['pipelines'];
  readonly models: MeshStore['models'];
  readonly webhooks: MeshStore['webhooks'];

  isOpen(): boolean {
    return this.db.open;
  }

  async close(): Promise<void> {
    this.commits.flush();
    await this.#checkpointer?.close();
    this.db.close();
  }
}
