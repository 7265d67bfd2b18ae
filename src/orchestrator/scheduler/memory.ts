/**
 * Memory, learned rather than declared. Agents report what each batch
 * measured (link `done.memory`): the memory the model took to load and, for
 * a batch larger than any it ran before, the peak it reached. From those the
 * estimator learns, per model,
 *
 *     peak ≈ residentMB + overheadMB + mbPerPixel × pixels × batchSize
 *
 * and the planner uses it twice: a job that could not fit on any host that
 * may run it, even alone, is refused at submit (JOB_TOO_LARGE), and a batch
 * released to a host is capped so its estimated peak fits that host's budget.
 * Before anything was measured the manifest's `memoryMB` is the estimate (a
 * guess: it never refuses a job and never caps a batch on its own).
 *
 * Conservative by construction: the resident figure is the largest reported;
 * the line is fitted to the largest working memory seen at each size, made
 * no flatter than the steepest growth observed, then raised until no
 * observation lies above it. Memory on the CPU depends on history too
 * (onnxruntime's arena grows in doubling steps and keeps what it grew), so
 * the same batch can measure up to about twice as much in a fresh process as
 * in one that ran smaller batches first; the estimate is only as good as the
 * batches it has seen, and it learns from each new largest batch.
 */
import { MeshError, pixelsOf, type BatchMemoryReport, type ModelManifest } from '../../protocol/index.js';
import { keepNewest } from '../../protocol/bounded.js';

/** Distinct batch sizes (in pixels) remembered per model; the oldest is forgotten first. */
const MAX_POINTS = 32;

/**
 * A batch that needed less working memory than this tells the model's fixed
 * overhead, not how memory grows with size: at that scale a Node.js process's
 * garbage and allocator caches are as large as the batch. (One 8x8 image
 * measured at 2 MB would otherwise read as 0.03 MB per pixel, 30 GB for 1024x1024.)
 */
const NOISE_FLOOR_MB = 16;

interface Learned {
  residentMB: number;
  /** Batch size in pixels (pixels per job × jobs) → the largest working memory (peak − resident) seen at that size. */
  working: Map<number, number>;
  batches: number;
}

/** What the estimator believes about a model. */
export interface MemoryModel {
  residentMB: number;
  overheadMB: number;
  mbPerPixel: number;
  /** Measured batches it rests on; 0 = the manifest's guess alone. */
  batches: number;
}

export class MemoryEstimator {
  readonly #models = new Map<string, Learned>();
  /** The fit of each model, made again only when it learns something: every submit and every batch asks for it. */
  readonly #fitted = new Map<string, Readonly<MemoryModel> | null>();

  /** Learn from one report of a batch of `model`. */
  observe(model: string, report: BatchMemoryReport): void {
    let learned = this.#models.get(model);
    if (!learned) this.#models.set(model, (learned = { residentMB: 0, working: new Map(), batches: 0 }));
    this.#fitted.delete(model);
    learned.residentMB = Math.max(learned.residentMB, report.residentMB);
    if (report.peakMB === undefined) return;
    const units = report.pixels * report.batchSize;
    const working = Math.max(0, report.peakMB - report.residentMB);
    const seen = learned.working.get(units);
    learned.working.delete(units); // re-inserted last: most recently seen
    learned.working.set(units, Math.max(seen ?? 0, working));
    keepNewest(learned.working, MAX_POINTS);
    learned.batches++;
  }

  /** The fitted figures, or null while no batch of the model was measured. */
  model(name: string): Readonly<MemoryModel> | null {
    const fitted = this.#fitted.get(name);
    if (fitted !== undefined) return fitted;
    const model = this.#fit(name);
    this.#fitted.set(name, model);
    return model;
  }

  #fit(name: string): MemoryModel | null {
    const learned = this.#models.get(name);
    if (!learned || learned.working.size === 0) return null;
    const points = [...learned.working].sort(([a], [b]) => a - b);
    const slope = fitSlope(points.filter(([, w]) => w >= NOISE_FLOOR_MB));
    // Raised until the line passes over every point, small ones included.
    const overheadMB = Math.max(0, ...points.map(([u, w]) => w - slope * u));
    return { residentMB: learned.residentMB, overheadMB, mbPerPixel: slope, batches: learned.batches };
  }

  /** Estimated peak (MB) of a batch of `batchSize` jobs shaped like `input`. */
  estimate(manifest: ModelManifest, input: Record<string, unknown>, batchSize: number): number {
    const model = this.model(manifest.name);
    if (!model) return manifest.memoryMB;
    const measured = model.residentMB + model.overheadMB + model.mbPerPixel * pixelsOf(input) * batchSize;
    // Until batches have shown how memory grows with size, the declared figure stays a floor.
    return Math.ceil(model.mbPerPixel > 0 ? measured : Math.max(manifest.memoryMB, measured));
  }

  /** The most jobs shaped like `input` whose batch is estimated to fit `budgetMB`: 0 if not even one, Infinity if size does not matter. */
  largestBatchThatFits(manifest: ModelManifest, input: Record<string, unknown>, budgetMB: number): number {
    const model = this.model(manifest.name);
    const perJob = (model?.mbPerPixel ?? 0) * pixelsOf(input);
    if (!model || perJob <= 0) return this.estimate(manifest, input, 1) <= budgetMB ? Infinity : 0;
    const room = budgetMB - model.residentMB - model.overheadMB;
    return room < 0 ? 0 : Math.floor(room / perJob);
  }
}

