import type { Logger } from 'pino';
import { MeshError, type AgentMessage, type BatchMemoryReport, type ErrorBody, type JobEvent } from '../../protocol/index.js';
import type { Clock, Timer } from '../clock.js';
import type { EventScope, JobEventBus } from '../events.js';
import type { MeshMetrics } from '../metrics.js';
import type { RegisteredModel } from '../registry/index.js';
import type { HostSession, InFlightBatch } from '../routing/index.js';
import type { Admission, QueuedJob, Scheduler } from '../scheduler/index.js';
import { artifacts, attempts, blobs, jobs as jobStore, type Db, type GroupCommit, type JobRecord } from '../store/index.js';
import { newId } from '../ids.js';
import { Deadlines } from './deadlines.js';
import { artifactView } from './views.js';

type Done = Extract<AgentMessage, { type: 'done' }>;
type Failed = Extract<AgentMessage, { type: 'failed' }>;

export interface LifecycleDeps {
  db: Db;
  /** Writes join the current group commit; acknowledgements to agents wait for it. */
  commits: GroupCommit;
  clock: Clock;
  events: JobEventBus;
  scheduler: Scheduler;
  admission: Admission;
  metrics: MeshMetrics;
  model(name: string): RegisteredModel | undefined;
  /** A grant that lets one job's outputs be uploaded, for at least `validMs`. */
  mintUploadGrant(jobId: string, validMs: number): string;
  log: Logger;
  retryBackoffMs: number;
  reconnectGraceMs: number;
  /** Learn from the memory a batch measured (MemoryPlanner.observe). */
  observeMemory?(model: string, report: BatchMemoryReport): void;
}

export const promptOf = (job: JobRecord): string | null => (typeof job.input.prompt === 'string' ? job.input.prompt : null);
const scopeOf = (job: JobRecord): EventScope => ({ type: job.type, model: job.model, album: job.album });
const iso = (ms: number): string => new Date(ms).toISOString();

/**
 * The state machine of a job after it was admitted:
 * queued → dispatched → running → succeeded | failed | cancelled | expired.
 * Every transition is written to SQLite first, then announced on the event bus.
 * Terminal transitions are conditional updates, so a late or duplicate result
 * changes nothing.
 */
export class JobLifecycle {
  readonly #deps: LifecycleDeps;
  readonly #deadlines: Deadlines;
  /** Which host and batch hold each dispatched job. */
  readonly #running = new Map<string, { host: HostSession; batch: InFlightBatch; scope: EventScope; job: JobRecord }>();
  /** The records of queued jobs, so dispatch does not read them back from SQLite. */
  readonly #queued = new Map<string, JobRecord>();
  /** Failed attempts waiting out their backoff before going back in the queue. */
  readonly #retrying = new Map<string, Timer>();
  /** After a restart: dispatched jobs waiting for their agent to reconnect and claim them. */
  readonly #orphans = new Map<string, { host: string | null; batchId: string | null; timer: Timer }>();

  constructor(deps: LifecycleDeps) {
    this.#deps = deps;
    this.#deadlines = new Deadlines(deps.clock, (jobId) => this.expire(jobId));
  }

  /** Put a freshly admitted (already stored) job in its queue. */
  admit(job: JobRecord): void {
    this.#deadlines.arm(job.id, job.deadlineAt);
    this.#emit(job, { type: 'queued', jobId: job.id, model: job.model, jobType: job.type, prompt: promptOf(job), at: iso(job.createdAt) });
    this.#enqueue(job);
  }

