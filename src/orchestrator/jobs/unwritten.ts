import type { Logger } from 'pino';
import type { Commits, JobEnd, JobRecord, MeshStore } from '../store/index.js';

/**
 * When a new job's row is written (JobStates.create): `now`, in its admission; `turn`, after the turn it was admitted
 * in, as it stands then — its dispatch too, when a host was free — and before the commit its 202 waits for; `end`,
 * when it ends, for a client that waits for its end on the request that submitted it.
 */
export type RowWrite = 'now' | 'turn' | 'end';

/** A job written after its turn, and who waits for its commit. */
interface Admitted {
  job: JobRecord;
  resolve(): void;
  reject(error: unknown): void;
}

/**
 * The jobs admitted and not written yet, and the ends not written yet (docs/architecture.md, *Writes: group commit*).
 * A job its client waits for on the request that submitted it is written once, when it ends, or earlier, as it
 * stands, when something must find it after a crash (`write`). Any other job without an idempotency key is written
 * after the turn it was admitted in (`stored`): by then its dispatch has gone to a free host, so the insert, the
 * dispatch's update and the statement's cost are off the way of the run. A job's end without files is written after
 * the turn it ended in (`endLater`: the whole row of a job not written yet, the end of one that is), with those of the
 * other jobs that ended meanwhile: off the way of the answer or the event that end is about to make; what must follow
 * its write (the agent's acknowledgement) waits for it (`whenWritten`). Until then the ended job is found here by id
 * (`ended`), a job never written is still listed (`all`), and a read of the table writes the ends first (`writeEnds`).
 * Shutdown writes what is left (`flush`, from JobStates.close) before the store's last commit.
 */
export class UnwrittenJobs {
  readonly #store: MeshStore;
  readonly #commits: Commits;
  readonly #log: Logger;
  /** Each job not written, with its end once it ended (null while it runs). */
  readonly #jobs = new Map<JobRecord, JobEnd | null>();
  /** The ends of jobs already written, to write after the turn they ended in. */
  readonly #ends = new Map<JobRecord, JobEnd>();
  /** Every ended job whose end is not written yet, by id; and what waits for its write. */
  readonly #ended = new Map<string, JobRecord>();
  readonly #afterWrite = new Map<JobRecord, (() => void)[]>();
  /** Jobs to write after this turn, and, until their commit, what their admission waits for. */
  #admitted: Admitted[] = [];
  readonly #committing = new Map<JobRecord, Promise<void>>();
  /** Jobs whose row or its commit was refused (a full disk): never written, they end without a row. */
  readonly #refused = new WeakSet<JobRecord>();
  /**
   * The input its client sent, as JSON, of a job not written (NewJob.inputJson): good while the record holds the
   * input it was sent for (a waiting job's release gives it another). Weak, so a job lost on any path leaves nothing.
   */
  readonly #sent = new WeakMap<JobRecord, { input: JobRecord['input']; json: string }>();
  #scheduled = false;

  constructor(deps: { store: MeshStore; commits: Commits; log: Logger }) {
    this.#store = deps.store;
    this.#commits = deps.commits;
    this.#log = deps.log;
  }

  get size(): number {
    return this.#jobs.size;
  }

