import type { SeriesView } from '../../protocol/api/index.js';
import type { Clock, Timer } from '../../protocol/clock.js';

/**
 * The last minutes of the mesh as time series, for the mesh view's plots: per model jobs finished per second,
 * queue depth and p50/p99 latency (admission to the end), and per device the memory in use. Prometheus keeps
 * history for whoever runs one; this ring is for a person who opened /mesh and runs nothing else.
 *
 * One step (5 s) is open at a time. Jobs that end in it are counted, and their latencies go into a fixed
 * log-scale histogram (10 % wide bins), so a busy mesh costs an array increment per job, no allocation; when the
 * step closes, its quantiles are read off the histogram (the upper edge of the bin, so within 10 %), the queue
 * depths and device memory are sampled, and one point goes into the ring. The oldest point beyond the window goes.
 */


/** One device's reading at a step: memory in use, and a GPU's temperature (°C) and power (W), null where unknown. */
interface DeviceReading {
  host: string;
  device: string;
  usedMB: number;
  budgetMB: number;
  temperatureC: number | null;
  powerW: number | null;
}
export interface SeriesSources {
  clock: Clock;
  /** Jobs waiting per model, now. */
  queueDepths(): Record<string, number>;
  /** Each connected host's devices: their memory, and a GPU's temperature and power where its driver says them, now. */
  devices(): Iterable<DeviceReading>;
  /** Subscribe to every job that ends (MeshMetrics.onJobFinished). */
  onJobFinished(listener: (model: string, outcome: string, totalMs: number) => void): void;
  stepMs?: number;
  windowMs?: number;
}

const BIN_GROWTH = 1.1;
const LOG_GROWTH = Math.log(BIN_GROWTH);
/** Bins from 1 ms (bin 0: anything up to 1 ms) to 1.1^200 ms (~53 h); longer latencies land in the last. */
const BINS = 201;

/** The upper edge of a latency's bin: 1.1^k ms. */
const binOf = (ms: number): number => (ms <= 1 ? 0 : Math.min(BINS - 1, Math.ceil(Math.log(ms) / LOG_GROWTH)));
const edgeOf = (bin: number): number => BIN_GROWTH ** bin;

interface OpenModel {
  succeeded: number;
  failed: number;
  bins: Uint32Array;
}

interface Point {
  at: number;
  models: Map<string, { succeeded: number; failed: number; depth: number | null; p50: number | null; p99: number | null }>;
  devices: Map<string, DeviceReading>;
}

/** The value at quantile `q` of a histogram holding `total` samples. */
function quantile(bins: Uint32Array, total: number, q: number): number {
  const rank = Math.max(1, Math.ceil(q * total));
  let seen = 0;
  for (let bin = 0; bin < bins.length; bin++) {
    seen += bins[bin]!;
    if (seen >= rank) return edgeOf(bin);
  }
  return edgeOf(bins.length - 1);
}

const round = (value: number): number => Math.round(value * 1000) / 1000;

export class MeshSeries {
  readonly stepMs: number;
  readonly windowMs: number;
  readonly #sources: SeriesSources;
  readonly #open = new Map<string, OpenModel>();
  readonly #ring: Point[] = [];
  #timer: Timer | null = null;
  /** When the open step ends. */
  #due: number | null = null;
  #closed = false;

  constructor(sources: SeriesSources) {
    this.#sources = sources;
    this.stepMs = sources.stepMs ?? 5_000;
    this.windowMs = sources.windowMs ?? 15 * 60_000;
    sources.onJobFinished((model, outcome, totalMs) => this.#finished(model, outcome, totalMs));
    this.#arm();
  }

  #finished(model: string, outcome: string, totalMs: number): void {
    let open = this.#open.get(model);
    if (!open) this.#open.set(model, (open = { succeeded: 0, failed: 0, bins: new Uint32Array(BINS) }));
    if (outcome === 'succeeded') {
      open.succeeded++;
      open.bins[binOf(totalMs)]!++;
    } else if (outcome === 'failed') {
      open.failed++;
    }
  }

