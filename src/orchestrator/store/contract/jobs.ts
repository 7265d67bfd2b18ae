import type { JobStatus } from '../../../protocol/index.js';

/** One job as stored; times are epoch milliseconds. */
export interface JobRecord {
  seq: number;
  id: string;
  type: string;
  model: string;
  status: JobStatus;
  priority: number;
  album: string;
  /** Host classes the job may run on, in order of preference: its type's routing, narrowed by its grant. */
  classes: string[];
  /** Hosts its grant allows it to run on; null: any. */
  hosts: string[] | null;
  input: Record<string, unknown>;
  /** The input's prompt, if it has one (promptOf). */
  prompt: string | null;
  grantId: string;
  idempotencyKey: string | null;
  createdAt: number;
  updatedAt: number;
  finishedAt: number | null;
  deadlineAt: number | null;
  attempts: number;
  batchId: string | null;
  batchSize: number | null;
  leaseHost: string | null;
  /** When the attempt in flight was dispatched, and when its host started it (null before). */
  dispatchedAt: number | null;
  startedAt: number | null;
  /** The routing decision of the attempt in flight (or the last one), encoded (routing/route-log.ts). */
  route: string | null;
  /**
   * How long the attempt in flight waited for its model to load, once its host started it (0: the model was
   * resident). Kept in memory while the attempt runs, and written with the attempt when it ends.
   */
  loadMs?: number | null;
  /**
   * The attempt that succeeded, kept on the row instead of in attempts (migration 11): its host and the engine's time
   * for its batch; its batch, times and route are the row's. Null until the job succeeds.
   */
  attemptHost: string | null;
  computeMs: number | null;
  /**
   * How many artifacts it published: known in memory when it succeeded in this process (its view needs no query when
   * it published none), undefined for a record read back from the store.
   */
  artifactCount?: number;
  result: unknown;
  errorCode: string | null;
  errorMessage: string | null;
}

export type NewJob = Pick<JobRecord, 'id' | 'type' | 'model' | 'priority' | 'album' | 'classes' | 'input' | 'grantId' | 'idempotencyKey' | 'createdAt' | 'deadlineAt'> & Partial<Pick<JobRecord, 'hosts'>> & {
  /** The canonical hash of the request that created the job, kept with its idempotency key (see JobService). */
  requestHash?: string | null;
  /** `waiting`: it takes other jobs' outputs and waits for them (default `queued`). */
  status?: 'queued' | 'waiting';
  /**
   * `input` as JSON, where the text its client sent is exactly it (JobAdmission): written as it came instead of
   * written out again (`inputJson`). Never kept on the record: a queue of jobs would hold every input twice.
   */
  inputJson?: string | null;
};

/**
 * The caps of the grant that submitted a job (`max-queued`, `device-seconds-per-day`: auth's GrantCaps), kept for a
 * job that waits for others' outputs, whose caps are checked again when it is released into its queue.
 */
export interface JobCaps {
  maxQueued: { limit: number; caveat: string } | null;
  deviceSecondsPerDay: { limit: number; caveat: string } | null;
}

export interface JobFilter {
  statuses?: readonly JobStatus[];
  types?: readonly string[] | null;
  models?: readonly string[] | null;
  albums?: readonly string[] | null;
  /** Only jobs with seq below this (the page cursor). */
  beforeSeq?: number;
  limit: number;
}

/** The attempt a job succeeded with, kept on its row (JobRecord.attemptHost). */
export interface SucceededAttempt {
  host: string;
  /** When its host started it (a batch reported started by its first result is not stored as running). */
  startedAt: number | null;
  loadMs: number | null;
  computeMs: number;
}

/** How a job ends, and what it ends with: a result and the attempt it succeeded with, or an error. */
/**
 * How a job ended, for its row. `resultJson`: the result's JSON where the caller made it already (a success's event
 * carries the same text, JobStates.succeeded), so a tensor is written out once; else the store makes it.
 */
export type JobOutcome = { result?: unknown; resultJson?: string; errorCode?: string; errorMessage?: string; attempt?: SucceededAttempt };

/** The result column's text for an end: SQL NULL when it has no result (`undefined`), else the result's JSON. */
export const resultText = (outcome: JobOutcome): string | null =>
  outcome.result === undefined ? null : outcome.resultJson ?? JSON.stringify(outcome.result);

