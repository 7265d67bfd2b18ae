import type { ArtifactTable } from './artifacts.js';
import type { AttemptTable } from './attempts.js';
import type { AuditTable } from './audit.js';
import type { BlobTable } from './blobs.js';
import type { ClientBlobTable } from './client-blobs.js';
import type { Commits } from './commits.js';
import type { GrantTable } from './grants.js';
import type { InputImageTable } from './input-images.js';
import type { PipelineTable } from './pipelines.js';
import type { JobTable } from './jobs.js';
import type { ModelTable } from './models.js';
import type { StagedUploadTable } from './staged-uploads.js';
import type { WebhookTable } from './webhooks.js';

/**
 * The orchestrator's store, whatever keeps it: SQLite in the data folder (`SqliteStore`, the default) or PostgreSQL
 * shared by several orchestrators (`PostgresStore`). The store is reached only through the job roles, `JobService`,
 * `GrantIssuer`, `AuditLog`, `ModelCatalog` and the blob services, never by routes. Each table (or two that live and
 * die together) is a namespace of methods, declared beside its records in a file of its own in this folder, and
 * written once per store in a file of the same name (sqlite/, postgres/).
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
export interface MeshStore extends MeshTables {
  /** `sqlite` or `postgres`, and where (a path, or a URL without its password): for logs and /v1/status. */
  readonly kind: 'sqlite' | 'postgres';
  readonly location: string;
  readonly commits: Commits;

  /** Whether the store takes writes now (false once closed, or while its database cannot be reached). */
  isOpen(): boolean;

  /** Commit what is pending and let go of the database. */
  close(): Promise<void>;
}

/** The store's tables, by the lifecycle each keeps: a job's, its attempts' and results', blobs', grants', models'. */
export interface MeshTables {
  readonly jobs: JobTable;
  readonly attempts: AttemptTable;
  readonly artifacts: ArtifactTable;
  readonly blobs: BlobTable;
  readonly grants: GrantTable;
  readonly audit: AuditTable;
  readonly clientBlobs: ClientBlobTable;
  readonly stagedUploads: StagedUploadTable;
  readonly inputImages: InputImageTable;
  readonly pipelines: PipelineTable;
  readonly models: ModelTable;
  readonly webhooks: WebhookTable;
}