  #enqueue(job: JobRecord): void {
    const model = this.#deps.model(job.model);
    if (!model) {
      this.#finish(job, 'failed', { error: new MeshError('UNKNOWN_MODEL', { model: job.model, known: '(changed since the job was queued)' }) });
      return;
    }
    this.#queued.set(job.id, job);
    this.#deps.scheduler.enqueue({
      id: job.id, seq: job.seq, model: job.model, priority: job.priority, enqueuedAt: this.#deps.clock.now(),
      compatKey: `${model.pipeline.compatKey(job.input)}|${job.classes.join(',')}`, classes: job.classes, input: job.input,
    });
  }

  /** Send a released batch to a host: record it, then tell the host. */
  dispatch(model: RegisteredModel, queued: QueuedJob[], host: HostSession): void {
    const { db, clock } = this.#deps;
    const now = clock.now();
    const batchId = newId('b');
    const records: JobRecord[] = [];
    this.#deps.commits.write(() => {
      for (const entry of queued) {
        const job = this.#queued.get(entry.id) ?? jobStore.getJob(db, entry.id);
        this.#queued.delete(entry.id);
        if (!job || !jobStore.markDispatched(db, job.id, batchId, queued.length, host.id, now, now)) continue;
        attempts.insertAttempt(db, {
          jobId: job.id, n: job.attempts + 1, host: host.id, replica: `${host.id}/${model.manifest.name}`,
          batchId, batchSize: queued.length, dispatchedAt: now,
        });
        records.push({ ...job, status: 'dispatched', attempts: job.attempts + 1, batchId, batchSize: queued.length, leaseHost: host.id });
      }
    });
    if (records.length === 0) return;
    const batch: InFlightBatch = { id: batchId, model: model.manifest.name, jobIds: new Set(records.map((job) => job.id)), dispatchedAt: now };
    host.batches.set(batchId, batch);
    for (const job of records) this.#running.set(job.id, { host, batch, scope: scopeOf(job), job });
    this.#deps.admission.recordDrain(model.manifest.name, records.length);
    this.#deps.metrics.batchDispatched(model.manifest.name, records.length, records.map((job) => now - job.createdAt));
    const uploads = model.manifest.pipeline !== 'tensor';
    host.send({
      type: 'run', batchId, model: model.manifest,
      jobs: records.map((job) => ({
        id: job.id, input: job.input, deadlineAt: job.deadlineAt,
        uploadGrant: uploads ? this.#deps.mintUploadGrant(job.id, (job.deadlineAt ?? now + model.policy.maxTimeoutMs) - now) : '',
      })),
    });
    this.#deps.log.debug({ batchId, host: host.id, model: model.manifest.name, size: records.length }, 'batch dispatched');
    for (const job of records) {
      this.#emit(job, {
        type: 'dispatched', jobId: job.id, host: host.id, replica: `${host.id}/${model.manifest.name}`, batchId,
        batchSize: records.length, attempt: job.attempts, at: iso(now),
      });
    }
  }

  started(host: HostSession, batchId: string, jobIds: readonly string[]): void {
    const { db, clock } = this.#deps;
    const now = clock.now();
    const starting = jobIds.map((jobId) => this.#running.get(jobId))
      .filter((entry) => entry !== undefined && entry.batch.id === batchId && entry.job.status === 'dispatched');
    if (starting.length === 0) return;
    // Two statements for the whole batch, not two per job.
    this.#deps.commits.write(() => {
      jobStore.markBatchRunning(db, batchId, now);
      attempts.markBatchStarted(db, batchId, now);
    });
    for (const entry of starting) entry!.job.status = 'running';
    for (const entry of starting) this.#emit(entry!.job, { type: 'running', jobId: entry!.job.id, host: host.id, at: iso(now) });
  }

  progress(batchId: string, jobIds: readonly string[], step: number, total: number): void {
    const at = iso(this.#deps.clock.now());
    const pct = total > 0 ? Math.round((step / total) * 1000) / 10 : 0;
    for (const jobId of jobIds) {
      const entry = this.#running.get(jobId);
      if (!entry || entry.batch.id !== batchId) continue;
      this.#deps.events.publish({ type: 'progress', jobId, step, total, pct, at }, entry.scope);
    }
  }

  /** An agent's result. Accepted once per job, whichever attempt produced it. */
  done(host: HostSession, message: Done): void {
    const { db, clock } = this.#deps;
    // The agent forgets a result once acknowledged, so the acknowledgement waits until the result is committed.
    this.#deps.commits.afterCommit(() => host.ack(message.jobId));
    // The usual case — the attempt that holds the job reports — needs no read from the store.
    const current = this.#running.get(message.jobId);
    const job = current?.batch.id === message.batchId ? current.job : jobStore.getJob(db, message.jobId);
    if (!job) return;
    if (message.memory) this.#deps.observeMemory?.(job.model, message.memory);
    if (job.status === 'succeeded' || job.status === 'failed' || job.status === 'cancelled' || job.status === 'expired') {
      this.#deps.log.info({ jobId: job.id, status: job.status, host: host.id }, 'late result ignored');
      this.#release(job.id);
      return;
    }
    if (job.status !== 'queued' && job.batchId !== message.batchId) {
      // Another attempt holds the job now; this earlier one finished first, so it wins and the other is called off.
      const other = this.#running.get(job.id);
      if (other && other.host !== host) other.host.send({ type: 'cancel', jobId: job.id });
    }
    const missing = message.artifacts.find((artifact) => !blobs.wasUploadedFor(db, job.id, artifact.digest));
    if (missing) {
      this.failed(host, {
        type: 'failed', jobId: job.id, batchId: message.batchId, retryable: true,
        error: { code: 'INTEGRITY_FAILED', message: `output ${missing.digest} was reported but never uploaded under the job's grant` },
      });
      return;
    }
    const now = clock.now();
    const prompt = promptOf(job);
    const published = message.artifacts.map((artifact) => ({
      digest: artifact.digest, jobId: job.id, type: job.type, model: job.model, host: host.id, album: job.album, prompt,
      mediaType: artifact.mediaType, bytes: artifact.bytes, width: artifact.width ?? null, height: artifact.height ?? null,
      computeMs: message.timings.computeMs, totalMs: now - job.createdAt, createdAt: now,
    }));
    let finished = false;
    this.#deps.commits.write(() => {
      for (const artifact of published) artifacts.insertArtifact(db, artifact);
      attempts.finishAttempt(db, job.id, message.batchId, 'succeeded', now, { computeMs: message.timings.computeMs });
      finished = jobStore.finishJob(db, job.id, 'succeeded', now, { result: message.result ?? null });
    });
    if (!finished) return;
    this.#deps.metrics.jobFinished(job.model, 'succeeded', now - job.createdAt, message.timings.computeMs);
    this.#deps.scheduler.remove(job.model, job.id);
    this.#queued.delete(job.id);
    this.#afterTerminal(job.id);
    this.#emit(job, {
      type: 'succeeded', jobId: job.id, result: message.result ?? null, at: iso(now),
      artifacts: published.map((artifact) => artifactView({ ...artifact, seq: 0 })),
    });
  }

  /** An agent's failure report: retry elsewhere when it may help and attempts remain, else fail the job. */
  failed(host: HostSession, message: Failed): void {
    const { db, clock } = this.#deps;
    this.#deps.commits.afterCommit(() => host.ack(message.jobId));
    const job = jobStore.getJob(db, message.jobId);
    if (!job || (job.status !== 'dispatched' && job.status !== 'running')) {
      this.#release(message.jobId);
      return;
    }
    const now = clock.now();
    attempts.finishAttempt(db, job.id, message.batchId, 'failed', now, { errorCode: message.error.code, errorMessage: message.error.message });
    // A stale attempt's failure does not touch the attempt that holds the job now.
    if (job.batchId !== message.batchId) return;
    this.#retryOrFail(job, message.error, message.retryable);
  }

  /**
   * A host went away: every job it held fails this attempt and is retried if
   * it may be — except jobs a new session of the same host says it still runs,
   * which move to that session.
   */
  hostLost(host: HostSession, successor?: { session: HostSession; inFlight: readonly { jobId: string; batchId: string }[] }): void {
    const { db, clock } = this.#deps;
    const now = clock.now();
    const kept = new Set(successor?.inFlight.map((entry) => `${entry.batchId}/${entry.jobId}`));
    for (const batch of host.batches.values()) {
      for (const jobId of batch.jobIds) {
        const entry = this.#running.get(jobId);
        if (successor && entry && kept.has(`${batch.id}/${jobId}`)) {
          let moved = successor.session.batches.get(batch.id);
          if (!moved) successor.session.batches.set(batch.id, (moved = { ...batch, jobIds: new Set() }));
          moved.jobIds.add(jobId);
          this.#running.set(jobId, { ...entry, host: successor.session, batch: moved });
          continue;
        }
        const job = jobStore.getJob(db, jobId);
        if (!job) continue;
        const error = new MeshError('AGENT_LOST', { host: host.id });
        attempts.finishAttempt(db, jobId, batch.id, 'lost', now, { errorCode: error.code, errorMessage: error.message });
        if (job.status === 'dispatched' || job.status === 'running') this.#retryOrFail(job, error.toJSON(), true);
      }
    }
    host.batches.clear();
  }

  #retryOrFail(job: JobRecord, error: ErrorBody, retryable: boolean): void {
    const { db, clock } = this.#deps;
    const model = this.#deps.model(job.model);
    const retries = model?.policy.retries ?? 0;
    this.#release(job.id);
    if (retryable && job.attempts <= retries) {
      jobStore.requeueJob(db, job.id, clock.now());
      const backoff = this.#deps.retryBackoffMs * 2 ** (job.attempts - 1);
      this.#deps.log.info({ jobId: job.id, attempt: job.attempts, backoff, error }, 'retrying job');
      this.#retrying.set(job.id, clock.setTimer(backoff, () => {
        this.#retrying.delete(job.id);
        const current = jobStore.getJob(db, job.id);
        if (current?.status === 'queued') this.#enqueue(current);
      }));
      return;
    }
    const final = retryable && job.attempts > 1
      ? new MeshError('RETRIES_EXHAUSTED', { attempts: job.attempts, detail: error.message }).toJSON()
      : error;
    this.#finish(job, 'failed', { error: final });
  }

  /** Cancel a job that has not finished. Returns false if it already had. */
  cancel(jobId: string): boolean {
    const job = jobStore.getJob(this.#deps.db, jobId);
    if (!job) return false;
    return this.#finish(job, 'cancelled', {});
  }

  /** The job's deadline passed: it ends now, wherever it is. */
  expire(jobId: string): void {
    const job = jobStore.getJob(this.#deps.db, jobId);
    if (job) this.#finish(job, 'expired', { error: new MeshError('DEADLINE_EXCEEDED').toJSON() });
  }

  #finish(job: JobRecord, status: 'failed' | 'cancelled' | 'expired', outcome: { error?: ErrorBody | MeshError }): boolean {
    const { db, clock } = this.#deps;
    const now = clock.now();
    const error = outcome.error instanceof MeshError ? outcome.error.toJSON() : outcome.error;
    const running = this.#running.get(job.id);
    const changed = this.#deps.commits.write(() => {
      const ok = jobStore.finishJob(db, job.id, status, now, { errorCode: error?.code, errorMessage: error?.message });
      if (ok && running && status !== 'failed') {
        attempts.finishAttempt(db, job.id, running.batch.id, 'cancelled', now, { errorCode: error?.code, errorMessage: error?.message });
      }
      return ok;
    });
    if (!changed) return false;
    this.#deps.metrics.jobFinished(job.model, status, now - job.createdAt);
    this.#deps.scheduler.remove(job.model, job.id);
    this.#queued.delete(job.id);
    if (running && status !== 'failed') running.host.send({ type: 'cancel', jobId: job.id });
    this.#afterTerminal(job.id);
    const at = iso(now);
    if (status === 'failed') this.#emit(job, { type: 'failed', jobId: job.id, error: error!, at });
    else this.#emit(job, { type: status, jobId: job.id, at });
    return true;
  }

  #afterTerminal(jobId: string): void {
    this.#deadlines.clear(jobId);
    this.#retrying.get(jobId)?.cancel();
    this.#retrying.delete(jobId);
    const orphan = this.#orphans.get(jobId);
    orphan?.timer.cancel();
    this.#orphans.delete(jobId);
    this.#release(jobId);
  }

  /** Forget where a job ran; a batch with no jobs left frees its host's slot. */
  #release(jobId: string): void {
    const entry = this.#running.get(jobId);
    if (!entry) return;
    this.#running.delete(jobId);
    entry.batch.jobIds.delete(jobId);
    if (entry.batch.jobIds.size === 0) {
      entry.host.batches.delete(entry.batch.id);
      this.#deps.scheduler.requestPump();
    }
  }

  #emit(job: JobRecord, event: JobEvent): void {
    this.#deps.events.publish(event, scopeOf(job));
  }

  /**
   * At start: queued jobs go back in their queues; dispatched ones wait
   * `reconnectGraceMs` for their agent to reconnect and claim them, then are requeued.
   */
  recover(): { queued: number; orphaned: number } {
    const { db, clock } = this.#deps;
    const now = clock.now();
    let queued = 0;
    for (const job of jobStore.jobsInStates(db, ['queued'])) {
      if (job.deadlineAt !== null && job.deadlineAt <= now) { this.expire(job.id); continue; }
      this.#deadlines.arm(job.id, job.deadlineAt);
      this.#enqueue(job);
      queued++;
    }
    const orphans = jobStore.jobsInStates(db, ['dispatched', 'running']);
    for (const job of orphans) {
      this.#deadlines.arm(job.id, job.deadlineAt);
      const timer = clock.setTimer(this.#deps.reconnectGraceMs, () => this.#reclaim(job.id));
      this.#orphans.set(job.id, { host: job.leaseHost, batchId: job.batchId, timer });
    }
    return { queued, orphaned: orphans.length };
  }

  /** A reconnected agent says it still runs these jobs: they stay with it. */
  claim(host: HostSession, inFlight: readonly { jobId: string; batchId: string }[]): void {
    for (const { jobId, batchId } of inFlight) {
      const orphan = this.#orphans.get(jobId);
      if (!orphan || orphan.host !== host.id || orphan.batchId !== batchId) continue;
      orphan.timer.cancel();
      this.#orphans.delete(jobId);
      const job = jobStore.getJob(this.#deps.db, jobId);
      if (!job) continue;
      let batch = host.batches.get(batchId);
      if (!batch) host.batches.set(batchId, (batch = { id: batchId, model: job.model, jobIds: new Set(), dispatchedAt: job.updatedAt }));
      batch.jobIds.add(jobId);
      this.#running.set(jobId, { host, batch, scope: scopeOf(job), job });
    }
  }

  #reclaim(jobId: string): void {
    const orphan = this.#orphans.get(jobId);
    this.#orphans.delete(jobId);
    const { db, clock } = this.#deps;
    const job = jobStore.getJob(db, jobId);
    if (!job || (job.status !== 'dispatched' && job.status !== 'running')) return;
    const now = clock.now();
    if (orphan?.batchId) {
      attempts.finishAttempt(db, jobId, orphan.batchId, 'lost', now, { errorCode: 'AGENT_LOST', errorMessage: `host ${orphan.host ?? '?'} did not reclaim the job after a restart` });
    }
    jobStore.requeueJob(db, jobId, now);
    this.#deps.log.info({ jobId, host: orphan?.host }, 'requeued a job nobody reclaimed');
    this.#enqueue({ ...job, status: 'queued' });
  }

  /** Stop every timer (shutdown). */
  close(): void {
    this.#deadlines.clearAll();
    for (const timer of this.#retrying.values()) timer.cancel();
    for (const orphan of this.#orphans.values()) orphan.timer.cancel();
  }
}