  #arm(): void {
    if (this.#closed) return;
    // Steps end on multiples of the step, so plots line up across reloads. The next end is counted from the one
    // due, not from when the timer fired (Node's timers may fire a millisecond early, or late under load).
    const now = this.#sources.clock.now();
    const due = (this.#due === null ? now - (now % this.stepMs) : this.#due) + this.stepMs;
    this.#due = due <= now - this.stepMs ? now - (now % this.stepMs) + this.stepMs : due; // a stall skips steps
    this.#timer = this.#sources.clock.setTimer(this.#due - now, () => {
      this.step(this.#due!);
      this.#arm();
    });
  }

  /** Close the open step ending at `at`: one point into the ring. */
  step(at = this.#sources.clock.now()): void {
    const models = new Map<string, { succeeded: number; failed: number; depth: number | null; p50: number | null; p99: number | null }>();
    const depths = this.#sources.queueDepths();
    for (const [model, depth] of Object.entries(depths)) models.set(model, { succeeded: 0, failed: 0, depth, p50: null, p99: null });
    for (const [model, open] of this.#open) {
      const point = models.get(model) ?? { succeeded: 0, failed: 0, depth: null, p50: null, p99: null };
      point.succeeded = open.succeeded;
      point.failed = open.failed;
      if (open.succeeded > 0) {
        point.p50 = quantile(open.bins, open.succeeded, 0.5);
        point.p99 = quantile(open.bins, open.succeeded, 0.99);
      }
      models.set(model, point);
    }
    this.#open.clear();
    const devices = new Map<string, DeviceReading>();
    for (const entry of this.#sources.devices()) devices.set(`${entry.host}/${entry.device}`, { ...entry });
    this.#ring.push({ at, models, devices });
    const keep = Math.ceil(this.windowMs / this.stepMs);
    if (this.#ring.length > keep) this.#ring.splice(0, this.#ring.length - keep);
  }

  view(): SeriesView {
    const ring = this.#ring;
    const seconds = this.stepMs / 1000;
    const view: SeriesView = { stepMs: this.stepMs, windowMs: this.windowMs, times: ring.map((point) => Math.round(point.at / 1000)), models: {}, devices: {} };
    const modelNames = new Set<string>();
    const deviceKeys = new Map<string, { host: string; device: string; budgetMB: number }>();
    for (const point of ring) {
      for (const name of point.models.keys()) modelNames.add(name);
      for (const [key, entry] of point.devices) deviceKeys.set(key, { host: entry.host, device: entry.device, budgetMB: entry.budgetMB });
    }
    for (const name of [...modelNames].sort()) {
      const of = (pick: (entry: NonNullable<ReturnType<Point['models']['get']>>) => number | null): (number | null)[] =>
        ring.map((point) => { const entry = point.models.get(name); return entry ? pick(entry) : null; });
      view.models[name] = {
        succeededPerSecond: of((entry) => round(entry.succeeded / seconds)),
        failedPerSecond: of((entry) => round(entry.failed / seconds)),
        queueDepth: of((entry) => entry.depth),
        p50Ms: of((entry) => (entry.p50 === null ? null : round(entry.p50))),
        p99Ms: of((entry) => (entry.p99 === null ? null : round(entry.p99))),
      };
    }
    for (const [key, entry] of [...deviceKeys].sort(([a], [b]) => a.localeCompare(b))) {
      view.devices[key] = {
        ...entry, usedMB: ring.map((point) => point.devices.get(key)?.usedMB ?? null),
        temperatureC: ring.map((point) => point.devices.get(key)?.temperatureC ?? null),
        powerW: ring.map((point) => point.devices.get(key)?.powerW ?? null),
      };
    }
    return view;
  }

  close(): void {
    this.#closed = true;
    this.#timer?.cancel();
  }
}
