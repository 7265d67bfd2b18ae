import type { AttemptView, RouteView } from '../../protocol/api/index.js';
import type { JobStatus } from '../../protocol/index.js';
import type { ArtifactFilter, ArtifactRecord } from './artifacts.js';
import type { AuditFilter, AuditRecord, NewAuditRecord } from './audit.js';
import type { BlobRecord } from './blobs.js';
import type { EndedAttempt } from './attempts.js';
import type { GrantRecord } from './grants.js';
import type { ImageVerdict } from './input-images.js';
import type { JobFilter, JobRecord, NewJob, SucceededAttempt } from './jobs.js';
import type { ModelRecord, ModelRoute } from './models.js';
import type { StagedUploadRecord } from './staged-uploads.js';

/**
 * Group commit: every write made in one turn of the event loop joins one transaction, committed once. `write` runs a
 * function of writes inside it (a throw undoes only that function's writes); `durable` resolves once everything
 * written so far is committed — a 202 waits for it; `afterCommit` runs a function then (acknowledgements to agents).
 */
export interface Commits {
  write<T>(fn: () => T): T;
  /** `write` for a function of exactly one statement (a store may skip the savepoint). */
  writeOne<T>(fn: () => T): T;
  durable(): Promise<void>;
  afterCommit(fn: () => void): void;
  /** Commit what is pending now (shutdown). */
  flush(): void | Promise<void>;
}

/**
 * The orchestrator's store, whatever keeps it: SQLite in the data folder (`SqliteStore`, the default) or PostgreSQL
 * shared by several orchestrators (`PostgresStore`). The store is reached only through the job roles, the client
 * services (jobs/, gallery/), `GrantIssuer`, `AuditLog`, `ModelCatalog` and the blob services, never by routes.
 *
 * **Writes** are synchronous and run only inside `commits.write` (or `writeOne`): they join the turn's transaction.
 * SQLite runs them at once on its one connection; PostgreSQL queues them and sends the turn's writes as one
 * transaction when the turn ends. So a write's answer is the store's own only where the store can give it at once:
 * `markDispatched`, `requeueJob`, `finishJob` and `revokeGrant` are conditional updates whose answer a store that
 * writes behind gives from what it was asked (every job named is moved). Callers decide from the state they hold in
 * memory (the job roles keep every unfinished job there, and only the orchestrator that holds the mesh's lease
 * writes), and the conditions in the statements stay as a second line.
 *
 * **Reads** are asynchronous, and see every write made before them (PostgreSQL's wait for the pending commit).
 */
export interface MeshStore {
  /** `sqlite` or `postgres`, and where (a path, or a URL without its password): for logs and /v1/status. */
  readonly kind: 'sqlite' | 'postgres';
  readonly location: string;
  readonly commits: Commits;