  /** A job admitted and not written: after this turn (`turn`), or when it ends (`end`); `inputJson`: NewJob's. */
  add(job: JobRecord, when: Exclude<RowWrite, 'now'>, inputJson?: string | null): void {
    this.#jobs.set(job, null);
    if (inputJson) this.#sent.set(job, { input: job.input, json: inputJson });
    if (when === 'end') return;
    // Caught here as well, so a refusal nobody awaits (its admission failed first) is no unhandled rejection.
    const committed = new Promise<void>((resolve, reject) => this.#admitted.push({ job, resolve, reject }));
    committed.catch(() => undefined);
    this.#committing.set(job, committed);
    this.#schedule();
  }

  has(job: JobRecord): boolean {
    return this.#jobs.has(job);
  }

  /** Whether the job's row, or the commit that held it, was refused: the job has no row, and ends without one. */
  refused(job: JobRecord): boolean {
    return this.#refused.has(job);
  }

  /** What a job written after its turn waits for: its row's commit (rejected when refused); null for any other job. */
  stored(job: JobRecord): Promise<void> | null {
    return this.#committing.get(job) ?? null;
  }

  /** Every job not written yet, unfinished or ended. */
  all(): IterableIterator<JobRecord> {
    return this.#jobs.keys();
  }

  /** An ended job whose row is about to be written, by id. */
  ended(id: string): JobRecord | undefined {
    return this.#ended.get(id);
  }

  /**
   * Write a job's row now: as it stands, or as its end left it (`end`, else the one `endLater` kept). Only inside a
   * write of the group commit (`commits.write`).
   */
  write(job: JobRecord, end?: JobEnd): void {
    const kept = this.#jobs.get(job);
    const sent = this.#sent.get(job);
    this.#store.jobs.insertRecord(job, end ?? kept ?? undefined, sent?.input === job.input ? sent.json : null);
    this.#jobs.delete(job);
    this.#sent.delete(job);
    this.#written(job);
  }

  /** The job ended as `end` says: its row, or its end, is written after this turn. */
  endLater(job: JobRecord, end: JobEnd): void {
    if (this.#jobs.has(job)) this.#jobs.set(job, end);
    else this.#ends.set(job, end);
    this.#ended.set(job.id, job);
    this.#schedule();
  }

  /** Run `fn` once the job's end is written (at once when it has no end waiting); never when its write was refused. */
  whenWritten(job: JobRecord, fn: () => void): void {
    if (this.#ended.get(job.id) !== job) return fn();
    const waiting = this.#afterWrite.get(job);
    if (waiting) waiting.push(fn);
    else this.#afterWrite.set(job, [fn]);
  }

  /** Write the ends due after this turn now: a read of the jobs table finds every job as it stands. */
  writeEnds(): void {
    if (this.#ended.size > 0) this.#writeEnds();
  }

  /** Write what is due now: the rows of the jobs admitted in the turn, then the ends. */
  flush(): void {
    this.#scheduled = false;
    this.#writeAdmitted();
    this.#writeEnds();
  }

  /**
   * Each ended job's row, or end, on its own: a refused one is the only one lost. Its answer or event has left already
   * and nothing would try it again, so it is logged and let go rather than kept (and listed) for ever; thrown from
   * here (a setImmediate) it would end the process. What waited for its write does not happen (an agent not
   * acknowledged sends its result again).
   */
  #writeEnds(): void {
    for (const job of [...this.#ended.values()]) {
      const end = this.#ends.get(job);
      this.#ends.delete(job);
      try {
        if (end === undefined) this.#commits.writeOne(() => this.write(job));
        else {
          // The job's state in memory decided its end (JobStates); a row no longer unfinished is a second opinion, noted.
          const finished = this.#commits.writeOne(() => this.#store.jobs.finishJob(job.seq, end.status, end.now, end.outcome));
          if (!finished) this.#log.warn({ jobId: job.id, status: end.status }, 'a job\'s end found its row finished already');
          this.#written(job);
        }
      } catch (error) {
        this.#jobs.delete(job);
        this.#ended.delete(job.id);
        this.#afterWrite.delete(job);
        this.#log.error({ err: error, jobId: job.id, status: job.status },
          end === undefined ? 'an ended job\'s row could not be written; the job is lost' : 'a job\'s end could not be written; its row stays unfinished');
      }
    }
  }

  /** A job's row, or its end, is written (in the open transaction): it is no longer found here, and what waited for it follows. */
  #written(job: JobRecord): void {
    this.#ended.delete(job.id);
    const after = this.#afterWrite.get(job);
    if (!after) return;
    this.#afterWrite.delete(job);
    for (const fn of after) fn();
  }

  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => this.flush());
  }

  /**
   * The rows of the jobs admitted in the turn, each as it stands, and their commit: what each admission waits for. A
   * row or a commit refused is its admission's error (the request answers 507 and takes its job back, JobAdmission).
   */
  #writeAdmitted(): void {
    if (this.#admitted.length === 0) return;
    const due = this.#admitted;
    this.#admitted = [];
    const written: Admitted[] = [];
    for (const entry of due) {
      try {
        // One written in its turn already (its attempt failed, it ended or was persisted) is in this commit too.
        if (this.#jobs.has(entry.job)) this.#commits.writeOne(() => this.write(entry.job));
        written.push(entry);
      } catch (error) {
        this.#refuse(entry, error);
      }
    }
    if (written.length === 0) return;
    const committed = this.#commits.durable();
    // Committed now, not in the turn after (which `durable` asks for): the admission answers in its turn's iteration of
    // the loop, as it did when its row was written in its own turn.
    void Promise.resolve(this.#commits.flush()).catch(() => undefined);
    committed.then(() => {
      for (const entry of written) {
        this.#committing.delete(entry.job);
        entry.resolve();
      }
    }, (error: unknown) => {
      for (const entry of written) this.#refuse(entry, error);
    });
  }

  #refuse(entry: Admitted, error: unknown): void {
    this.refuse(entry.job);
    entry.reject(error);
  }

  /** The job has no row: its row, or the commit that held it, was refused. It is not written, and ends without one. */
  refuse(job: JobRecord): void {
    this.#jobs.delete(job);
    this.#committing.delete(job);
    this.#refused.add(job);
  }
}