/** How a job ends, as finishJob is told: the status, the moment and the outcome. */
export interface JobEnd {
  status: 'succeeded' | 'failed' | 'cancelled' | 'expired';
  now: number;
  outcome: JobOutcome;
}

/** The jobs table: a job from admission to its end, and its deletion once retention lets it go. */
export interface JobTable {
  /** Store a new job as queued, under the number `reserveJob` would give it. */
  insertJob(job: NewJob): JobRecord;
  /**
   * A new job's record, its number reserved, nothing written: a job written only later, as it then stands
   * (`insertRecord`). JobStates defers the write of a job its client waits for (docs/architecture.md, *Writes*).
   */
  reserveJob(job: NewJob): JobRecord;
  /**
   * Write the row of a job `reserveJob` made: as its record stands (queued, or with the attempt in flight), or, with
   * `end`, finished as finishJob would finish it — one INSERT where its life would otherwise be an insert and two or
   * three updates. Only for jobs without an idempotency key (the row's request hash is left empty). `inputJson`: the
   * job's input as JSON where it is at hand (NewJob.inputJson).
   */
  insertRecord(job: JobRecord, end?: JobEnd, inputJson?: string | null): void;
  releaseIdempotencyKey(id: string): void;
  markDispatched(seqs: readonly number[], batchId: string, host: string, now: number, route?: string | null): Set<number>;
  markRunning(seqs: readonly number[], now: number): void;
  requeueJob(seq: number, now: number): boolean;
  /** A waiting job's sources succeeded: it is queued, its input now naming their outputs by digest. */
  releaseJob(seq: number, input: Record<string, unknown>, now: number): boolean;
  /** Keep the caps of a waiting job's grant (job_caps: they live and die with the job's row). */
  recordCaps(jobId: string, caps: JobCaps): void;
  /** The caps kept for a job (`recordCaps`); null when none were. */
  capsOf(jobId: string): Promise<JobCaps | null>;
  finishJob(seq: number, status: 'succeeded' | 'failed' | 'cancelled' | 'expired', now: number, outcome?: JobOutcome): boolean;
  getJob(id: string): Promise<JobRecord | null>;
  getJobByIdempotencyKey(grantId: string, key: string, since: number): Promise<JobRecord | null>;
  idempotencyEntry(grantId: string, key: string, since: number): Promise<{ id: string; requestHash: string | null } | null>;
  listJobs(filter: JobFilter): Promise<JobRecord[]>;
  jobsInStates(statuses: readonly JobStatus[]): Promise<JobRecord[]>;
  countByStatus(): Promise<Record<string, number>>;
  /**
   * Device milliseconds per grant lineage (grant id) of the jobs that succeeded at or after `since`: each its share of
   * its batch's compute time (compute_ms over batch_size). A lineage's `device-seconds-per-day` use, read back at start.
   */
  deviceMsByGrant(since: number): Promise<Map<string, number>>;
  /** Finished jobs no published result names, finished before `before`, oldest first; and the digests only their rows name. */
  prunableJobs(before: number, limit: number): Promise<{ ids: string[]; digests: string[] }>;
  /** Delete jobs with their attempts, uploads, input records and kept caps. */
  deleteJobs(ids: readonly string[]): void;
}

/** A row of `jobs` as both stores read it (JSON in text columns, times in epoch ms). */
export interface JobRow {
  seq: number; id: string; type: string; model: string; status: string; priority: number; album: string; classes: string; hosts: string | null; input: string;
  grant_id: string; idempotency_key: string | null; created_at: number; updated_at: number; finished_at: number | null;
  deadline_at: number | null; attempts: number; batch_id: string | null; batch_size: number | null; lease_host: string | null;
  dispatched_at: number | null; started_at: number | null; route: string | null; result: string | null; error_code: string | null; error_message: string | null;
  attempt_host: string | null; load_ms: number | null; compute_ms: number | null;
}