  readonly jobs: {
    insertJob(job: NewJob): JobRecord;
    releaseIdempotencyKey(id: string): void;
    markDispatched(seqs: readonly number[], batchId: string, host: string, now: number, route?: string | null): Set<number>;
    markRunning(seqs: readonly number[], now: number): void;
    requeueJob(seq: number, now: number): boolean;
    finishJob(
      seq: number, status: 'succeeded' | 'failed' | 'cancelled' | 'expired', now: number,
      outcome?: { result?: unknown; errorCode?: string; errorMessage?: string; attempt?: SucceededAttempt },
    ): boolean;
    getJob(id: string): Promise<JobRecord | null>;
    getJobByIdempotencyKey(grantId: string, key: string, since: number): Promise<JobRecord | null>;
    idempotencyEntry(grantId: string, key: string, since: number): Promise<{ id: string; requestHash: string | null } | null>;
    listJobs(filter: JobFilter): Promise<JobRecord[]>;
    jobsInStates(statuses: readonly JobStatus[]): Promise<JobRecord[]>;
    countByStatus(): Promise<Record<string, number>>;
    /** Finished jobs no published result names, finished before `before`, oldest first; and the digests only their rows name. */
    prunableJobs(before: number, limit: number): Promise<{ ids: string[]; digests: string[] }>;
    deleteJobs(ids: readonly string[]): void;
  };
  readonly attempts: {
    recordAttempt(attempt: EndedAttempt, model: string): void;
    listAttempts(jobId: string, decodeRoute?: (text: string | null) => RouteView | null): Promise<AttemptView[]>;
  };
  readonly artifacts: {
    insertArtifact(artifact: Omit<ArtifactRecord, 'seq' | 'prompt'>): void;
    deleteArtifactsOfJob(jobId: string): void;
    artifactsOfJob(jobId: string): Promise<ArtifactRecord[]>;
    listArtifacts(filter: ArtifactFilter): Promise<ArtifactRecord[]>;
    digestPublishedIn(digest: string, scope: { albums: readonly string[] | null; types: readonly string[] | null; models: readonly string[] | null }): Promise<boolean>;
    albumsWithArtifacts(): Promise<string[]>;
    digestPublished(digest: string): Promise<boolean>;
  };
  readonly blobs: {
    recordBlob(blob: BlobRecord, now: number): void;
    recordUpload(jobId: string, digest: string, now: number): void;
    getBlob(digest: string): Promise<BlobRecord | null>;
    wasUploadedFor(jobId: string, digest: string): Promise<boolean>;
    forgetUploads(jobId: string, digests: readonly string[]): void;
    /** Whether a row names the blob: a published result, an upload for a job, a client's file, a job's input. */
    blobNamed(digest: string): Promise<boolean>;
    deleteBlob(digest: string): void;
    /** A page of blob records after `after` in digest order, with those no row names; `last`: the next page's `after`, null at the end. */
    unnamedBlobs(after: string | null, limit: number): Promise<{ unnamed: string[]; last: string | null }>;
    /** How many blobs are recorded, and their bytes. */
    blobTotals(): Promise<{ count: number; bytes: number }>;
  };
  readonly grants: {
    recordGrant(grant: { id: string; kind: string; note: string | null; caveats: readonly string[] }, now: number): void;
    revokeGrant(id: string, now: number): boolean;
    getGrant(id: string): Promise<GrantRecord | null>;
    revokedGrantIds(): Promise<string[]>;
    listGrants(query: { limit: number; before?: { createdAt: number; id: string } }): Promise<GrantRecord[]>;
  };
  readonly audit: {
    insertAudit(entry: NewAuditRecord): void;
    pruneAudit(before: number, keepRows: number): void;
    listAudit(query: { limit: number; beforeSeq?: number } & AuditFilter): Promise<AuditRecord[]>;
  };
  readonly clientBlobs: {
    recordClientBlob(digest: string, grantId: string, now: number): void;
    storedBy(digest: string, grantId: string): Promise<boolean>;
    forgetClientBlob(digest: string, grantId: string): void;
  };
  readonly stagedUploads: {
    insertStagedUpload(upload: StagedUploadRecord): void;
    deleteStagedUpload(id: string): void;
    getStagedUpload(id: string): Promise<StagedUploadRecord | null>;
    countStagedUploads(grantId: string): Promise<number>;
    stagedUploadsBefore(before: number): Promise<StagedUploadRecord[]>;
  };
  readonly inputImages: {
    recordVerdict(digest: string, verdict: ImageVerdict, now: number): void;
    recordJobInput(digest: string, jobId: string): void;
    verdictOf(digest: string): Promise<ImageVerdict | undefined>;
    forgetVerdict(digest: string): void;
    inputOfJobOn(digest: string, hosts: readonly string[] | null): Promise<boolean>;
  };
  readonly models: {
    insertModel(model: string, record: ModelRecord): void;
    deleteModel(model: string, version: string): void;
    setModelRoute(route: ModelRoute): void;
    deleteModelRoute(name: string): void;
    listModels(): Promise<{ model: string; record: ModelRecord }[]>;
    listModelRoutes(): Promise<ModelRoute[]>;
  };

  /** Whether the store takes writes now (false once closed, or while its database cannot be reached). */
  isOpen(): boolean;

  /** Commit what is pending and let go of the database. */
  close(): Promise<void>;
}
