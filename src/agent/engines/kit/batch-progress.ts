import type { Progress } from '../../core/engine.js';

interface JobProgress {
  /** Steps of phases this job already finished (a workflow may run several progress-reporting nodes). */
  earlier: number;
  step: number;
  total: number;
  known: boolean;
  complete: boolean;
}

/**
 * One progress bar for a batch whose jobs run one after another (ComfyUI
 * prompts, one command per job). Each job reports its own `step`/`total`; the
 * batch reports the sum, and only forwards: a job whose counter restarts (the
 * next node of a workflow) adds a phase instead of moving the bar back. A job
 * that has not reported yet is assumed as long as the jobs that have. An engine
 * that knows a job's whole count up front (every node of a ComfyUI workflow)
 * sets it instead ({@link set}). Neither the step nor the share done ever goes
 * back: a report that would lower the share (a total that grew) waits until the
 * work catches up.
 */
export class BatchProgress {
  readonly #jobs: JobProgress[];
  readonly #emit: (progress: Progress) => void;
  #lastStep = 0;
  #lastShare = 0;
  #last: { step: number; total: number } = { step: 0, total: 0 };

  constructor(jobs: number, emit: (progress: Progress) => void) {
    this.#jobs = Array.from({ length: jobs }, () => ({ earlier: 0, step: 0, total: 0, known: false, complete: false }));
    this.#emit = emit;
  }

  /** Job `index` is at `step` of `total` in its current phase. */
  report(index: number, step: number, total: number): void {
    const job = this.#jobs[index];
    if (!job || job.complete || !(total > 0) || !(step >= 0)) return;
    if (job.known && (total !== job.total || step < job.step)) job.earlier += job.total; // a new phase began
    job.step = Math.min(step, total);
    job.total = total;
    job.known = true;
    this.#publish();
  }

  /** Job `index` is at `step` of its whole `total` (all its phases, as far as the engine knows them). */
  set(index: number, step: number, total: number): void {
    const job = this.#jobs[index];
    if (!job || job.complete || !(total > 0) || !(step >= 0)) return;
    job.earlier = 0;
    job.step = Math.min(step, total);
    job.total = total;
    job.known = true;
    this.#publish();
  }

  /** The progress last reported ({step: 0, total: 0} before any). */
  get current(): { step: number; total: number } {
    return { ...this.#last };
  }

  /** Job `index` ended (done, failed or cancelled): it counts as all its steps. */
  complete(index: number): void {
    const job = this.#jobs[index];
    if (!job || job.complete) return;
    job.complete = true;
    if (job.known) job.step = job.total;
    this.#publish();
  }

  #publish(): void {
    const known = this.#jobs.filter((job) => job.known);
    if (known.length === 0) return;
    const typical = Math.max(...known.map((job) => job.earlier + job.total));
    let step = 0;
    let total = 0;
    for (const job of this.#jobs) {
      const jobTotal = job.known ? job.earlier + job.total : typical;
      total += jobTotal;
      step += job.complete ? jobTotal : job.earlier + job.step;
    }
    // A job that ends without reporting adds nothing real; only report true advances.
    total = Math.max(total, step);
    if (step <= this.#lastStep || step / total < this.#lastShare) return;
    this.#lastStep = step;
    this.#lastShare = step / total;
    this.#last = { step, total };
    this.#emit({ step, total });
  }
}
