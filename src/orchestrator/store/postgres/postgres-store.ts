import type { Logger } from 'pino';
import pg from 'pg';
import { MeshError } from '../../../protocol/index.js';
import { artifactFromRow, type ArtifactRow } from '../artifacts.js';
import { attemptFromRow, type AttemptRow } from '../attempts.js';
import { auditFromRow, type AuditRow } from '../audit.js';
import { grantFromRow, type GrantRow } from '../grants.js';
import { jobFromRow, queuedRecord, type JobRow } from '../jobs.js';
import type { MeshStore } from '../mesh-store.js';
import type { ModelManifest } from '../../../protocol/index.js';
import { migratePostgres } from './migrate.js';
import { FencedError, PgCommits, type Fence } from './pg-commits.js';

/** Job numbers reserved at a time: the orchestrator must know a job's number when it admits it (see schema.ts). */
const SEQ_BLOCK = 4096;

/** The prompt of a job row aliased `j`, in SQL (jobs.PROMPT_SQL in SQLite's words). */
const PROMPT_SQL = `(CASE WHEN jsonb_typeof(j.input::jsonb -> 'prompt') = 'string' THEN j.input::jsonb ->> 'prompt' END)`;
const ARTIFACTS = `SELECT a.*, ${PROMPT_SQL} AS prompt FROM artifacts a JOIN jobs j ON j.id = a.job_id`;

/** Jobs finished with their attempt, many at once: the rows of finishJob's statement, in its parameters' order. */
const SUCCEEDED_ROWS = {
  key: 'jobs:succeeded',
  types: ['bigint', 'text', 'bigint', 'text', 'text', 'bigint', 'double precision', 'double precision'],
  sql: (tuples: string): string => `UPDATE jobs SET status = v.status, finished_at = v.now, updated_at = v.now, lease_host = NULL, result = v.result,
      error_code = NULL, error_message = NULL, attempt_host = v.host, started_at = v.started_at, load_ms = v.load_ms, compute_ms = v.compute_ms
    FROM (VALUES ${tuples}) AS v (seq, status, now, result, host, started_at, load_ms, compute_ms)
    WHERE jobs.seq = v.seq AND jobs.status IN ('queued', 'dispatched', 'running')`,
} as const;

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
}

/** `$1, $2, …` from `start`. */
const marks = (count: number, start = 1): string => Array.from({ length: count }, (_, i) => `$${start + i}`).join(', ');

/**
 * The store in PostgreSQL, shared by every orchestrator of a mesh (docs/operations.md, *Scaling out*). The same tables
 * and rows as SQLite's, and the same answers: the conformance suite (test/store/store-conformance.test.ts) runs one
 * set of tests against both. Writes go behind, through `PgCommits`: a turn's writes are one transaction, fenced by the
 * mesh lease; reads wait for the writes before them, so a reader sees what it wrote.
 */
