import type { Migration } from '../contract/migration.js';

/** SQLite's migrations (contract/migration.ts says how they run; postgres/migrations.ts are PostgreSQL's). */
export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'jobs, attempts, blobs, artifacts, uploads, grants',
    sql: `
      CREATE TABLE jobs (
        seq INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        type TEXT NOT NULL,
        model TEXT NOT NULL,
        status TEXT NOT NULL,
        priority INTEGER NOT NULL,
        album TEXT NOT NULL,
        classes TEXT NOT NULL,
        input TEXT NOT NULL,
        grant_id TEXT NOT NULL,
        idempotency_key TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        finished_at INTEGER,
        deadline_at INTEGER,
        attempts INTEGER NOT NULL DEFAULT 0,
        batch_id TEXT,
        batch_size INTEGER,
        lease_host TEXT,
        lease_expires_at INTEGER,
        result TEXT,
        error_code TEXT,
        error_message TEXT
      );
      CREATE INDEX jobs_by_status ON jobs (status, seq);
      CREATE INDEX jobs_by_batch ON jobs (batch_id);
      CREATE UNIQUE INDEX jobs_by_idempotency_key ON jobs (grant_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

      CREATE TABLE attempts (
        job_id TEXT NOT NULL,
        n INTEGER NOT NULL,
        host TEXT NOT NULL,
        replica TEXT NOT NULL,
        batch_id TEXT NOT NULL,
        batch_size INTEGER NOT NULL,
        status TEXT NOT NULL,
        dispatched_at INTEGER NOT NULL,
        started_at INTEGER,
        finished_at INTEGER,
        compute_ms REAL,
        error_code TEXT,
        error_message TEXT,
        PRIMARY KEY (job_id, n)
      ) WITHOUT ROWID;
      CREATE INDEX attempts_by_batch ON attempts (batch_id);

      CREATE TABLE blobs (
        digest TEXT PRIMARY KEY,
        bytes INTEGER NOT NULL,
        media_type TEXT NOT NULL,
        created_at INTEGER NOT NULL
      ) WITHOUT ROWID;

      CREATE TABLE uploads (
        job_id TEXT NOT NULL,
        digest TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (job_id, digest)
      ) WITHOUT ROWID;

      CREATE TABLE artifacts (
        seq INTEGER PRIMARY KEY,
        digest TEXT NOT NULL,
        job_id TEXT NOT NULL,
        type TEXT NOT NULL,
        model TEXT NOT NULL,
        host TEXT NOT NULL,
        album TEXT NOT NULL,
        prompt TEXT,
        media_type TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        width INTEGER,
        height INTEGER,
        compute_ms REAL,
        total_ms REAL,
        created_at INTEGER NOT NULL,
        UNIQUE (job_id, digest)
      );
      CREATE INDEX artifacts_by_job ON artifacts (job_id);

      CREATE TABLE grants (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        note TEXT,
        created_at INTEGER NOT NULL,
        revoked_at INTEGER
      ) WITHOUT ROWID;
    `,
  },
  {
    version: 3,
    name: 'the prompt is read from the job\'s input only; no lease expiry column',
    sql: `
      ALTER TABLE jobs ADD COLUMN prompt TEXT GENERATED ALWAYS AS (json_extract(input, '$.prompt')) VIRTUAL;
      ALTER TABLE artifacts DROP COLUMN prompt;
      ALTER TABLE jobs DROP COLUMN lease_expires_at;
    `,
  },
  {
    version: 4,
    name: 'audit log; grant caveats; request hash for idempotency keys; artifacts by digest',
    sql: `
      CREATE TABLE audit (
        seq INTEGER PRIMARY KEY,
        at INTEGER NOT NULL,
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

      ALTER TABLE grants ADD COLUMN caveats TEXT;
      CREATE INDEX grants_by_creation ON grants (created_at, id);

      ALTER TABLE jobs ADD COLUMN request_hash TEXT;

      CREATE INDEX artifacts_by_digest ON artifacts (digest, album);
    `,
  },
  {
    version: 5,
    name: 'the attempt in flight lives on its job; attempts are written once, when they end',
    sql: `
      ALTER TABLE jobs ADD COLUMN dispatched_at INTEGER;
      ALTER TABLE jobs ADD COLUMN started_at INTEGER;
    `,
  },
  {
    version: 6,
    name: 'the hosts a job may run on; the routing decision of each attempt',
    sql: `
      ALTER TABLE jobs ADD COLUMN hosts TEXT;
      ALTER TABLE jobs ADD COLUMN route TEXT;
      ALTER TABLE attempts ADD COLUMN route TEXT;
    `,
  },
  {
    version: 7,
    name: 'how long each attempt waited for its model to load',
    sql: `
      ALTER TABLE attempts ADD COLUMN load_ms REAL;
    `,
  },
  {
    version: 8,
    // Nothing looks attempts up by batch, and the jobs of a batch are found by their ids, which the orchestrator holds:
    // each index was one more page written by every job's commits.
    name: 'no indexes by batch',
    sql: `
      DROP INDEX attempts_by_batch;
      DROP INDEX jobs_by_batch;
    `,
  },
  {
    version: 9,
    // UNIQUE (job_id, digest) is an index that starts with job_id already: a job's artifacts are found through it.
    name: 'no second index of artifacts by job',
    sql: `
      DROP INDEX artifacts_by_job;
    `,
  },
  {
    version: 10,
    // A generated column is computed whenever SQLite rewrites the row, and a job's row is rewritten at every step
    // (dispatched, running, finished): each time json_extract parsed the whole input — kilobytes for a tensor — to
    // find a prompt nobody asked for. The prompt is read from the input where it is wanted instead (promptOf in
    // contract/jobs.ts, PROMPT_SQL in sqlite/jobs.ts): still one copy, in the input.
    name: 'the prompt is read from the input when wanted, not on every write',
    sql: `
      ALTER TABLE jobs DROP COLUMN prompt;
    `,
  },
  {
    version: 11,
    // Nearly every job's one attempt is the one that succeeds. Its facts are on the job's row already (batch, host,
    // dispatch and start, route) or come with the result: kept there, the attempt costs no row of its own, no index
    // entry and no page of the attempts table in each commit (5-9 % more jobs a second under load, bench:ab). The
    // attempts that did not succeed are still rows of attempts, written when they end.
    name: 'a succeeded attempt is kept on its job',
    sql: `
      ALTER TABLE jobs ADD COLUMN attempt_host TEXT;
      ALTER TABLE jobs ADD COLUMN load_ms REAL;
      ALTER TABLE jobs ADD COLUMN compute_ms REAL;
    `,
  },
  {
    version: 12,
    // Bring your own models and inputs (issue 21): models added at run time and their versions (the manifest as
    // registered, the policy as given), which version a bare name means (pinned, or a traffic split), uploads in
    // progress (resumable: the bytes so far are a file under <data>/blobs/staging, its size the offset), and which
    // grant lineage stored each client blob (a job may name it as an input).
    name: 'models, their versions and routes; staged uploads; client blobs',
    sql: `
      CREATE TABLE models (
        name TEXT NOT NULL,
        version TEXT NOT NULL,
        manifest TEXT NOT NULL,
        policy TEXT,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (name, version)
      ) WITHOUT ROWID;
      CREATE TABLE model_routes (
        name TEXT PRIMARY KEY,
        pinned TEXT,
        split TEXT
      ) WITHOUT ROWID;
      CREATE TABLE staged_uploads (
        id TEXT PRIMARY KEY,
        grant_id TEXT NOT NULL,
        total INTEGER,
        created_at INTEGER NOT NULL
      ) WITHOUT ROWID;
      CREATE TABLE client_blobs (
        digest TEXT NOT NULL,
        grant_id TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (digest, grant_id)
      ) WITHOUT ROWID;
    `,
  },
  {
    version: 13,
    name: 'pictures jobs start from: their decoding verdicts, and which jobs name which',
    sql: `
      CREATE TABLE input_images (
        digest TEXT PRIMARY KEY,
        format TEXT,
        width INTEGER,
        height INTEGER,
        refusal TEXT,
        checked_at INTEGER NOT NULL
      ) WITHOUT ROWID;
      CREATE TABLE job_inputs (
        digest TEXT NOT NULL,
        job_id TEXT NOT NULL,
        PRIMARY KEY (digest, job_id)
      ) WITHOUT ROWID;
    `,
  },
  {
    version: 14,
    // The gallery (issue 22): one album's results, newest first, without reading every other album's on the way
    // (a grant limited to albums, or a person who switched album); and the albums there are, from the index alone.
    name: 'artifacts by album, newest first',
    sql: `
      CREATE INDEX artifacts_by_album ON artifacts (album, seq);
    `,
  },
  {
    version: 15,
    // Deleted results give their bytes back once nothing names them (BlobReclaimer): is an output uploaded for any job?
    name: 'uploads by digest',
    sql: `
      CREATE INDEX uploads_by_digest ON uploads (digest);
    `,
  },
  {
    version: 16,
    // Energy per result (issue 32): its job's share of its batch's energy, where the GPU's driver reports power.
    name: 'the energy a result took',
    sql: `
      ALTER TABLE artifacts ADD COLUMN energy_j REAL;
    `,
  },
  {
    version: 17,
    // Pipelines (issue 34): steps submitted at once, each a job; the row names them, so one id follows them all.
    name: 'pipelines',
    sql: `
      CREATE TABLE pipelines (
        id TEXT PRIMARY KEY,
        grant_id TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        steps TEXT NOT NULL
      );
    `,
  },
  {
    version: 18,
    // Webhooks (issue 34): the jobs that call back when they end, and every event on its way to a callback URL. 18,
    // not 17: pipelines (the same issue, another branch) take 17; the runner applies versions in order and needs no
    // contiguity.
    name: 'webhooks: armed jobs and deliveries',
    sql: `
      CREATE TABLE job_webhooks (
        job_id TEXT PRIMARY KEY,
        url TEXT NOT NULL,
        created_at INTEGER NOT NULL
      ) WITHOUT ROWID;
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
        next_at INTEGER,
        created_at INTEGER NOT NULL,
        tried_at INTEGER,
        finished_at INTEGER
      ) WITHOUT ROWID;
      CREATE INDEX webhook_deliveries_by_subject ON webhook_deliveries (subject_id, created_at);
      CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (created_at) WHERE status = 'pending';
    `,
  },
  {
    version: 19,
    // A pipeline's jobs by job (retention deletes jobs by id: the pipelines left with none go with them), and the
    // pipelines whose end is still to be called back (as job_webhooks for jobs). The rows of pipelines stored before
    // are filled in from their steps; a pipeline whose jobs are all gone already goes now.
    name: 'pipelines: their jobs by job, their callbacks',
    sql: `
      CREATE TABLE pipeline_jobs (
        job_id TEXT PRIMARY KEY,
        pipeline_id TEXT NOT NULL
      ) WITHOUT ROWID;
      CREATE INDEX pipeline_jobs_by_pipeline ON pipeline_jobs (pipeline_id);
      INSERT INTO pipeline_jobs (job_id, pipeline_id)
        SELECT json_extract(step.value, '$.jobId'), pipelines.id FROM pipelines, json_each(pipelines.steps) AS step
        WHERE EXISTS (SELECT 1 FROM jobs WHERE jobs.id = json_extract(step.value, '$.jobId'));
      DELETE FROM pipelines WHERE id NOT IN (SELECT pipeline_id FROM pipeline_jobs);
      CREATE TABLE pipeline_webhooks (
        pipeline_id TEXT PRIMARY KEY,
        url TEXT NOT NULL,
        created_at INTEGER NOT NULL
      ) WITHOUT ROWID;
    `,
  },
  {
    version: 20,
    // The caps of the grant that submitted a job that waits for others' outputs: checked again when it is released
    // into its queue (the grant itself is not stored; a narrowing's caps are known only from its token).
    name: 'the caps of jobs that wait',
    sql: `
      CREATE TABLE job_caps (
        job_id TEXT PRIMARY KEY,
        caps TEXT NOT NULL
      ) WITHOUT ROWID;
    `,
  },
];
