import type { Logger } from 'pino';
import type { Commits, JobEnd, JobRecord, MeshStore } from '../store/index.js';

/**
 * The jobs admitted and not written yet: a job its client waits for on the request that submitted it is written once,
 * when it ends (JobStates.create, deferred; docs/architecture.md, *Writes: group commit*), or earlier, as it stands,
 * when something must find it after a crash (`write`). Its end is written after the turn it ended in (`endLater`),
 * with those of the other jobs that ended meanwhile: off the way of the answer that end is about to make. Until its row
 * is written an ended job is found here by id (`ended`), so a read that follows its end finds it, and it is still
 * listed (`all`). Shutdown writes what is left (`flush`, from JobStates.close) before the store's last commit.
 */
export class UnwrittenJobs {
  readonly #store: MeshStore;
  readonly #commits: Commits;
  readonly #log: Logger;
  /** Each job not written, with its end once it ended (null while it runs). */
  readonly #jobs = new Map<JobRecord, JobEnd | null>();
  readonly #ended = new Map<string, JobRecord>();
  #scheduled = false;

  constructor(deps: { store: MeshStore; commits: Commits; log: Logger }) {
    this.#store = deps.store;
    this.#commits = deps.commits;
    this.#log = deps.log;
  }

  get size(): number {
    return this.#jobs.size;
  }

  add(job: JobRecord): void {
    this.#jobs.set(job, null);
  }

  has(job: JobRecord): boolean {
    return this.#jobs.has(job);
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
    this.#store.jobs.insertRecord(job, end ?? kept ?? undefined);
    this.#jobs.delete(job);
    this.#ended.delete(job.id);
  }

  /** The job ended as `end` says: its row is written after this turn. */
  endLater(job: JobRecord, end: JobEnd): void {
    this.#jobs.set(job, end);
    this.#ended.set(job.id, job);
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => this.flush());
  }

  /**
   * Write the ended jobs' rows now, each on its own: a refused one is the only one lost. Its answer has left already
   * and nothing would try it again, so it is logged and let go rather than kept (and listed) for ever; thrown from
   * here (a setImmediate) it would end the process.
   */
  flush(): void {
    this.#scheduled = false;
    for (const job of [...this.#ended.values()]) {
      try {
        this.#commits.writeOne(() => this.write(job));
      } catch (error) {
        this.#jobs.delete(job);
        this.#ended.delete(job.id);
        this.#log.error({ err: error, jobId: job.id, status: job.status }, 'an ended job\'s row could not be written; the job is lost');
      }
    }
  }
}
