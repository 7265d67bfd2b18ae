import type { Logger } from 'pino';
import pg from 'pg';
import { MeshError } from '../../../protocol/index.js';
import { workClock, type Clock } from '../../../protocol/clock.js';
import type { Fence } from '../contract/mesh-lease.js';
import type { MeshStore } from '../contract/mesh-store.js';
import type { PgAccess } from './access.js';
import { artifactTable } from './artifacts.js';
import { attemptTable } from './attempts.js';
import { auditTable } from './audit.js';
import { blobTable } from './blobs.js';
import { clientBlobTable } from './client-blobs.js';
import { grantTable } from './grants.js';
import { inputImageTable } from './input-images.js';
import { pipelineTable } from './pipelines.js';
import { jobTable } from './jobs.js';
import { migratePostgres } from './migrate.js';
import { modelTable } from './models.js';
import { FencedError, PgCommits } from './pg-commits.js';
import { stagedUploadTable } from './staged-uploads.js';
import { webhookTable } from './webhooks.js';

/** Job numbers reserved at a time: the orchestrator must know a job's number when it admits it (see migrations.ts). */
const SEQ_BLOCK = 4096;

/** BIGINT columns (times in ms, sizes) read as numbers: every one of them fits a double exactly. */
const TYPES = {
  getTypeParser: ((oid: number, format?: string) => (oid === 20 ? (text: string) => Number(text) : pg.types.getTypeParser(oid, format as 'text'))) as typeof pg.types.getTypeParser,
};

export interface PostgresStoreOptions {
  /** postgres://user:password@host:port/database */
  url: string;
  log: Logger;
  /** Connections in the pool. Default 10. */
  poolSize?: number;
  /** The lease's fence every transaction checks (null: none). */
  fence?: () => Fence | null;
  /** The lease was lost: this orchestrator must stop writing. */
  onFenced?: (error: FencedError) => void;
  /**
   * When migrations are recorded as applied, and the waits before a commit the database did not take is tried again.
   * Default: workClock, whose timers keep the process alive — writes waiting for the database are work in progress,
   * which a shutdown while it is away must not drop by exiting under them.
   */
  clock?: Clock;
}

/**
 * The store in PostgreSQL, shared by every orchestrator of a mesh (docs/operations.md, *Scaling out*). The same tables
 * and rows as SQLite's (test/architecture/schema-agreement.test.ts), and the same answers: the conformance suite
 * (test/orchestrator/store/store-conformance.test.ts) runs one set of tests against both. Each table's queries are a module
 * beside this file. Writes go behind, through `PgCommits`: a turn's writes are one transaction, fenced by the mesh
 * lease; reads wait for the writes before them, so a reader sees what it wrote.
 */
export class PostgresStore implements MeshStore {
  readonly kind = 'postgres';
  readonly location: string;
  readonly pool: pg.Pool;
  readonly commits: PgCommits;
  readonly #log: Logger;
  readonly #clock: Clock;
  #seqs = { next: 0, end: 0 };
  #refill: Promise<void> | null = null;
  #closed = false;
  #downDetail: string | null = null;