export class PostgresStore implements MeshStore {
  readonly kind = 'postgres';
  readonly location: string;
  readonly pool: pg.Pool;
  readonly commits: PgCommits;
  readonly #log: Logger;
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
    this.commits = new PgCommits({
      pool: this.pool, connection, log: options.log, fence: options.fence ?? (() => null),
      onFenced: options.onFenced ?? ((error) => this.#log.error({ err: error }, 'fenced')),
      onAvailability: (down, detail) => {
        this.#downDetail = down ? detail : null;
        if (down) this.#log.error({ detail }, 'PostgreSQL does not answer: writes wait, new jobs are refused with 503');
        else this.#log.info('PostgreSQL answers again: the writes that waited are committed');
      },
    });
    const statement = (text: string, values: unknown[], rows?: Parameters<PgCommits['statement']>[2]): void => this.commits.statement(text, values, rows);
    const query = <T>(text: string, values: unknown[] = []): Promise<T[]> => this.#query<T>(text, values);

    this.jobs = {
      insertJob: (job) => {
        const seq = this.#nextSeq();
        const hosts = job.hosts ?? null;
        // Every value a parameter (none twice, no literal): a turn's inserts are sent as one (pg-commits.ts, coalesced).
        statement(`INSERT INTO jobs (seq, id, type, model, status, priority, album, classes, hosts, input, grant_id, idempotency_key,
            request_hash, created_at, updated_at, deadline_at) VALUES (${marks(16)})`, [
          seq, job.id, job.type, job.model, 'queued', job.priority, job.album, JSON.stringify(job.classes), hosts === null ? null : JSON.stringify(hosts),
          JSON.stringify(job.input), job.grantId, job.idempotencyKey, job.requestHash ?? null, job.createdAt, job.createdAt, job.deadlineAt,
        ]);
        return queuedRecord(job, seq);
      },
      releaseIdempotencyKey: (id) => statement('UPDATE jobs SET idempotency_key = NULL WHERE id = $1', [id]),
      markDispatched: (seqs, batchId, host, now, route = null) => {
        statement(`UPDATE jobs SET status = 'dispatched', attempts = attempts + 1, batch_id = $1, batch_size = $2, lease_host = $3,
          dispatched_at = $4, started_at = NULL, route = $5, updated_at = $4 WHERE seq = ANY($6) AND status = 'queued'`, [batchId, seqs.length, host, now, route, seqs]);
        return new Set(seqs);
      },
      markRunning: (seqs, now) => statement(`UPDATE jobs SET status = 'running', started_at = $1, updated_at = $1 WHERE seq = ANY($2) AND status = 'dispatched'`, [now, seqs]),
      requeueJob: (seq, now) => {
        statement(`UPDATE jobs SET status = 'queued', lease_host = NULL, updated_at = $1 WHERE seq = $2 AND status IN ('dispatched', 'running')`, [now, seq]);
        return true;
      },
      finishJob: (seq, status, now, outcome = {}) => {
        const result = outcome.result === undefined ? null : JSON.stringify(outcome.result);
        const { attempt } = outcome;
        if (attempt) {
          // A turn's successes (a batch's jobs) are one UPDATE of many rows (pg-commits.ts, coalesced).
          statement(`UPDATE jobs SET status = $2, finished_at = $3, updated_at = $3, lease_host = NULL, result = $4, error_code = NULL,
              error_message = NULL, attempt_host = $5, started_at = $6, load_ms = $7, compute_ms = $8
            WHERE seq = $1 AND status IN ('queued', 'dispatched', 'running')`, [seq, status, now, result, attempt.host, attempt.startedAt, attempt.loadMs, attempt.computeMs], SUCCEEDED_ROWS);
        } else {
          statement(`UPDATE jobs SET status = $1, finished_at = $2, updated_at = $2, lease_host = NULL, result = $3, error_code = $4, error_message = $5
            WHERE seq = $6 AND status IN ('queued', 'dispatched', 'running')`, [status, now, result, outcome.errorCode ?? null, outcome.errorMessage ?? null, seq]);
        }
        return true;
      },
      getJob: async (id) => (await query<JobRow>('SELECT * FROM jobs WHERE id = $1', [id])).map(jobFromRow)[0] ?? null,
      getJobByIdempotencyKey: async (grantId, key, since) =>
        (await query<JobRow>('SELECT * FROM jobs WHERE grant_id = $1 AND idempotency_key = $2 AND created_at >= $3', [grantId, key, since])).map(jobFromRow)[0] ?? null,
      idempotencyEntry: async (grantId, key, since) => {
        const [row] = await query<{ id: string; request_hash: string | null }>(
          'SELECT id, request_hash FROM jobs WHERE grant_id = $1 AND idempotency_key = $2 AND created_at >= $3', [grantId, key, since]);
        return row ? { id: row.id, requestHash: row.request_hash } : null;
      },
      listJobs: async (filter) => {
        const where = new Where();
        where.in('status', filter.statuses);
        where.in('type', filter.types);
        if (filter.models?.length) where.models('model', filter.models);
        else where.in('model', filter.models);
        where.in('album', filter.albums);
        if (filter.beforeSeq !== undefined) where.add('seq < ?', filter.beforeSeq);
        return (await query<JobRow>(`SELECT * FROM jobs ${where.sql()} ORDER BY seq DESC LIMIT ${where.next()}`, [...where.values, filter.limit])).map(jobFromRow);
      },
      jobsInStates: async (statuses) => (await query<JobRow>('SELECT * FROM jobs WHERE status = ANY($1) ORDER BY seq', [statuses])).map(jobFromRow),
      countByStatus: async () => Object.fromEntries((await query<{ status: string; n: number }>('SELECT status, COUNT(*) AS n FROM jobs GROUP BY status')).map((row) => [row.status, row.n])),
      prunableJobs: async (before, limit) => {
        const ids = (await query<{ id: string }>(`SELECT id FROM jobs WHERE status IN ('succeeded', 'failed', 'cancelled', 'expired') AND finished_at < $1
          AND NOT EXISTS (SELECT 1 FROM artifacts WHERE artifacts.job_id = jobs.id) ORDER BY seq LIMIT $2`, [before, limit])).map((row) => row.id);
        if (ids.length === 0) return { ids, digests: [] };
        const named = await query<{ digest: string }>('SELECT digest FROM uploads WHERE job_id = ANY($1) UNION SELECT digest FROM job_inputs WHERE job_id = ANY($1)', [ids]);
        return { ids, digests: named.map((row) => row.digest) };
      },
      deleteJobs: (ids) => {
        if (ids.length === 0) return;
        for (const table of ['attempts', 'uploads', 'job_inputs']) statement(`DELETE FROM ${table} WHERE job_id = ANY($1)`, [[...ids]]);
        statement('DELETE FROM jobs WHERE id = ANY($1)', [[...ids]]);
      },
    };

    this.attempts = {
      recordAttempt: (attempt, model) => statement(`INSERT INTO attempts (job_id, n, host, replica, batch_id, batch_size, status, dispatched_at, started_at,
          finished_at, load_ms, compute_ms, error_code, error_message, route) VALUES (${marks(15)}) ON CONFLICT DO NOTHING`, [
        attempt.jobId, attempt.n, attempt.host, `${attempt.host}/${model}`, attempt.batchId, attempt.batchSize, attempt.status, attempt.dispatchedAt,
        attempt.startedAt, attempt.finishedAt, attempt.loadMs ?? null, attempt.computeMs ?? null, attempt.errorCode ?? null, attempt.errorMessage ?? null,
        attempt.route ?? null,
      ]),
      listAttempts: async (jobId, decodeRoute = () => null) =>
        (await query<AttemptRow>('SELECT * FROM attempts WHERE job_id = $1 ORDER BY n', [jobId])).map((row) => attemptFromRow(row, decodeRoute)),
    };

    this.artifacts = {
      insertArtifact: (artifact) => statement(`INSERT INTO artifacts (digest, job_id, type, model, host, album, media_type, bytes, width, height,
          compute_ms, total_ms, created_at) VALUES (${marks(13)}) ON CONFLICT DO NOTHING`, [
        artifact.digest, artifact.jobId, artifact.type, artifact.model, artifact.host, artifact.album, artifact.mediaType, artifact.bytes,
        artifact.width, artifact.height, artifact.computeMs, artifact.totalMs, artifact.createdAt,
      ]),
      deleteArtifactsOfJob: (jobId) => statement('DELETE FROM artifacts WHERE job_id = $1', [jobId]),
      artifactsOfJob: async (jobId) => (await query<ArtifactRow>(`${ARTIFACTS} WHERE a.job_id = $1 ORDER BY a.seq`, [jobId])).map(artifactFromRow),
      listArtifacts: async (filter) => {
        const where = new Where();
        where.in('a.type', filter.types);
        if (filter.models) where.models('a.model', filter.models);
        where.in('a.album', filter.albums);
        // SQLite's LIKE ignores the case of ASCII letters; ILIKE does too (and of every other letter).
        if (filter.prompt) where.add(`${PROMPT_SQL} ILIKE ? ESCAPE '\\'`, `%${filter.prompt.replace(/[\\%_]/g, (char) => `\\${char}`)}%`);
        if (filter.beforeSeq !== undefined) where.add('a.seq < ?', filter.beforeSeq);
        return (await query<ArtifactRow>(`${ARTIFACTS} ${where.sql()} ORDER BY a.seq DESC LIMIT ${where.next()}`, [...where.values, filter.limit])).map(artifactFromRow);
      },
      digestPublishedIn: async (digest, scope) => {
        if (scope.albums?.length === 0 || scope.types?.length === 0 || scope.models?.length === 0) return false;
        const where = new Where();
        where.add('digest = ?', digest);
        where.in('album', scope.albums);
        where.in('type', scope.types);
        if (scope.models) where.models('model', scope.models);
        return (await query(`SELECT 1 FROM artifacts ${where.sql()} LIMIT 1`, where.values)).length > 0;
      },
      albumsWithArtifacts: async () => (await query<{ album: string }>('SELECT DISTINCT album FROM artifacts ORDER BY album')).map((row) => row.album),
      digestPublished: async (digest) => (await query('SELECT 1 FROM artifacts WHERE digest = $1 LIMIT 1', [digest])).length > 0,
    };

    this.blobs = {
      recordBlob: (blob, now) => statement('INSERT INTO blobs (digest, bytes, media_type, created_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING', [blob.digest, blob.bytes, blob.mediaType, now]),
      recordUpload: (jobId, digest, now) => statement('INSERT INTO uploads (job_id, digest, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING', [jobId, digest, now]),
      getBlob: async (digest) => {
        const [row] = await query<{ digest: string; bytes: number; media_type: string }>('SELECT digest, bytes, media_type FROM blobs WHERE digest = $1', [digest]);
        return row ? { digest: row.digest, bytes: row.bytes, mediaType: row.media_type } : null;
      },
      wasUploadedFor: async (jobId, digest) => (await query('SELECT 1 FROM uploads WHERE job_id = $1 AND digest = $2', [jobId, digest])).length > 0,
      forgetUploads: (jobId, digests) => { if (digests.length > 0) statement('DELETE FROM uploads WHERE job_id = $1 AND digest = ANY($2)', [jobId, [...digests]]); },
      blobNamed: async (digest) => (await query<{ named: boolean }>(`SELECT EXISTS (SELECT 1 FROM artifacts WHERE digest = $1) OR EXISTS (SELECT 1 FROM uploads WHERE digest = $1)
        OR EXISTS (SELECT 1 FROM client_blobs WHERE digest = $1) OR EXISTS (SELECT 1 FROM job_inputs WHERE digest = $1) AS named`, [digest]))[0]?.named === true,
      deleteBlob: (digest) => statement('DELETE FROM blobs WHERE digest = $1', [digest]),
      blobTotals: async () => {
        const [row] = await query<{ count: string; bytes: string }>('SELECT COUNT(*) AS count, COALESCE(SUM(bytes), 0) AS bytes FROM blobs');
        return { count: Number(row!.count), bytes: Number(row!.bytes) };
      },
      unnamedBlobs: async (after, limit) => {
        const rows = await query<{ digest: string; named: boolean }>(`SELECT digest, (EXISTS (SELECT 1 FROM artifacts a WHERE a.digest = blobs.digest)
          OR EXISTS (SELECT 1 FROM uploads u WHERE u.digest = blobs.digest) OR EXISTS (SELECT 1 FROM client_blobs c WHERE c.digest = blobs.digest)
          OR EXISTS (SELECT 1 FROM job_inputs i WHERE i.digest = blobs.digest)) AS named FROM blobs WHERE digest > $1 ORDER BY digest LIMIT $2`, [after ?? '', limit]);
        return { unnamed: rows.filter((row) => !row.named).map((row) => row.digest), last: rows.length === limit ? rows.at(-1)!.digest : null };
      },
    };

    this.grants = {
      recordGrant: (grant, now) => statement('INSERT INTO grants (id, kind, note, caveats, created_at) VALUES ($1, $2, $3, $4, $5)', [
        grant.id, grant.kind, grant.note, JSON.stringify(grant.caveats), now,
      ]),
      revokeGrant: (id, now) => {
        statement('UPDATE grants SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL', [now, id]);
        return true;
      },
      getGrant: async (id) => (await query<GrantRow>('SELECT * FROM grants WHERE id = $1', [id])).map(grantFromRow)[0] ?? null,
      revokedGrantIds: async () => (await query<{ id: string }>('SELECT id FROM grants WHERE revoked_at IS NOT NULL')).map((row) => row.id),
      listGrants: async ({ limit, before }) => (before
        ? await query<GrantRow>('SELECT * FROM grants WHERE (created_at, id) < ($1, $2) ORDER BY created_at DESC, id DESC LIMIT $3', [before.createdAt, before.id, limit])
        : await query<GrantRow>('SELECT * FROM grants ORDER BY created_at DESC, id DESC LIMIT $1', [limit])).map(grantFromRow),
    };

    this.audit = {
      insertAudit: (entry) => statement(`INSERT INTO audit (at, event, grant_id, actor, route, client, status, code, detail) VALUES (${marks(9)})`, [
        entry.at, entry.event, entry.grantId, entry.actor, entry.route, entry.client, entry.status, entry.code, entry.detail,
      ]),
      pruneAudit: (before, keepRows) => {
        statement('DELETE FROM audit WHERE at < $1', [before]);
        statement('DELETE FROM audit WHERE seq <= (SELECT seq FROM audit ORDER BY seq DESC LIMIT 1 OFFSET $1)', [keepRows]);
      },
      listAudit: async (filter) => {
        const where = new Where();
        if (filter.beforeSeq !== undefined) where.add('seq < ?', filter.beforeSeq);
        if (filter.event !== undefined) where.add('event = ?', filter.event);
        if (filter.actor !== undefined) where.add('actor = ?', filter.actor);
        if (filter.grantId !== undefined) where.add('grant_id = ?', filter.grantId);
        if (filter.since !== undefined) where.add('at >= ?', filter.since);
        return (await query<AuditRow>(`SELECT * FROM audit ${where.sql()} ORDER BY seq DESC LIMIT ${where.next()}`, [...where.values, filter.limit])).map(auditFromRow);
      },
    };

    this.clientBlobs = {
      recordClientBlob: (digest, grantId, now) => statement('INSERT INTO client_blobs (digest, grant_id, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING', [digest, grantId, now]),
      storedBy: async (digest, grantId) => (await query('SELECT 1 FROM client_blobs WHERE digest = $1 AND grant_id = $2', [digest, grantId])).length > 0,
      forgetClientBlob: (digest, grantId) => statement('DELETE FROM client_blobs WHERE digest = $1 AND grant_id = $2', [digest, grantId]),
    };

    type UploadRow = { id: string; grant_id: string; total: number | null; created_at: number };
    const upload = (row: UploadRow) => ({ id: row.id, grantId: row.grant_id, total: row.total, createdAt: row.created_at });
    this.stagedUploads = {
      insertStagedUpload: (record) => statement('INSERT INTO staged_uploads (id, grant_id, total, created_at) VALUES ($1, $2, $3, $4)', [record.id, record.grantId, record.total, record.createdAt]),
      deleteStagedUpload: (id) => statement('DELETE FROM staged_uploads WHERE id = $1', [id]),
      getStagedUpload: async (id) => (await query<UploadRow>('SELECT id, grant_id, total, created_at FROM staged_uploads WHERE id = $1', [id])).map(upload)[0] ?? null,
      countStagedUploads: async (grantId) => Number((await query<{ n: string }>('SELECT COUNT(*) AS n FROM staged_uploads WHERE grant_id = $1', [grantId]))[0]!.n),
      stagedUploadsBefore: async (before) => (await query<UploadRow>('SELECT id, grant_id, total, created_at FROM staged_uploads WHERE created_at < $1', [before])).map(upload),
    };

    this.inputImages = {
      recordVerdict: (digest, verdict, now) => statement(
        'INSERT INTO input_images (digest, format, width, height, refusal, checked_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING',
        verdict.ok ? [digest, verdict.format, verdict.width, verdict.height, null, now] : [digest, null, null, null, verdict.refusal, now],
      ),
      recordJobInput: (digest, jobId) => statement('INSERT INTO job_inputs (digest, job_id) VALUES ($1, $2) ON CONFLICT DO NOTHING', [digest, jobId]),
      forgetVerdict: (digest) => statement('DELETE FROM input_images WHERE digest = $1', [digest]),
      verdictOf: async (digest) => {
        const [row] = await query<{ format: string | null; width: number | null; height: number | null; refusal: string | null }>(
          'SELECT format, width, height, refusal FROM input_images WHERE digest = $1', [digest]);
        if (!row) return undefined;
        return row.refusal !== null ? { ok: false, refusal: row.refusal } : { ok: true, format: row.format!, width: row.width!, height: row.height! };
      },
      inputOfJobOn: async (digest, hosts) => {
        const rows = await query<{ host: string | null }>(`SELECT j.lease_host AS host FROM job_inputs i JOIN jobs j ON j.id = i.job_id
          WHERE i.digest = $1 AND j.status IN ('dispatched', 'running')`, [digest]);
        return rows.some((row) => row.host !== null && (hosts === null || hosts.includes(row.host)));
      },
    };

    this.models = {
      insertModel: (model, record) => statement('INSERT INTO models (name, version, manifest, policy, created_at) VALUES ($1, $2, $3, $4, $5)', [
        model, record.manifest.version, JSON.stringify(record.manifest), record.policy === null ? null : JSON.stringify(record.policy), record.createdAt,
      ]),
      deleteModel: (model, version) => statement('DELETE FROM models WHERE name = $1 AND version = $2', [model, version]),
      setModelRoute: (route) => statement(
        'INSERT INTO model_routes (name, pinned, split) VALUES ($1, $2, $3) ON CONFLICT (name) DO UPDATE SET pinned = excluded.pinned, split = excluded.split',
        [route.name, route.pinned, route.split === null ? null : JSON.stringify(route.split)],
      ),
      deleteModelRoute: (name) => statement('DELETE FROM model_routes WHERE name = $1', [name]),
      listModels: async () => (await query<{ name: string; manifest: string; policy: string | null; created_at: number }>(
        'SELECT name, manifest, policy, created_at FROM models ORDER BY created_at, name, version')).map((row) => ({
        model: row.name,
        record: { manifest: JSON.parse(row.manifest) as ModelManifest, policy: row.policy === null ? null : JSON.parse(row.policy) as Record<string, unknown>, createdAt: row.created_at },
      })),
      listModelRoutes: async () => (await query<{ name: string; pinned: string | null; split: string | null }>('SELECT name, pinned, split FROM model_routes'))
        .map((row) => ({ name: row.name, pinned: row.pinned, split: row.split === null ? null : JSON.parse(row.split) as Record<string, number> })),
    };
  }

