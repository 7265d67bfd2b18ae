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
 * that has not reported yet is assumed as long as the jobs that have.
 */
export class BatchProgress {
  readonly #jobs: JobProgress[];
  readonly #emit: (progress: Progress) => void;
  #lastStep = 0;

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
    if (step <= this.#lastStep) return;
    this.#lastStep = step;
    this.#emit({ step, total: Math.max(total, step) });
  }
}
