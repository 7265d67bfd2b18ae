import type { Logger } from 'pino';
import type { JobEvent } from '../../protocol/api/index.js';
import { MeshError, type ArtifactReport, type ErrorBody, type LoadPhases } from '../../protocol/index.js';
import type { Clock } from '../../protocol/clock.js';
import type { EventBus, EventScope } from '../events/event-bus.js';
import type { MeshMetrics } from '../metrics/mesh-metrics.js';
import type { Commits, EndedAttempt, JobRecord, MeshStore, NewJob } from '../store/index.js';
import { sourcesOf } from './references.js';
import { UnwrittenJobs, type RowWrite } from './unwritten.js';
import { artifactView } from './views.js';

export interface JobStatesDeps {
  store: MeshStore;
  /** Every write joins the current group commit. */
  commits: Commits;
  clock: Clock;
  events: EventBus;
  metrics: MeshMetrics;
  log: Logger;
}

export type EndStatus = 'failed' | 'cancelled' | 'expired';

/** Where an attempt ran: the batch, its size and the host. */
export interface AttemptPlace {
  batchId: string;
  batchSize: number;
  host: string;
  replica: string;
  /** The routing decision that chose the host, encoded (routing/route-log.ts); kept with the attempt. */
  route?: string | null;
}

/** How an attempt ended, for the parts that learn from it (breakers, throughput, attempt timeouts). */
export interface AttemptOutcome {
  job: JobRecord;
  host: string;
  batchId: string;
  batchSize: number;
  status: 'succeeded' | 'failed' | 'lost' | 'cancelled';
  error: ErrorBody | null;
  /** False when the failure is the input's fault: another replica would fail the same way. */
  retryable: boolean;
  /** The engine's time for the whole batch (succeeded only). */
  computeMs: number | null;
}

/** Told about each attempt as it moves: sent in a batch, started by its host, ended. */
export interface AttemptObserver {
  dispatched?(jobs: readonly JobRecord[], place: AttemptPlace): void;
  started?(batchId: string, jobs: readonly JobRecord[], host: string): void;
  ended?(outcome: AttemptOutcome): void;
}

/** An event's time. The last one is kept: the events of one turn mostly share their millisecond, and a busy mesh emits thousands a second. */
let lastIso = { ms: NaN, text: '' };
const iso = (ms: number): string => (ms === lastIso.ms ? lastIso.text : (lastIso = { ms, text: new Date(ms).toISOString() }).text);
const NONE: ReadonlySet<number> = new Set();
const scopeOf = (job: JobRecord): EventScope => ({ type: job.type, model: job.model, album: job.album });

/**
 * The job state machine and nothing else:
 * (waiting →) queued → dispatched → running → succeeded | failed | cancelled | expired.
 * Each transition is written to the store (through the group commit) and then
 * announced on the event bus. Jobs that are not finished are kept in memory,
 * so the hot path never reads them back; terminal transitions are conditional
 * updates, so a late or duplicate one changes nothing. Roles that keep
 * per-job state (queues, timers, placements) forget a job through `onTerminal`.
 */
export class JobStates {
  readonly #deps: JobStatesDeps;
  readonly #active = new Map<string, JobRecord>();
  readonly #terminal = new Set<(job: JobRecord) => void>();
  readonly #observers = new Set<AttemptObserver>();
  /** Jobs not written yet: after the turn they were admitted in, or when they end (`create`), or earlier (`persist`). */
  readonly #unwritten: UnwrittenJobs;

  constructor(deps: JobStatesDeps) {
    this.#deps = deps;
    this.#unwritten = new UnwrittenJobs(deps);
  }

  /** A job's current record: from memory while it is active (or its row is about to be written), else from the store. */
  async get(id: string): Promise<JobRecord | null> {
    return this.#active.get(id) ?? this.#unwritten.ended(id) ?? this.#deps.store.jobs.getJob(id);
  }

  /** A job's record while it is not finished (the hot path's: no store read); null once it ended, or if unknown. */
  active(id: string): JobRecord | null {
    return this.#active.get(id) ?? null;
  }