/**
 * MB per pixel from the points that show it (batch size in pixels → working MB, sorted by size).
 * Least squares over them, but never flatter than the steepest growth seen between two sizes at
 * least twice apart: an allocator that grows its arena in doubling steps makes memory a staircase,
 * and the fitted average of the steps below would promise a larger batch less than it takes.
 * (Twice apart, so a little noise between close sizes cannot make the slope explode: it stays
 * under twice the larger point's own MB per pixel.) One point, or no growth: proportional to size.
 */
function fitSlope(points: readonly (readonly [number, number])[]): number {
  if (points.length === 0) return 0;
  let slope = 0;
  if (points.length >= 2) {
    const meanU = points.reduce((sum, [u]) => sum + u, 0) / points.length;
    const meanW = points.reduce((sum, [, w]) => sum + w, 0) / points.length;
    const covariance = points.reduce((sum, [u, w]) => sum + (u - meanU) * (w - meanW), 0);
    const variance = points.reduce((sum, [u]) => sum + (u - meanU) ** 2, 0);
    slope = variance > 0 ? covariance / variance : 0;
    for (const [i, [ui, wi]] of points.entries()) {
      for (const [uj, wj] of points.slice(i + 1)) if (uj >= 2 * ui) slope = Math.max(slope, (wj - wi) / (uj - ui));
    }
  }
  return slope > 0 ? slope : Math.max(...points.map(([u, w]) => w / u));
}

/** A host as the planner sees it: its largest device budget. */
export interface MemoryHost {
  readonly id: string;
  readonly largestBudgetMB: number;
}

/** The model of a job, as the planner needs it (a registered model). */
export interface PlannedModel {
  readonly manifest: ModelManifest;
}

/**
 * The estimator applied to admission and batching. `hosts` lists the
 * connected hosts that could run a model for these classes (the router's candidates).
 */
export class MemoryPlanner<Model extends PlannedModel = PlannedModel> {
  readonly estimator: MemoryEstimator;
  readonly #hosts: (model: Model, classes: readonly string[]) => Iterable<MemoryHost>;

  constructor(estimator: MemoryEstimator, hosts: (model: Model, classes: readonly string[]) => Iterable<MemoryHost>) {
    this.estimator = estimator;
    this.#hosts = hosts;
  }

  /**
   * Refuse a job that would not fit, even alone, on the largest budget among
   * the hosts that could run it. With no such host connected there is nothing
   * to judge by; the job waits in its queue like any other.
   */
  admit(model: Model, input: Record<string, unknown>, classes: readonly string[]): void {
    let largest: MemoryHost | null = null;
    for (const host of this.#hosts(model, classes)) if (!largest || host.largestBudgetMB > largest.largestBudgetMB) largest = host;
    if (!largest) return;
    const needMB = this.estimator.estimate(model.manifest, input, 1);
    if (needMB <= largest.largestBudgetMB) return;
    const learned = this.estimator.model(model.manifest.name);
    const pixels = pixelsOf(input);
    const shape = typeof input.width === 'number' && typeof input.height === 'number' ? `${input.width}x${input.height} = ${pixels} pixels` : `${pixels} unit`;
    const detail = learned
      ? `${shape}; ${Math.round(learned.residentMB)} MB to load + ${Math.round(learned.overheadMB)} MB + ${learned.mbPerPixel.toPrecision(3)} MB per pixel, learned from ${learned.batches} measured batches`
      : `${shape}; the model's declared size`;
    throw new MeshError('JOB_TOO_LARGE', { model: model.manifest.name, needMB, detail, budgetMB: largest.largestBudgetMB, host: largest.id });
  }

  /** The largest batch of jobs shaped like `input` to release to `host`: at least 1 (a job admitted may always run alone). */
  batchCap(model: Model, input: Record<string, unknown>, host: MemoryHost): number {
    return Math.max(1, this.estimator.largestBatchThatFits(model.manifest, input, host.largestBudgetMB));
  }

  observe(model: string, report: BatchMemoryReport): void {
    this.estimator.observe(model, report);
  }
}