  /**
   * Connect, bring the schema up to date (once, whichever orchestrator comes first: under an advisory lock) and
   * reserve the first block of job numbers. A database that cannot be reached is a STORE_UNAVAILABLE naming it.
   */
  static async open(options: PostgresStoreOptions): Promise<PostgresStore> {
    const store = new PostgresStore(options);
    try {
      await migratePostgres(store.pool);
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
  readonly models: MeshStore['models'];

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

/** A WHERE clause built of conditions written with `?`, numbered `$n` in order. */
class Where {
  readonly values: unknown[] = [];
  readonly #conditions: string[] = [];

  add(condition: string, ...values: unknown[]): void {
    let text = condition;
    for (const value of values) {
      this.values.push(value);
      text = text.replace('?', `$${this.values.length}`);
    }
    this.#conditions.push(text);
  }

  /** A column limited to `values`; null: no limit; empty: nothing matches. */
  in(column: string, values: readonly unknown[] | null | undefined): void {
    if (!values) return;
    if (values.length === 0) this.#conditions.push('FALSE');
    else this.add(`${column} = ANY(?)`, [...values]);
  }

  /** A column of model names limited to `models` by name: every version of each too (`ocr` matches `ocr@2`; store/model-filter.ts). */
  models(column: string, models: readonly string[]): void {
    if (models.length === 0) this.#conditions.push('FALSE');
    else this.add(`(${column} = ANY(?) OR split_part(${column}, '@', 1) = ANY(?))`, [...models], [...models]);
  }

  sql(): string {
    return this.#conditions.length > 0 ? `WHERE ${this.#conditions.join(' AND ')}` : '';
  }

  /** The placeholder of the next value (a LIMIT after the conditions). */
  next(): string {
    return `$${this.values.length + 1}`;
  }
}