  /** How many unfinished jobs use a model (waiting, queued, dispatched or running). */
  activeOn(model: string): number {
    let count = 0;
    for (const job of this.#active.values()) if (job.model === model) count++;
    return count;
  }

  /** Run `listener` once for every job that reaches a terminal state. */
  onTerminal(listener: (job: JobRecord) => void): void {
    this.#terminal.add(listener);
  }

  /** Tell `observer` about every attempt from now on. */
  observeAttempts(observer: AttemptObserver): void {
    this.#observers.add(observer);
  }

  /**
   * Store a new job as queued; `staleKeyOf` names an old job whose expired idempotency key it takes over. `write`: when
   * its row is written (unwritten.ts, RowWrite). `turn`: after this turn, as it stands then — the dispatch that found a
   * free host in this turn is in its insert — and before the commit its admission waits for (`stored`). `end`: its
   * client waits for its end on the connection that submitted it (OIP infer, `Prefer: wait`), so it is written once,
   * when it ends — its insert, dispatch and end in one row and one commit: an orchestrator that dies before takes the
   * client's connection with it, and the client, which was told nothing, submits again. It is written earlier, as it
   * stands, if an attempt of it fails or nobody waits for it any more (`persist`). A job with an idempotency key is
   * written now: its key must be found by the next request that names it.
   */
  create(job: NewJob, staleKeyOf?: string, write: RowWrite = 'now', waitsFor: string | null = null): JobRecord {
    const { store, commits } = this.#deps;
    let record: JobRecord;
    if (write !== 'now' && !staleKeyOf && job.idempotencyKey === null) {
      record = store.jobs.reserveJob(job);
      this.#unwritten.add(record, write, job.inputJson);
    } else {
      record = staleKeyOf
        ? commits.write(() => {
          store.jobs.releaseIdempotencyKey(staleKeyOf);
          return store.jobs.insertJob(job);
        })
        : commits.writeOne(() => store.jobs.insertJob(job));
    }
    this.#active.set(record.id, record);
    if (record.status === 'waiting') {
      const sources = sourcesOf(record.input);
      this.#emit(record, { type: 'waiting', jobId: record.id, model: record.model, jobType: record.type, prompt: record.prompt, for: sources, at: iso(record.createdAt) });
    } else this.#emit(record, { type: 'queued', jobId: record.id, model: record.model, jobType: record.type, prompt: record.prompt, ...(waitsFor ? { waitsFor } : {}), at: iso(record.createdAt) });
    return record;
  }

  /**
   * A waiting job's sources succeeded: it is queued, its input naming their outputs by digest (`input`). `alongside`
   * writes in the same commit (which pictures it names). Returns false unless it was waiting.
   */
  released(job: JobRecord, input: Record<string, unknown>, alongside?: () => void): boolean {
    if (!this.#holds(job, ['waiting'])) return false;
    const now = this.#deps.clock.now();
    const changed = this.#deps.commits.write(() => {
      if (!this.#deps.store.jobs.releaseJob(job.seq, input, now)) return false;
      alongside?.();
      return true;
    });
    if (!changed) return false;
    Object.assign(job, { status: 'queued', input, updatedAt: now });
    this.#emit(job, { type: 'queued', jobId: job.id, model: job.model, jobType: job.type, prompt: job.prompt, at: iso(now) });
    return true;
  }

  /**
   * Write a deferred job (`create`) now, as it stands, if it is not written yet: its client stopped waiting (a wait that
   * ran out, a connection closed) and the job goes on as any other. Resolves once it is committed — what the 202 of a
   * wait that ran out promises.
   */
  persist(job: JobRecord): Promise<void> {
    if (!this.#unwritten.has(job)) return Promise.resolve();
    this.#deps.commits.writeOne(() => this.#unwritten.write(job));
    return this.#deps.commits.durable();
  }

  /** The jobs not written yet (`create`, deferred): unfinished, or ended with their row about to be written. */
  unwritten(): IterableIterator<JobRecord> {
    return this.#unwritten.all();
  }

  /** Whether a job is written in the store (one admitted with `write` `end` is not, until it ends or `persist`). */
  written(job: JobRecord): boolean {
    return !this.#unwritten.has(job);
  }

  /**
   * Resolves once a job admitted in this turn is stored: its row committed (after the turn, for one created with `write`
   * `turn`). Rejects with the store's error when its row or that commit was refused (a full disk): the job then has no
   * row, and its admission takes it back (`ended` writes nothing for it).
   */
  stored(job: JobRecord): Promise<void> {
    return this.#unwritten.stored(job) ?? this.#deps.commits.durable();
  }

  /** Write the rows of ended jobs that wait for the end of the turn (shutdown). */
  close(): void {
    this.#unwritten.flush();
  }

  /**
   * A job admitted in a turn whose commit was refused (a full disk): SQLite rolled its row back, so it ends without one
   * when its admission cancels it (`ended` would find no row to finish, and the job would stay in memory).
   */
  unstored(job: JobRecord): void {
    this.#unwritten.refuse(job);
  }

  /** Run `fn` once the job's end is written: at once, unless it waits for the end of the turn (`succeeded`). */
  whenWritten(job: JobRecord, fn: () => void): void {
    this.#unwritten.whenWritten(job, fn);
  }

  /** Write the ends that wait for the end of the turn now: a read of the jobs table is about to find them. */
  writeEnds(): void {
    this.#unwritten.writeEnds();
  }

  /** At start: the jobs the store holds as not finished, made active again. */
  async restore(): Promise<JobRecord[]> {
    const records = await this.#deps.store.jobs.jobsInStates(['waiting', 'queued', 'dispatched', 'running']);
    for (const record of records) this.#active.set(record.id, record);
    return records;
  }

  /**
   * Queued jobs leave for a host as one batch (one statement for the batch; the attempt is written when it
   * ends, and lives on the job's row until then). Returns those that were still queued.
   */
  dispatched(jobs: readonly JobRecord[], place: Omit<AttemptPlace, 'batchSize'>): JobRecord[] {
    const { store, clock } = this.#deps;
    const now = clock.now();
    const route = place.route ?? null;
    // Only jobs this orchestrator holds as queued leave; the statement's own condition is the second line.
    const queued = jobs.filter((job) => job.status === 'queued' && this.#active.get(job.id) === job);
    // A deferred job's dispatch is written with its end (its row does not exist yet).
    const stored = this.#unwritten.size === 0 ? queued : queued.filter((job) => !this.#unwritten.has(job));
    const still = stored.length === 0 ? NONE : this.#deps.commits.write(() => store.jobs.markDispatched(stored.map((job) => job.seq), place.batchId, place.host, now, route));
    const moved = queued.filter((job) => still.has(job.seq) || this.#unwritten.has(job));
    for (const job of moved) {
      // Field by field rather than Object.assign of a literal: no object made and thrown away per job, on the hot path.
      job.status = 'dispatched';
      job.attempts += 1;
      job.batchId = place.batchId;
      job.batchSize = jobs.length;
      job.leaseHost = place.host;
      job.dispatchedAt = now;
      job.startedAt = null;
      job.loadMs = null;
      job.updatedAt = now;
      job.route = route;
      this.#emit(job, {
        type: 'dispatched', jobId: job.id, host: place.host, replica: place.replica, batchId: place.batchId,
        batchSize: moved.length, attempt: job.attempts, at: iso(now),
      });
    }
    if (moved.length > 0) for (const observer of this.#observers) observer.dispatched?.(moved, { ...place, batchSize: moved.length });
    return moved;
  }

  /** The host is loading the model a batch waits for (the jobs stay dispatched): announced, never stored. */
  loading(jobs: readonly JobRecord[], host: string): void {
    const at = iso(this.#deps.clock.now());
    for (const job of jobs) if (job.status === 'dispatched') this.#emit(job, { type: 'loading', jobId: job.id, model: job.model, host, at });
  }

  /**
   * The host began a batch: its jobs still dispatched are running (two statements for the whole batch).
   * `loadMs` is how long it waited for the model (present only after a load), kept with the attempt. A batch reported
   * started by its first result (`byResult`: when it started, dated back) is not stored as running: its jobs finish in
   * this same tick, and their attempts record the start.
   */
  started(batchId: string, jobs: readonly JobRecord[], host: string, loadMs?: number, byResult?: { startedAt: number }, phases?: LoadPhases): void {
    const { store, clock } = this.#deps;
    const starting = jobs.filter((job) => job.status === 'dispatched');
    if (starting.length === 0) return;
    const now = Math.round(byResult?.startedAt ?? clock.now());
    const waited = loadMs === undefined ? undefined : Math.round(loadMs);
    const stored = this.#unwritten.size === 0 ? starting : starting.filter((job) => !this.#unwritten.has(job));
    if (!byResult && stored.length > 0) this.#deps.commits.write(() => store.jobs.markRunning(stored.map((job) => job.seq), now));
    for (const job of starting) {
      job.status = 'running';
      job.startedAt = now;
      job.loadMs = waited ?? 0;
      if (waited !== undefined) this.#emit(job, { type: 'loading', jobId: job.id, model: job.model, host, loadMs: waited, ...(phases ? { phases } : {}), at: iso(now) });
      this.#emit(job, { type: 'running', jobId: job.id, host, at: iso(now) });
    }
    for (const observer of this.#observers) observer.started?.(batchId, starting, host);
  }

  /** Progress is announced, never stored. */
  progress(job: JobRecord, step: number, total: number): void {
    const pct = total > 0 ? Math.round((step / total) * 1000) / 10 : 0;
    this.#emit(job, { type: 'progress', jobId: job.id, step, total, pct, at: iso(this.#deps.clock.now()) });
  }

  /** A preview of the job's picture so far: live to its followers, never stored. */
  preview(job: JobRecord, step: number, total: number, png: string): void {
    this.#deps.events.publishLive({ type: 'preview', jobId: job.id, step, total, mediaType: 'image/png', b64: png, at: iso(this.#deps.clock.now()) }, scopeOf(job));
  }

  /**
   * The attempt in flight in `batchId` ended without a result (the job itself may be retried). `retryable`
   * false says the input is at fault.
   */
  attemptEnded(job: JobRecord, batchId: string, status: 'failed' | 'lost', error: ErrorBody, retryable = true): void {
    if (job.batchId !== batchId || (job.status !== 'dispatched' && job.status !== 'running')) return;
    const now = this.#deps.clock.now();
    // A deferred job whose attempt failed is written as it stands, before its attempt: its retry is a job like any other's.
    this.#deps.commits.write(() => {
      if (this.#unwritten.has(job)) this.#unwritten.write(job);
      this.#recordAttempt(job, status, now, { errorCode: error.code, errorMessage: error.message });
    });
    this.#attemptOver(job, { status, error, retryable, computeMs: null });
  }

  #attemptOver(job: JobRecord, outcome: Pick<AttemptOutcome, 'status' | 'error' | 'retryable' | 'computeMs'>): void {
    this.#announce(this.#endedAttempt(job, outcome));
  }

  /** The attempt in flight as it ended, for the observers; null when none watches or the job holds no attempt. */
  #endedAttempt(job: JobRecord, outcome: Pick<AttemptOutcome, 'status' | 'error' | 'retryable' | 'computeMs'>): AttemptOutcome | null {
    if (this.#observers.size === 0 || !job.batchId || !job.leaseHost) return null;
    return { job, host: job.leaseHost, batchId: job.batchId, batchSize: job.batchSize ?? 1, ...outcome };
  }

  #announce(ended: AttemptOutcome | null): void {
    if (ended) for (const observer of this.#observers) observer.ended?.(ended);
  }

  /** Write the attempt in flight, now that it has ended. */
  #recordAttempt(job: JobRecord, status: EndedAttempt['status'], now: number, outcome: Pick<EndedAttempt, 'computeMs' | 'errorCode' | 'errorMessage'>): void {
    if (!job.batchId || !job.leaseHost) return;
    this.#deps.store.attempts.recordAttempt({
      jobId: job.id, n: job.attempts, host: job.leaseHost, batchId: job.batchId, batchSize: job.batchSize ?? 1, status,
      dispatchedAt: job.dispatchedAt ?? now, startedAt: job.startedAt, finishedAt: now, loadMs: job.loadMs ?? null, route: job.route, ...outcome,
    }, job.model);
  }

