/** One redraw of sd.cpp's step bar. */
export interface StepSample {
  step: number;
  total: number;
}

/**
 * sd.cpp's sampler prints its progress to stdout as a bar redrawn in place:
 * `\r  |=====>      | 3/20 - 1.25s/it\033[K`, with `\n` only after the last step (util.cpp,
 * `pretty_progress`). The unit is `s/it` or `it/s`; model loading draws a similar bar in `MB/s`,
 * which this does not match. A line may hold several redraws when the reader split only on `\n`.
 */
const STEP_BAR = /\|\s*(\d+)\/(\d+)\s+-\s+[\d.]+\s*(?:s\/it|it\/s)/g;

export function parseStepLines(line: string): StepSample[] {
  const samples: StepSample[] = [];
  for (const match of line.matchAll(STEP_BAR)) {
    const step = Number(match[1]);
    const total = Number(match[2]);
    if (step >= 1 && total >= 1 && step <= total) samples.push({ step, total });
  }
  return samples;
}

interface Entry {
  jobId: string;
  steps: number;
  lastStep: number;
  ended: boolean;
  onStep(step: number): void;
}

/** Entries kept at most; ended ones at the front go first. */
const MAX_ENTRIES = 256;

/**
 * Gives the step bars of a server's log to the jobs they belong to. The log does not name its job,
 * but sd.cpp samples one job at a time in the order it accepted them, so the bars belong to the
 * oldest job that has not finished sampling. The log itself says when that job is done: its bar
 * reaches its last step, or a new bar starts over. Bars whose total is not the job's step count
 * (a model load, tiled VAE decoding) are skipped. Exact for a server only this agent uses — the
 * case in which the agent has its log; otherwise the engine relies on the server's own fields.
 */
export class StepLineTracker {
  #entries: Entry[] = [];

  /** A job sent to the server, in the order sent. */
  register(jobId: string, steps: number, onStep: (step: number) => void): void {
    this.#entries.push({ jobId, steps, lastStep: 0, ended: false, onStep });
    while (this.#entries.length > MAX_ENTRIES && this.#entries[0]!.ended) this.#entries.shift();
  }

  /**
   * The job is over. One that never reached the sampler (refused, cancelled while queued) leaves
   * now; one that did stays until the log moves past it, because its last bars may still be in
   * the pipe.
   */
  end(jobId: string, reachedSampler: boolean): void {
    const index = this.#entries.findIndex((entry) => entry.jobId === jobId);
    if (index < 0) return;
    if (reachedSampler) this.#entries[index]!.ended = true;
    else this.#entries.splice(index, 1);
  }

  feed(line: string): void {
    for (const sample of parseStepLines(line)) this.#apply(sample);
  }

  get pending(): number {
    return this.#entries.length;
  }

  #apply(sample: StepSample): void {
    for (;;) {
      const head = this.#entries[0];
      if (!head) return;
      if (sample.total !== head.steps) {
        // Not this job's sampler. If the job is already over, its own bars were never seen: move on.
        if (!head.ended) return;
        this.#entries.shift();
        continue;
      }
      if (sample.step <= head.lastStep) {
        // The bar started over: the head's sampling is done and this is the next job's.
        this.#entries.shift();
        continue;
      }
      head.lastStep = sample.step;
      if (!head.ended) head.onStep(sample.step);
      if (sample.step >= head.steps) this.#entries.shift();
      return;
    }
  }
}