export function jobFromRow(row: JobRow): JobRecord {
  const input = JSON.parse(row.input) as Record<string, unknown>;
  return {
    seq: row.seq, id: row.id, type: row.type, model: row.model, status: row.status as JobStatus, priority: row.priority,
    album: row.album, classes: JSON.parse(row.classes) as string[], hosts: row.hosts === null ? null : JSON.parse(row.hosts) as string[], input, prompt: promptOf(input), grantId: row.grant_id,
    idempotencyKey: row.idempotency_key, createdAt: row.created_at, updatedAt: row.updated_at, finishedAt: row.finished_at,
    deadlineAt: row.deadline_at, attempts: row.attempts, batchId: row.batch_id, batchSize: row.batch_size,
    leaseHost: row.lease_host, dispatchedAt: row.dispatched_at, startedAt: row.started_at, route: row.route, loadMs: row.load_ms,
    attemptHost: row.attempt_host, computeMs: row.compute_ms,
    result: row.result === null ? null : JSON.parse(row.result), errorCode: row.error_code, errorMessage: row.error_message,
  };
}

/** The columns `insertRecord` writes, in the order of `recordValues`. */
export const RECORD_COLUMNS = [
  'seq', 'id', 'type', 'model', 'status', 'priority', 'album', 'classes', 'hosts', 'input', 'grant_id', 'idempotency_key', 'created_at', 'updated_at',
  'finished_at', 'deadline_at', 'attempts', 'batch_id', 'batch_size', 'lease_host', 'dispatched_at', 'started_at', 'route', 'result', 'error_code',
  'error_message', 'attempt_host', 'load_ms', 'compute_ms',
] as const;

/**
 * The values of a job's row as its record stands, or as `end` leaves it (what finishJob would set: the status, its
 * moment, no lease, the result or error, and the attempt it succeeded with), in the order of RECORD_COLUMNS.
 */
export function recordValues(job: JobRecord, end?: JobEnd, inputJson?: string | null): unknown[] {
  const outcome = end?.outcome;
  const attempt = outcome?.attempt;
  const json = (value: unknown): string | null => (value === undefined || value === null ? null : JSON.stringify(value));
  return [
    job.seq, job.id, job.type, job.model, end ? end.status : job.status, job.priority, job.album, JSON.stringify(job.classes), json(job.hosts),
    inputJson ?? JSON.stringify(job.input), job.grantId, job.idempotencyKey, job.createdAt, end ? end.now : job.updatedAt, end ? end.now : job.finishedAt,
    job.deadlineAt, job.attempts, job.batchId, job.batchSize, end ? null : job.leaseHost, job.dispatchedAt, attempt ? attempt.startedAt : job.startedAt,
    job.route, end ? (outcome!.result === null ? null : resultText(outcome!)) : json(job.result), end ? outcome!.errorCode ?? null : job.errorCode, end ? outcome!.errorMessage ?? null : job.errorMessage,
    attempt ? attempt.host : job.attemptHost, attempt ? attempt.loadMs : job.loadMs ?? null, attempt ? attempt.computeMs : job.computeMs,
  ];
}

/** A new job's input as its row holds it: the text its client sent where that is exactly the input, else written out. */
export const inputText = (job: NewJob): string => job.inputJson ?? JSON.stringify(job.input);

/**
 * A job's prompt is its input's `prompt`, stored once, in the input. Read in JS from an input in hand (`promptOf`),
 * or in SQL, where the input is not parsed, by each store's `PROMPT_SQL` (the gallery's artifact lists). Not a
 * column: a generated column is recomputed every time SQLite rewrites the row (migration 10).
 */
export const promptOf = (input: Record<string, unknown>): string | null => (typeof input.prompt === 'string' ? input.prompt : null);

/** The record of a job just stored as queued (or waiting) under `seq` (either store's insert answers it). */
export function queuedRecord(job: NewJob, seq: number): JobRecord {
  // Every field written out, in one literal: spreading the new job and adding the rest costs V8 about 25 µs an object.
  return {
    seq, id: job.id, type: job.type, model: job.model, status: job.status ?? 'queued', priority: job.priority, album: job.album,
    classes: job.classes, hosts: job.hosts ?? null, input: job.input, prompt: promptOf(job.input), grantId: job.grantId, idempotencyKey: job.idempotencyKey,
    createdAt: job.createdAt, updatedAt: job.createdAt, finishedAt: null, deadlineAt: job.deadlineAt, attempts: 0, batchId: null,
    batchSize: null, leaseHost: null, dispatchedAt: null, startedAt: null, route: null, loadMs: null, attemptHost: null, computeMs: null,
    result: null, errorCode: null, errorMessage: null,
  };
}
