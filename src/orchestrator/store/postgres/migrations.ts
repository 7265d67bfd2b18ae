import type { Migration } from '../contract/migration.js';

/**
 * The PostgreSQL store's migrations: numbered, forward only, each run once in its own transaction and recorded in
 * `schema_migrations`, as SQLite's (sqlite/migrations.ts). Version 1 is the schema SQLite reached at its version 14,
 * in PostgreSQL's types: times in epoch milliseconds (BIGINT, read back as numbers), JSON in TEXT columns (the same
 * rows as SQLite's, read by the same row functions: contract/), the sequence numbers pages and listings sort by as identities.
 * Jobs take theirs from blocks the orchestrator reserves (`job_seq_blocks`): it must know a job's number the moment
 * it admits it, before the write reaches the database.
 *
 * What only a shared store needs: the mesh lease (`mesh_lease`: who runs the mesh, and its epoch, the fencing token
 * every write checks) and the orchestrators that share the store (`orchestrators`, shown by GET /v1/status), and the
 * secret grants are signed with (`mesh_secrets`), so every orchestrator verifies what any of them minted.
 */
export const PG_MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'jobs, attempts, blobs, artifacts, uploads, grants, audit, models, pictures; the mesh lease and secrets',
    sql: `
      CREATE SEQUENCE job_seq_blocks;
      CREATE TABLE jobs (
        seq BIGINT PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        type TEXT NOT NULL,
        model TEXT NOT NULL,
        status TEXT NOT NULL,
        priority INTEGER NOT NULL,
        album TEXT NOT NULL,
        classes TEXT NOT NULL,
        hosts TEXT,
        input TEXT NOT NULL,
        grant_id TEXT NOT NULL,
        idempotency_key TEXT,
        request_hash TEXT,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        finished_at BIGINT,
        deadline_at BIGINT,
        attempts INTEGER NOT NULL DEFAULT 0,
        batch_id TEXT,
        batch_size INTEGER,
        lease_host TEXT,
        dispatched_at BIGINT,
        started_at BIGINT,
        route TEXT,
        attempt_host TEXT,
        load_ms DOUBLE PRECISION,
        compute_ms DOUBLE PRECISION,
        result TEXT,
        error_code TEXT,
        error_message TEXT
      );
      CREATE INDEX jobs_by_status ON jobs (status, seq);
      CREATE UNIQUE INDEX jobs_by_idempotency_key ON jobs (grant_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

      CREATE TABLE attempts (
        job_id TEXT NOT NULL,
        n INTEGER NOT NULL,
        host TEXT NOT NULL,
        replica TEXT NOT NULL,
        batch_id TEXT NOT NULL,
        batch_size INTEGER NOT NULL,
        status TEXT NOT NULL,
        dispatched_at BIGINT NOT NULL,
        started_at BIGINT,
        finished_at BIGINT,
        load_ms DOUBLE PRECISION,
        compute_ms DOUBLE PRECISION,
        error_code TEXT,
        error_message TEXT,
        route TEXT,
        PRIMARY KEY (job_id, n)
      );

      CREATE TABLE blobs (
        digest TEXT PRIMARY KEY,
        bytes BIGINT NOT NULL,
        media_type TEXT NOT NULL,
        created_at BIGINT NOT NULL
      );

      CREATE TABLE uploads (
        job_id TEXT NOT NULL,
        digest TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        PRIMARY KEY (job_id, digest)
      );

      CREATE TABLE artifacts (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        digest TEXT NOT NULL,
        job_id TEXT NOT NULL,
        type TEXT NOT NULL,
        model TEXT NOT NULL,
        host TEXT NOT NULL,
        album TEXT NOT NULL,
        media_type TEXT NOT NULL,
        bytes BIGINT NOT NULL,
        width INTEGER,
        height INTEGER,
        compute_ms DOUBLE PRECISION,
        total_ms DOUBLE PRECISION,
        created_at BIGINT NOT NULL,
        UNIQUE (job_id, digest)
      );
      CREATE INDEX artifacts_by_digest ON artifacts (digest, album);
      CREATE INDEX artifacts_by_album ON artifacts (album, seq);

      CREATE TABLE grants (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        note TEXT,
        caveats TEXT,
        created_at BIGINT NOT NULL,
        revoked_at BIGINT
      );
      CREATE INDEX grants_by_creation ON grants (created_at, id);

      CREATE TABLE audit (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        at BIGINT NOT NULL,
        event TEXT NOT NULL,
        grant_id TEXT,
        actor TEXT,
        route TEXT,
        client TEXT,
        status INTEGER,
        code TEXT,
        detail TEXT
      );
      CREATE INDEX audit_by_time ON audit (at);

      CREATE TABLE models (
        name TEXT NOT NULL,
        version TEXT NOT NULL,
        manifest TEXT NOT NULL,
        policy TEXT,
        created_at BIGINT NOT NULL,
        PRIMARY KEY (name, version)
      );
      CREATE TABLE model_routes (
        name TEXT PRIMARY KEY,
        pinned TEXT,
        split TEXT
      );
      CREATE TABLE staged_uploads (
        id TEXT PRIMARY KEY,
        grant_id TEXT NOT NULL,
        total BIGINT,
        created_at BIGINT NOT NULL
      );
      CREATE TABLE client_blobs (
        digest TEXT NOT NULL,
        grant_id TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        PRIMARY KEY (digest, grant_id)
      );
      CREATE TABLE input_images (
        digest TEXT PRIMARY KEY,
        format TEXT,
        width INTEGER,
        height INTEGER,
        refusal TEXT,
        checked_at BIGINT NOT NULL
      );
      CREATE TABLE job_inputs (
        digest TEXT NOT NULL,
        job_id TEXT NOT NULL,
        PRIMARY KEY (digest, job_id)
      );

      CREATE TABLE mesh_lease (
        name TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        holder_url TEXT,
        epoch BIGINT NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL
      );
      CREATE TABLE orchestrators (
        id TEXT PRIMARY KEY,
        url TEXT,
        version TEXT NOT NULL,
        started_at TIMESTAMPTZ NOT NULL,
        seen_at TIMESTAMPTZ NOT NULL,
        role TEXT NOT NULL
      );
      CREATE TABLE mesh_secrets (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL
      );
    `,
  },
  {
    version: 2,
    // The fence as one statement that fails when the lease moved on (SQLSTATE GM001), so a transaction's check, its
    // writes and its COMMIT go to the server together, one round trip (pg-commits.ts), instead of a SELECT whose
    // answer the orchestrator must wait for before it sends the rest.
    name: 'the lease check as a function that raises',
    sql: `
      CREATE FUNCTION gpumesh_hold_lease(wanted_holder TEXT, wanted_epoch BIGINT) RETURNS VOID LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM 1 FROM mesh_lease WHERE name = 'mesh' AND holder = wanted_holder AND epoch = wanted_epoch FOR SHARE;
        IF NOT FOUND THEN
          RAISE EXCEPTION 'the mesh lease is not held by % at epoch %', wanted_holder, wanted_epoch USING ERRCODE = 'GM001';
        END IF;
      END $$;
    `,
  },
  {
    version: 3,
    // SQLite's version 15: deleted results give their bytes back once nothing names them (BlobReclaimer).
    name: 'uploads by digest',
    sql: `
      CREATE INDEX uploads_by_digest ON uploads (digest);
    `,
  },
  {
    version: 4,
    // SQLite's version 16: the energy a result took.
    name: 'the energy a result took',
    sql: `
      ALTER TABLE artifacts ADD COLUMN energy_j DOUBLE PRECISION;
    `,
  },
  {
    version: 5,
    // SQLite's version 17: pipelines.
    name: 'pipelines',
    sql: `
      CREATE TABLE pipelines (
        id TEXT PRIMARY KEY,
        grant_id TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        steps TEXT NOT NULL
      );
    `,
  },
  {
    version: 6,
    // SQLite's version 18: webhooks, armed jobs and deliveries (5 is pipelines', SQLite's 17).
    name: 'webhooks: armed jobs and deliveries',
    sql: `
      CREATE TABLE job_webhooks (
        job_id TEXT PRIMARY KEY,
        url TEXT NOT NULL,
        created_at BIGINT NOT NULL
      );
      CREATE TABLE webhook_deliveries (
        id TEXT PRIMARY KEY,
        subject_kind TEXT NOT NULL,
        subject_id TEXT NOT NULL,
        event_type TEXT NOT NULL,
        url TEXT NOT NULL,
        body TEXT NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        last_status INTEGER,
        last_error TEXT,
        next_at BIGINT,
        created_at BIGINT NOT NULL,
        tried_at BIGINT,
        finished_at BIGINT
      );
      CREATE INDEX webhook_deliveries_by_subject ON webhook_deliveries (subject_id, created_at);
      CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (created_at) WHERE status = 'pending';
    `,
  },
  {
    version: 7,
    // SQLite's version 19: a pipeline's jobs by job, and the pipelines whose end is still to be called back.
    name: 'pipelines: their jobs by job, their callbacks',
    sql: `
      CREATE TABLE pipeline_jobs (
        job_id TEXT PRIMARY KEY,
        pipeline_id TEXT NOT NULL
      );
      CREATE INDEX pipeline_jobs_by_pipeline ON pipeline_jobs (pipeline_id);
      INSERT INTO pipeline_jobs (job_id, pipeline_id)
        SELECT step->>'jobId', pipelines.id FROM pipelines, jsonb_array_elements(pipelines.steps::jsonb) AS step
        WHERE EXISTS (SELECT 1 FROM jobs WHERE jobs.id = step->>'jobId');
      DELETE FROM pipelines WHERE id NOT IN (SELECT pipeline_id FROM pipeline_jobs);
      CREATE TABLE pipeline_webhooks (
        pipeline_id TEXT PRIMARY KEY,
        url TEXT NOT NULL,
        created_at BIGINT NOT NULL
      );
    `,
  },
  {
    version: 8,
    // SQLite's version 20: the caps of jobs that wait.
    name: 'the caps of jobs that wait',
    sql: `
      CREATE TABLE job_caps (
        job_id TEXT PRIMARY KEY,
        caps TEXT NOT NULL
      );
    `,
  },
];
