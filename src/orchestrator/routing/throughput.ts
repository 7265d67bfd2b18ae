/** Weight of the newest batch in the moving average: recent enough to follow a host that slows down, smooth enough to ride out one odd batch. */
export const THROUGHPUT_ALPHA = 0.3;

interface Rate {
  jobsPerSecond: number;
  /** Work per second in the job type's cost units (image: pixel-steps), which predicts run times across input sizes. */
  costPerSecond: number;
  samples: number;
}

/** One completed batch: its jobs, their total cost (`Pipeline.cost`) and the engine's time for it. */
export interface BatchSample {
  jobs: number;
  cost: number;
  computeMs: number;
}

/**
 * How fast each replica is: jobs per second for one model on one host, an
 * exponentially weighted moving average over its completed batches (batch
 * size ÷ the engine's compute time for the batch). The router divides load
 * by it, so a fast GPU takes proportionally more than a slow one; attempt
 * timeouts scale with it.
 */
export class ThroughputBook {
  readonly #rates = new Map<string, Map<string, Rate>>();

  /** A batch of `model` completed on `host`. */
  sample(host: string, model: string, batch: BatchSample): void {
    // A stand-in or a cached answer can report 0 ms; one millisecond keeps the rates finite.
    const seconds = Math.max(1, batch.computeMs) / 1000;
    const jobsPerSecond = batch.jobs / seconds;
    const costPerSecond = batch.cost / seconds;
    let models = this.#rates.get(host);
    if (!models) this.#rates.set(host, (models = new Map()));
    const entry = models.get(model);
    if (!entry) {
      models.set(model, { jobsPerSecond, costPerSecond, samples: 1 });
      return;
    }
    entry.jobsPerSecond += THROUGHPUT_ALPHA * (jobsPerSecond - entry.jobsPerSecond);
    entry.costPerSecond += THROUGHPUT_ALPHA * (costPerSecond - entry.costPerSecond);
    entry.samples++;
  }

  /** Measured work per second in the job type's cost units, or null before the first batch. */
  costPerSecond(host: string, model: string): number | null {
    return this.#rates.get(host)?.get(model)?.costPerSecond ?? null;
  }

  /** The measured rate, or null before the first batch. */
  jobsPerSecond(host: string, model: string): number | null {
    return this.#rates.get(host)?.get(model)?.jobsPerSecond ?? null;
  }

  samples(host: string, model: string): number {
    return this.#rates.get(host)?.get(model)?.samples ?? 0;
  }

  /**
   * The rate the router assumes for a replica not measured yet: the median of
   * the model's measured replicas (a new host is taken for a typical one, so it
   * gets work and is measured), or 1 job/s when none is measured.
   */
  assumed(model: string): number {
    const rates: number[] = [];
    for (const models of this.#rates.values()) {
      const rate = models.get(model)?.jobsPerSecond;
      if (rate !== undefined) rates.push(rate);
    }
    if (rates.length === 0) return 1;
    rates.sort((a, b) => a - b);
    return rates[Math.floor(rates.length / 2)]!;
  }

  /** Every measured replica. */
  *all(): IterableIterator<{ host: string; model: string; jobsPerSecond: number }> {
    for (const [host, models] of this.#rates) for (const [model, rate] of models) yield { host, model, jobsPerSecond: rate.jobsPerSecond };
  }

  /** Models measured on `host`. */
  modelsOf(host: string): string[] {
    return [...(this.#rates.get(host)?.keys() ?? [])];
  }
}
