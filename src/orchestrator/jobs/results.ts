import type { Logger } from 'pino';
import { isErrorCode, isTerminal, MeshError, type AgentMessage, type BatchMemoryReport, type ErrorBody, type LoadPhases } from '../../protocol/index.js';
import type { Clock } from '../../protocol/clock.js';
import type { LinkRefusals } from './refusals.js';
import type { HostSession } from '../routing/index.js';
import type { Commits, JobRecord } from '../store/index.js';
import type { Failover } from './failover.js';
import type { InFlight } from './in-flight.js';
import type { DigestLocks } from '../blobs/digest-locks.js';
import type { JobOutputs } from './outputs.js';
import type { JobStates } from './states.js';

/**
 * The last `capacity` ids added, oldest forgotten first. A job ends once, so first in, first out is least recently
 * used here; an LRUCache's bookkeeping for every ended job was 0.85 % of the orchestrator's CPU under load (perf).
 */
class RecentIds {
  readonly #ids = new Set<string>();
  readonly #order: string[];
  #next = 0;

  constructor(capacity: number) {
    this.#order = new Array<string>(capacity).fill('');
  }

  add(id: string): void {
    if (this.#ids.has(id)) return;
    const oldest = this.#order[this.#next]!;
    if (oldest !== '') this.#ids.delete(oldest);
    this.#order[this.#next] = id;
    this.#next = (this.#next + 1) % this.#order.length;
    this.#ids.add(id);
  }

  has(id: string): boolean {
    return this.#ids.has(id);
  }
}

/** A PNG's 8-byte signature, as the start of its base64 (the first 6 bytes make 8 whole characters). */
const PNG_BASE64_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a]).toString('base64');

type Done = Extract<AgentMessage, { type: 'done' }>;
type Failed = Extract<AgentMessage, { type: 'failed' }>;

export interface ResultIntakeDeps {
  clock: Clock;
  states: JobStates;
  inFlight: InFlight;
  failover: Failover;
  outputs: JobOutputs;
  /** A result's outputs stay locked from their checks to the job's publishing (see DigestLocks). */
  locks: DigestLocks;
  /** Acknowledgements wait for the commit that recorded what they acknowledge. */
  commits: Commits;
  log: Logger;
  /** Tells of refused reports, once per message. */
  refusals: LinkRefusals;
  /** Learn from the memory a batch measured (MemoryPlanner.observe). */
  observeMemory?(model: string, report: BatchMemoryReport): void;
}

/**
 * What agents report about the work they were given: `started`, `progress`,
 * `done` and `failed`. A report counts only if it comes from the session the
 * job's current attempt was dispatched to, about the batch it was given in;
 * anything else is refused, logged with the host and counted — whatever a
 * valid agent grant allows, it does not let one host decide another's jobs.
 * A result is acknowledged once committed, so the agent keeps re-sending it
 * until it is safe.
 */
export class ResultIntake {
  readonly #deps: ResultIntakeDeps;
  /**
   * Jobs that ended lately: a report about one races its end (progress of a job just cancelled) and is no intrusion.
   * Kept in memory, so a report about jobs a host does not hold never reads the store, however many it names.
   */
  readonly #ended = new RecentIds(16_384);
  /**
   * Jobs whose result is being checked (its outputs against the store, its inline files stored): the first result of
   * an attempt wins, so a duplicate or a late failure of the same job that arrives meanwhile is ignored, as it would
   * be a moment later when the job has ended.
   */
  readonly #settling = new Set<string>();

