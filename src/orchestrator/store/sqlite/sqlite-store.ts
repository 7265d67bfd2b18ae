import { join } from 'node:path';
import * as artifacts from './artifacts.js';
import * as attempts from './attempts.js';
import * as audit from './audit.js';
import * as blobs from './blobs.js';
import { Checkpointer } from './checkpointer.js';
import * as clientBlobs from './client-blobs.js';
import { GroupCommit, openDb, type Db } from './db.js';
import * as grants from './grants.js';
import * as inputImages from './input-images.js';
import * as jobs from './jobs.js';
import type { MeshStore } from './mesh-store.js';
import * as models from './models.js';
import * as stagedUploads from './staged-uploads.js';

/**
 * The store in SQLite (`<data>/store.sqlite`, WAL): the embedded default, one orchestrator's own. Every query is one
 * of the query modules beside this file, run on the one connection; writes join the group commit's open transaction
 * at once, so their answers are SQLite's own, and reads see them before the commit.
 */
export class SqliteStore implements MeshStore {
  readonly kind = 'sqlite';
  readonly location: string;
  readonly db: Db;
  readonly commits: GroupCommit;
  readonly #checkpointer: Checkpointer | null;

  /** `path`: the database file, or ':memory:' (tests; no checkpointer). */
  constructor(path: string) {
    this.location = path;
    this.db = openDb(path);
    this.#checkpointer = path === ':memory:' ? null : Checkpointer.start(this.db, path);
    this.commits = new GroupCommit(this.db);
    const db = this.db;
    this.jobs = {
      insertJob: (job) => jobs.insertJob(db, job),
      releaseIdempotencyKey: (id) => jobs.releaseIdempotencyKey(db, id),
      markDispatched: (seqs, batchId, host, now, route) => jobs.markDispatched(db, seqs, batchId, host, now, route),
      markRunning: (seqs, now) => jobs.markRunning(db, seqs, now),
      requeueJob: (seq, now) => jobs.requeueJob(db, seq, now),
      finishJob: (seq, status, now, outcome) => jobs.finishJob(db, seq, status, now, outcome),
      getJob: async (id) => jobs.getJob(db, id),
      getJobByIdempotencyKey: async (grantId, key, since) => jobs.getJobByIdempotencyKey(db, grantId, key, since),
      idempotencyEntry: async (grantId, key, since) => jobs.idempotencyEntry(db, grantId, key, since),
      listJobs: async (filter) => jobs.listJobs(db, filter),
      jobsInStates: async (statuses) => jobs.jobsInStates(db, statuses),
      countByStatus: async () => jobs.countByStatus(db),
      prunableJobs: async (before, limit) => jobs.prunableJobs(db, before, limit),
      deleteJobs: (ids) => jobs.deleteJobs(db, ids),
    };
    this.attempts = {
      recordAttempt: (attempt, model) => attempts.recordAttempt(db, attempt, model),
      listAttempts: async (jobId, decodeRoute) => attempts.listAttempts(db, jobId, decodeRoute),
    };
    this.artifacts = {
      insertArtifact: (artifact) => artifacts.insertArtifact(db, artifact),
      deleteArtifactsOfJob: (jobId) => void artifacts.deleteArtifactsOfJob(db, jobId),
      artifactsOfJob: async (jobId) => artifacts.artifactsOfJob(db, jobId),
      listArtifacts: async (filter) => artifacts.listArtifacts(db, filter),
      digestPublishedIn: async (digest, scope) => artifacts.digestPublishedIn(db, digest, scope),
      albumsWithArtifacts: async () => artifacts.albumsWithArtifacts(db),
      digestPublished: async (digest) => artifacts.digestPublished(db, digest),
    };
    this.blobs = {
      recordBlob: (blob, now) => blobs.recordBlob(db, blob, now),
      recordUpload: (jobId, digest, now) => blobs.recordUpload(db, jobId, digest, now),
      getBlob: async (digest) => blobs.getBlob(db, digest),
      wasUploadedFor: async (jobId, digest) => blobs.wasUploadedFor(db, jobId, digest),
      forgetUploads: (jobId, digests) => blobs.forgetUploads(db, jobId, digests),
      blobNamed: async (digest) => blobs.blobNamed(db, digest),
      deleteBlob: (digest) => blobs.deleteBlob(db, digest),
      unnamedBlobs: async (after, limit) => blobs.unnamedBlobs(db, after, limit),
      blobTotals: async () => blobs.blobTotals(db),
    };
    this.grants = {
      recordGrant: (grant, now) => grants.recordGrant(db, grant, now),
      revokeGrant: (id, now) => grants.revokeGrant(db, id, now),
      getGrant: async (id) => grants.getGrant(db, id),
      revokedGrantIds: async () => grants.revokedGrantIds(db),
      listGrants: async (query) => grants.listGrants(db, query),
    };
    this.audit = {
      insertAudit: (entry) => audit.insertAudit(db, entry),
      pruneAudit: (before, keepRows) => void audit.pruneAudit(db, before, keepRows),
      listAudit: async (query) => audit.listAudit(db, query),
    };
    this.clientBlobs = {
      recordClientBlob: (digest, grantId, now) => clientBlobs.recordClientBlob(db, digest, grantId, now),
      storedBy: async (digest, grantId) => clientBlobs.storedBy(db, digest, grantId),
      forgetClientBlob: (digest, grantId) => clientBlobs.forgetClientBlob(db, digest, grantId),
    };
    this.stagedUploads = {
      insertStagedUpload: (upload) => stagedUploads.insertStagedUpload(db, upload),
      deleteStagedUpload: (id) => stagedUploads.deleteStagedUpload(db, id),
      getStagedUpload: async (id) => stagedUploads.getStagedUpload(db, id),
      countStagedUploads: async (grantId) => stagedUploads.countStagedUploads(db, grantId),
      stagedUploadsBefore: async (before) => stagedUploads.stagedUploadsBefore(db, before),
    };
    this.inputImages = {
      recordVerdict: (digest, verdict, now) => inputImages.recordVerdict(db, digest, verdict, now),
      recordJobInput: (digest, jobId) => inputImages.recordJobInput(db, digest, jobId),
      verdictOf: async (digest) => inputImages.verdictOf(db, digest),
      forgetVerdict: (digest) => inputImages.forgetVerdict(db, digest),
      inputOfJobOn: async (digest, hosts) => inputImages.inputOfJobOn(db, digest, hosts),
    };
    this.models = {
      insertModel: (model, record) => models.insertModel(db, model, record),
      deleteModel: (model, version) => models.deleteModel(db, model, version),
      setModelRoute: (route) => models.setModelRoute(db, route),
      deleteModelRoute: (name) => models.deleteModelRoute(db, name),
      listModels: async () => models.listModels(db),
      listModelRoutes: async () => models.listModelRoutes(db),
    };
  }

  /** The store of a data folder. */
  static inFolder(data: string): SqliteStore {
    return new SqliteStore(join(data, 'store.sqlite'));
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
  readonly models: MeshStore['models'];

  isOpen(): boolean {
    return this.db.open;
  }

  async close(): Promise<void> {
    this.commits.flush();
    await this.#checkpointer?.close();
    this.db.close();
  }
}