  /** A job whose attempt failed goes back to waiting; returns false if it had already finished. */
  requeued(job: JobRecord): boolean {
    if (!this.#holds(job, ['dispatched', 'running'])) return false;
    const now = this.#deps.clock.now();
    const requeue = (): boolean => this.#deps.store.jobs.requeueJob(job.seq, now);
    const changed = this.#unwritten.has(job) ? this.#deps.commits.write(() => {
      this.#unwritten.write(job);
      return requeue();
    }) : this.#deps.commits.writeOne(requeue);
    if (changed) Object.assign(job, { status: 'queued', leaseHost: null, updatedAt: now });
    return changed;
  }

  /** The attempt in `batchId` delivered: record its artifacts and finish the job. Returns false if it had already finished. */
  succeeded(job: JobRecord, outcome: { batchId: string; host: string; artifacts: readonly ArtifactReport[]; result: unknown; computeMs: number; energyJ?: number | null }): boolean {
    if (!this.#holds(job, ['queued', 'dispatched', 'running'])) return false;
    const { store, clock } = this.#deps;
    const now = clock.now();
    const published = outcome.artifacts.map((artifact) => ({
      digest: artifact.digest, jobId: job.id, type: job.type, model: job.model, host: outcome.host, album: job.album,
      mediaType: artifact.mediaType, bytes: artifact.bytes, width: artifact.width ?? null, height: artifact.height ?? null,
      computeMs: outcome.computeMs, totalMs: now - job.createdAt, energyJ: outcome.energyJ ?? null, createdAt: now,
    }));
    // The attempt it succeeded with is kept on the job's row, not as a row of attempts (migration 11).
    const kept = job.batchId === outcome.batchId && job.leaseHost
      ? { host: job.leaseHost, startedAt: job.startedAt, loadMs: job.loadMs ?? null, computeMs: outcome.computeMs }
      : undefined;
    const result = outcome.result ?? null;
    // The result's JSON, made once: the row keeps it and the event carries it (a tensor's numbers written out are most
    // of the cost of either).
    const resultJson = JSON.stringify(result);
    const ending = { result, resultJson, attempt: kept };
    const finish = (): boolean => {
      if (!this.#unwritten.has(job)) return store.jobs.finishJob(job.seq, 'succeeded', now, ending);
      // A deferred job: its whole life in one row.
      this.#unwritten.write(job, { status: 'succeeded', now, outcome: ending });
      return true;
    };
    // An end without artifacts (a tensor's) is written after this turn, its answer or event on its way first (the
    // whole row of a job not written yet, the end of one that is) — unless the job has an idempotency key, whose next
    // request reads its row.
    const later = published.length === 0 && job.idempotencyKey === null;
    if (later) this.#unwritten.endLater(job, { status: 'succeeded', now, outcome: ending });
    const finished = later || (published.length === 0 ? this.#deps.commits.writeOne(finish) : this.#deps.commits.write(() => {
      if (!finish()) return false;
      for (const artifact of published) store.artifacts.insertArtifact(artifact);
      return true;
    }));
    if (!finished) return false;
    job.attemptHost = kept?.host ?? null;
    job.computeMs = kept?.computeMs ?? null;
    // Taken before the job lets go of its host (#terminated), told to the observers after the event.
    const attempt = job.batchId === outcome.batchId ? this.#endedAttempt(job, { status: 'succeeded', error: null, retryable: true, computeMs: outcome.computeMs }) : null;
    job.result = result;
    job.artifactCount = published.length;
    this.#terminated(job, 'succeeded', now);
    // The client hears first: what routing and the metrics learn from the attempt follows in this same tick, before
    // anything else is dispatched (the next pump is a microtask away).
    const event: SucceededEvent = {
      type: 'succeeded', jobId: job.id, result, at: iso(now),
      artifacts: published.map((artifact) => artifactView({ ...artifact, seq: 0, prompt: job.prompt })),
    };
    this.#emit(job, event, succeededJson(event, resultJson));
    this.#announce(attempt);
    this.#deps.metrics.jobFinished(job.model, 'succeeded', now - job.createdAt, outcome.computeMs);
    if (outcome.energyJ) this.#deps.metrics.energyUsed(job.model, outcome.host, outcome.energyJ);
    return true;
  }

  /**
   * End a job without a result. `attemptBatchId` names an attempt still in
   * flight (cancelled or expired while running), which ends as cancelled.
   * Returns false if the job had already finished.
   */
  ended(job: JobRecord, status: EndStatus, error?: ErrorBody | MeshError, attemptBatchId?: string): boolean {
    if (!this.#holds(job, ['waiting', 'queued', 'dispatched', 'running'])) return false;
    const { store, clock } = this.#deps;
    const now = clock.now();
    const body = error instanceof MeshError ? error.toJSON() : error;
    const changed = this.#deps.commits.write(() => {
      const outcome = { errorCode: body?.code, errorMessage: body?.message };
      if (this.#unwritten.has(job)) this.#unwritten.write(job, { status, now, outcome });
      // A job whose row was refused at its admission has none to end: it is taken back in memory only.
      else if (!this.#unwritten.refused(job) && !store.jobs.finishJob(job.seq, status, now, outcome)) return false;
      if (attemptBatchId && attemptBatchId === job.batchId) this.#recordAttempt(job, 'cancelled', now, { errorCode: body?.code, errorMessage: body?.message });
      return true;
    });
    if (!changed) return false;
    if (attemptBatchId && attemptBatchId === job.batchId) this.#attemptOver(job, { status: 'cancelled', error: body ?? null, retryable: false, computeMs: null });
    this.#deps.metrics.jobFinished(job.model, status, now - job.createdAt);
    job.errorCode = body?.code ?? null;
    job.errorMessage = body?.message ?? null;
    this.#terminated(job, status, now);
    const at = iso(now);
    if (status === 'failed') this.#emit(job, { type: 'failed', jobId: job.id, error: body ?? new MeshError('INTERNAL', { detail: 'failed without an error' }).toJSON(), at });
    else this.#emit(job, { type: status, jobId: job.id, at });
    return true;
  }

  /**
   * Whether `job` is the record this orchestrator holds for an unfinished job, in one of `statuses`: the state in
   * memory decides a transition (a store that writes behind cannot answer its conditional update at once).
   */
  #holds(job: JobRecord, statuses: readonly JobRecord['status'][]): boolean {
    return this.#active.get(job.id) === job && statuses.includes(job.status);
  }

  #terminated(job: JobRecord, status: JobRecord['status'], now: number): void {
    job.status = status;
    job.finishedAt = now;
    job.updatedAt = now;
    job.leaseHost = null;
    this.#active.delete(job.id);
    for (const listener of this.#terminal) listener(job);
  }

  #emit(job: JobRecord, event: JobEvent, json?: string): void {
    this.#deps.events.publish(event, scopeOf(job), json);
  }
}

type SucceededEvent = Extract<JobEvent, { type: 'succeeded' }>;

/**
 * A `succeeded` event's JSON around its result's JSON made already: the bytes JSON.stringify(event) writes for the
 * event as JobStates.succeeded builds it (its fields in that order). Every field is taken out by name, so a field added
 * to the event is a compile error here until it is written too.
 */
export function succeededJson(event: SucceededEvent, resultJson: string): string {
  const { type, jobId, result: _written, at, artifacts, ...unwritten } = event;
  const none: Record<string, never> = unwritten;
  void none;
  return `{"type":${JSON.stringify(type)},"jobId":${JSON.stringify(jobId)},"result":${resultJson},"at":${JSON.stringify(at)},"artifacts":${JSON.stringify(artifacts)}}`;
}

export { scopeOf };