  constructor(deps: ResultIntakeDeps) {
    this.#deps = deps;
    deps.states.onTerminal((job) => this.#ended.add(job.id));
  }

  /** The host began loading the model this batch waits for. */
  loading(host: HostSession, batchId: string, jobIds: readonly string[]): void {
    const jobs = this.#held(host, batchId, jobIds, 'loading');
    if (jobs.length > 0) this.#deps.states.loading(jobs, host.id);
  }

  started(host: HostSession, batchId: string, jobIds: readonly string[], loadMs?: number, phases?: LoadPhases): void {
    const jobs = this.#held(host, batchId, jobIds, 'started');
    if (jobs.length > 0) this.#deps.states.started(batchId, jobs, host.id, loadMs, undefined, phases);
  }

  progress(host: HostSession, batchId: string, jobIds: readonly string[], step: number, total: number): void {
    for (const job of this.#held(host, batchId, jobIds, 'progress')) this.#deps.states.progress(job, step, total);
  }

  /**
   * The host's engine is done with a batch; its outputs are on their way. Its slot takes the next batch now. A batch
   * the host no longer holds (its jobs ended meanwhile) is no intrusion: the report is dropped.
   */
  computed(host: HostSession, batchId: string): void {
    this.#deps.inFlight.computed(host, batchId);
  }

  /** A preview from the host that holds the job, if it is a PNG (what it shows is the engine's; what it is, ours to check). */
  preview(host: HostSession, batchId: string, jobId: string, step: number, total: number, png: string): void {
    if (!png.startsWith(PNG_BASE64_SIGNATURE)) return this.#deps.refusals.refuse(host, 'preview', [jobId], 'that is not a PNG');
    for (const job of this.#held(host, batchId, [jobId], 'preview')) this.#deps.states.preview(job, step, total, png);
  }

  done(host: HostSession, message: Done): void {
    const job = this.#settled(host, message, 'done');
    if (!job || this.#settling.has(job.id)) return;
    if (job.status === 'dispatched') this.#startedByResult(host, message);
    if (message.memory) this.#deps.observeMemory?.(job.model, message.memory);
    // A result without files (a tensor's) is published in this turn; files are checked against the store first.
    if (message.artifacts.length === 0) return this.#publish(host, job, message);
    this.#settling.add(job.id);
    // The outputs' digests stay locked from the checks to the publishing: bytes the job is about to name are not
    // reclaimed (deleted results whose bytes are the same) in between.
    const digests = message.artifacts.map((artifact) => artifact.digest);
    this.#deps.locks.holding(digests, () => this.#keepOutputs(host, job.type, message)).catch((error: unknown) => {
      this.#deps.log.error({ err: error, jobId: job.id, host: host.id }, 'a result with outputs could not be settled');
    }).finally(() => this.#settling.delete(job.id));
  }

  /**
   * A result's outputs before its job is published with them. Uploaded outputs were checked against the media type
   * they were uploaded with (that type counts, not the report's) and must have been uploaded for this job. Outputs
   * that came inline are hashed, their bytes checked against their media type and the job type's list
   * (registry/output-media.ts), and stored. The checks are asynchronous: the job is looked up again after them, and a
   * job that ended or moved on meanwhile (cancelled, expired, its link lost) is not published — one that ended is
   * acknowledged, as any result for a finished job.
   */
  async #keepOutputs(host: HostSession, jobType: string, message: Done): Promise<void> {
    let failure: ErrorBody | null = null;
    try {
      failure = await this.#uploadedProblem(jobType, message);
      if (!failure) {
        for (const artifact of message.artifacts) if (artifact.inline !== undefined) await this.#deps.outputs.keepInline(jobType, { ...artifact, inline: artifact.inline });
      }
    } catch (error) {
      // Bytes that are not what they claim fail the attempt as corrupt; a bucket that did not answer says so (the
      // attempt is retried); anything else (a full disk) is the orchestrator's.
      const code = error instanceof MeshError ? (error.code === 'BLOB_STORE_UNAVAILABLE' || error.code === 'STORE_UNAVAILABLE' ? error.code : 'INTEGRITY_FAILED') : 'INTERNAL';
      failure = { code, message: `an inline output was not kept: ${(error as Error).message}` };
    }
    const job = this.#deps.states.active(message.jobId);
    if (!job || !this.#deps.inFlight.holds(host, message.batchId, message.jobId)) {
      if (!job && this.#ended.has(message.jobId)) this.#ack(host, message.jobId);
      else this.#deps.log.debug({ jobId: message.jobId, batchId: message.batchId, host: host.id }, 'the attempt ended while its outputs were checked; result ignored');
      return;
    }
    if (failure) {
      this.#deps.failover.attemptFailed(job, message.batchId, 'failed', failure, true);
      this.#ack(host, job.id);
      return;
    }
    this.#publish(host, job, message);
  }

  /** Why the uploaded outputs a report names cannot be published as reported (INTEGRITY_FAILED), or null. */
  async #uploadedProblem(jobType: string, message: Done): Promise<ErrorBody | null> {
    const mislabelled = await this.#deps.outputs.mislabelled(jobType, message.artifacts);
    if (mislabelled) return { code: 'INTEGRITY_FAILED', message: mislabelled };
    for (const artifact of message.artifacts) {
      if (artifact.inline === undefined && !(await this.#deps.outputs.wasUploaded(message.jobId, artifact.digest))) {
        return { code: 'INTEGRITY_FAILED', message: `output ${artifact.digest} was reported but never uploaded for the job` };
      }
    }
    return null;
  }

  /**
   * A batch that ended within the agent's report delay was never reported started (agent/batch-reports.ts): its first
   * result starts it, dated back by its compute time, so the record and the event stream read as for any batch.
   */
  #startedByResult(host: HostSession, message: Done): void {
    const batch = this.#deps.inFlight.of(message.jobId)?.batch;
    const jobs = [...(batch?.jobIds ?? [])].map((jobId) => this.#deps.states.active(jobId)).filter((job): job is JobRecord => job !== null);
    const { loadMs, computeMs, phases } = message.timings;
    this.#deps.states.started(message.batchId, jobs, host.id, loadMs > 0 ? loadMs : undefined, { startedAt: this.#deps.clock.now() - computeMs }, phases);
  }

  #publish(host: HostSession, job: JobRecord, message: Done): void {
    this.#deps.states.succeeded(job, {
      batchId: message.batchId, host: host.id, artifacts: message.artifacts, result: message.result, computeMs: message.timings.computeMs,
      energyJ: message.energyJ ?? null,
    });
    // A result without files is written after this turn (JobStates.succeeded): its acknowledgement follows that write.
    this.#deps.states.whenWritten(job, () => this.#ack(host, job.id));
  }

