import type { RegisteredModel } from '../registry/index.js';
import type { ThroughputBook } from './throughput.js';

export interface AttemptTimeoutPolicy {
  /** An attempt may take this many times the model's measured run time on its host. */
  factor: number;
  /** …never less than this. */
  floorMs: number;
  /** Added while the model is not resident when the batch is sent. */
  loadMs: number;
}

/** How long an attempt may take, and the words that explain the figure (they end up in AGENT_TIMEOUT). */
export interface Budget {
  ms: number;
  basis: string;
}

/** A batch as the budget sees it: its jobs and their total cost (`Pipeline.cost`). */
export interface BatchWork {
  jobs: number;
  cost: number;
}

/**
 * How long a batch may take on a host before it is given up: `factor` times
 * what the replica's measured speed says the batch needs — its cost (image:
 * pixel-steps) ÷ the cost per second measured on that host, so a large image
 * gets proportionally longer than the small ones the replica was measured
 * on — never less than `floorMs`; before the replica is measured, the model's
 * `maxTimeoutMs` (no job of it may legitimately run longer). From dispatch
 * until the agent says it started, `loadMs` more when the model was not
 * resident, since the agent may have to pull and load it first.
 */
export class AttemptBudgets {
  readonly #throughput: ThroughputBook;
  readonly #policy: AttemptTimeoutPolicy;

  constructor(throughput: ThroughputBook, policy: AttemptTimeoutPolicy) {
    this.#throughput = throughput;
    this.#policy = policy;
  }

  /** From the agent starting a batch to its last result. */
  run(host: string, model: RegisteredModel, work: BatchWork): Budget {
    const { factor, floorMs } = this.#policy;
    const rate = this.#throughput.costPerSecond(host, model.manifest.name);
    if (rate === null) return { ms: model.policy.maxTimeoutMs, basis: `the model's maxTimeoutMs: not measured on ${host} yet` };
    const expectedMs = (work.cost / rate) * 1000;
    const scaled = factor * expectedMs;
    const jobs = `${work.jobs} job${work.jobs === 1 ? '' : 's'}`;
    return scaled >= floorMs
      ? { ms: Math.ceil(scaled), basis: `${factor} × the ${Math.round(expectedMs)} ms expected for ${jobs} at the measured speed` }
      : { ms: floorMs, basis: `the floor; ${jobs} expected to take ${Math.round(expectedMs)} ms` };
  }

  /**
   * A health probe: one tiny job. Measured replicas get the budget of one job; one not measured yet gets `factor`
   * floors rather than the model's whole maxTimeoutMs, so a stalled trial does not hold a slot for minutes.
   */
  probe(host: string, model: RegisteredModel, resident: boolean): Budget {
    const { factor, floorMs, loadMs } = this.#policy;
    const base = this.#throughput.costPerSecond(host, model.manifest.name) === null
      ? { ms: factor * floorMs, basis: `${factor} × the floor: a probe of a replica not measured yet` }
      : this.run(host, model, { jobs: 1, cost: model.jobInputs.cost(model.jobInputs.probeInput(model.manifest)) });
    return resident ? base : { ms: base.ms + loadMs, basis: `${base.basis}, plus ${loadMs} ms to load the model` };
  }

  /** From dispatch to the agent starting the batch, and on to its last result. */
  start(host: string, model: RegisteredModel, work: BatchWork, resident: boolean): Budget {
    const run = this.run(host, model, work);
    return resident ? run : { ms: run.ms + this.#policy.loadMs, basis: `${run.basis}, plus ${this.#policy.loadMs} ms to load the model` };
  }
}