  private constructor(options: PostgresStoreOptions) {
    this.location = redacted(options.url);
    this.#log = options.log;
    const connection = { connectionString: options.url, types: TYPES, connectionTimeoutMillis: 5000 };
    this.pool = new pg.Pool({ ...connection, max: options.poolSize ?? 10 });
    // An idle connection the server dropped (a restart) is an error event on the pool; the next query takes another.
    this.pool.on('error', (error) => this.#log.warn({ err: error }, 'a PostgreSQL connection was lost'));
    this.#clock = options.clock ?? workClock;
    this.commits = new PgCommits({
      pool: this.pool, connection, log: options.log, clock: this.#clock, fence: options.fence ?? (() => null),
      onFenced: options.onFenced ?? ((error) => this.#log.error({ err: error }, 'fenced')),
      onAvailability: (down, detail) => {
        this.#downDetail = down ? detail : null;
        if (down) this.#log.error({ detail }, 'PostgreSQL does not answer: writes wait, new jobs are refused with 503');
        else this.#log.info('PostgreSQL answers again: the writes that waited are committed');
      },
    });
    const access: PgAccess = {
      write: (text, values, rows) => this.commits.statement(text, values, rows),
      read: (text, values = []) => this.#query(text, values),
    };
    this.jobs = jobTable(access, () => this.#nextSeq());
    this.attempts = attemptTable(access);
    this.artifacts = artifactTable(access);
    this.blobs = blobTable(access);
    this.grants = grantTable(access);
    this.audit = auditTable(access);
    this.clientBlobs = clientBlobTable(access);
    this.stagedUploads = stagedUploadTable(access);
    this.inputImages = inputImageTable(access);
    this.pipelines = pipelineTable(access);
    this.models = modelTable(access);
    this.webhooks = webhookTable(access);
  }

  /**
   * Connect, bring the schema up to date (once, whichever orchestrator comes first: under an advisory lock) and
   * reserve the first block of job numbers. A database that cannot be reached is a STORE_UNAVAILABLE naming it.
   */
  static async open(options: PostgresStoreOptions): Promise<PostgresStore> {
    const store = new PostgresStore(options);
    try {
      await migratePostgres(store.pool, store.#clock);
      await store.#reserve();
    } catch (error) {
      await store.pool.end().catch(() => {});
      if (error instanceof MeshError) throw error;
      throw new MeshError('STORE_UNAVAILABLE', { store: store.location, detail: (error as Error).message, retryAfter: 5 }, { cause: error });
    }
    return store;
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
    return !this.#closed && this.#downDetail === null;
  }

  /** Why writes cannot be taken now (the database does not answer), or null. */
  get unavailable(): string | null {
    return this.#closed ? 'the store is closed' : this.#downDetail;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.commits.flush().catch(() => {});
    await this.commits.end();
    await this.pool.end();
  }

  /** A read: after the writes made before it are committed, so it sees them. */
  async #query<T>(text: string, values: unknown[]): Promise<T[]> {
    await this.commits.durable().catch(() => {});
    try {
      return (await this.pool.query(text, values)).rows as T[];
    } catch (error) {
      throw new MeshError('STORE_UNAVAILABLE', { store: this.location, detail: (error as Error).message, retryAfter: 2 }, { cause: error });
    }
  }

  /** The next job number: from the block in use, then the spare one; a new spare is reserved once half is used. */
  #nextSeq(): number {
    if (this.#seqs.next >= this.#seqs.end && this.#spare !== null) {
      this.#seqs = { next: this.#spare, end: this.#spare + SEQ_BLOCK };
      this.#spare = null;
    }
    if (this.#spare === null && !this.#refill && this.#seqs.end - this.#seqs.next < SEQ_BLOCK / 2) {
      this.#refill = this.#reserve()
        .catch((error: unknown) => this.#log.warn({ err: error }, 'could not reserve job numbers; trying again at the next job'))
        .finally(() => (this.#refill = null));
    }
    if (this.#seqs.next >= this.#seqs.end) {
      throw new MeshError('STORE_UNAVAILABLE', { store: this.location, detail: 'no job numbers are reserved (the database did not answer)', retryAfter: 2 });
    }
    return this.#seqs.next++;
  }

  /** Reserve a block of job numbers as the spare (blocks only grow: a later orchestrator's jobs sort after). */
  async #reserve(): Promise<void> {
    const { rows } = await this.pool.query<{ block: number }>("SELECT nextval('job_seq_blocks') AS block");
    this.#spare = rows[0]!.block * SEQ_BLOCK;
  }

  #spare: number | null = null;
}

/** A connection URL without its password, for logs and /v1/status. */
export function redacted(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return 'postgres (an unparsable URL)';
  }
}