  failed(host: HostSession, message: Failed): void {
    const job = this.#settled(host, message, 'failed');
    if (!job || this.#settling.has(job.id)) return;
    this.#deps.failover.attemptFailed(job, message.batchId, 'failed', registered(message.error), message.retryable);
    this.#ack(host, job.id);
  }

  /**
   * The job a result is about, if this session may settle it. A job already
   * finished is acknowledged (a duplicate, or a result whose acknowledgement
   * was lost) and nothing changes.
   */
  #settled(host: HostSession, message: Done | Failed, what: 'done' | 'failed'): JobRecord | null {
    const job = this.#deps.states.active(message.jobId);
    if (job && this.#deps.inFlight.holds(host, message.batchId, message.jobId)) return job;
    if (!job && this.#ended.has(message.jobId)) {
      this.#finishedJob(host, message.jobId);
      return null;
    }
    if (job) {
      this.#refuse(host, message.jobId, what);
      return null;
    }
    // Neither unfinished nor ended lately: the store says whether it is a job that finished long ago (a result re-sent
    // after a restart, acknowledged) or one this session has no business with.
    void this.#deps.states.get(message.jobId).then((stored) => {
      if (stored && isTerminal(stored.status)) this.#finishedJob(host, stored.id);
      else this.#refuse(host, message.jobId, what);
    }, (error: unknown) => this.#deps.log.warn({ err: error, jobId: message.jobId }, 'a result could not be looked up; the agent will send it again'));
    return null;
  }

  #finishedJob(host: HostSession, jobId: string): void {
    this.#deps.log.debug({ jobId, host: host.id }, 'result for a finished job; acknowledged, ignored');
    this.#ack(host, jobId);
  }

  #refuse(host: HostSession, jobId: string, what: 'done' | 'failed'): void {
    this.#deps.refusals.refuse(host, what, [jobId]);
    // The agent may be an honest one whose job has moved on (it was lost and the job retried elsewhere): tell it to
    // let go — unless it holds the job in another batch now, which a cancel would stop.
    if (this.#deps.inFlight.of(jobId)?.host !== host) host.send({ type: 'cancel', jobId });
  }

  /**
   * The jobs of `jobIds` this session holds in `batchId`; the rest are refused, together. Every id costs two lookups
   * in memory (the placement, the recently ended) and nothing more, so a message's cost is bounded by the link's
   * limit on the ids it may name.
   */
  #held(host: HostSession, batchId: string, jobIds: readonly string[], what: 'loading' | 'started' | 'progress' | 'preview'): JobRecord[] {
    const jobs: JobRecord[] = [];
    let refused: string[] | null = null;
    for (const jobId of jobIds) {
      const job = this.#deps.inFlight.holds(host, batchId, jobId) ? this.#deps.states.active(jobId) : null;
      if (job) jobs.push(job);
      // Progress can race a cancellation: a report about a job that just ended is not an intrusion.
      else if (!this.#ended.has(jobId)) (refused ??= []).push(jobId);
    }
    if (refused) this.#deps.refusals.refuse(host, what, refused);
    return jobs;
  }

  #ack(host: HostSession, jobId: string): void {
    // The agent forgets a result once acknowledged, so the acknowledgement waits until the result is committed.
    this.#deps.commits.afterCommit(() => host.ack(jobId));
  }
}

/** An agent's error with a code from the registry; an unknown code becomes ENGINE_FAILED, keeping the agent's words. */
function registered(error: ErrorBody): ErrorBody {
  return isErrorCode(error.code) ? error : { code: 'ENGINE_FAILED', message: `${error.code}: ${error.message}` };
}
