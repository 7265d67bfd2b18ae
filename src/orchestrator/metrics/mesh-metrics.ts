import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { BreakerState } from '../../protocol/index.js';
import type { HostSession } from '../routing/index.js';

const SECONDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const MB = 1024 * 1024;

export interface MetricsSources {
  queueDepths(): Record<string, number>;
  hosts: Iterable<HostSession>;
  /** Every breaker's state (`model` null: the host's own). */
  breakers?(): Iterable<{ host: string; model: string | null; state: BreakerState }>;
  /** Measured jobs per second of each replica. */
  throughput?(): Iterable<{ host: string; model: string; jobsPerSecond: number }>;
  /** Whether each connected host is healthy (heartbeats on time). */
  healthy?(host: HostSession): boolean;
}

/** Breaker states as gauge values: higher is worse. */
const BREAKER_VALUE: Record<BreakerState, number> = { closed: 0, 'half-open': 1, open: 2 };

/**
 * The orchestrator's Prometheus metrics (prom-client, its own registry).
 * Counters and histograms are fed by the job lifecycle and admission;
 * gauges (queue depths, hosts) are read from their sources at scrape time.
 * Average batch size of a model = inference_count ÷ execution_count.
 */
export class MeshMetrics {
  readonly registry = new Registry();
  readonly #requests: Counter<'model' | 'outcome'>;
  readonly #inferences: Counter<'model'>;
  readonly #executions: Counter<'model'>;
  readonly #rejected: Counter<'model' | 'reason'>;
  readonly #queueSeconds: Histogram<'model'>;
  readonly #computeSeconds: Histogram<'model'>;
  readonly #requestSeconds: Histogram<'model' | 'outcome'>;
  readonly #refusedReports: Counter<'host' | 'message'>;
  readonly #linksClosed: Counter<'reason'>;
  readonly #blobIntegrityFailures: Counter<'check'>;
  readonly #blobVerifications: Counter;
  readonly #attemptTimeouts: Counter<'host' | 'model'>;
  readonly #probes: Counter<'host' | 'model' | 'outcome'>;
  readonly #breakerTransitions: Counter<'host' | 'model' | 'to'>;
  readonly #replicaRefusals: Counter<'host' | 'model' | 'code'>;
  readonly #replicas: Gauge<'model'>;
  readonly #replicasDesired: Gauge<'model'>;
  readonly #energy: Counter<'model' | 'host'>;
  /** Energy since start by model and by host (J), for `gpumesh status` and the mesh view. */
  readonly #energyByModel = new Map<string, number>();
  readonly #energyByHost = new Map<string, number>();
  /** Told of every job that ends (the mesh view's time series, metrics/series.ts). */
  readonly #finishedListeners: ((model: string, outcome: string, totalMs: number) => void)[] = [];

  constructor(sources: MetricsSources) {
    const registers = [this.registry];
    // prom-client's default Node.js metrics include gauges named *_total, which promtool rejects; these two are what we watch.
    new Gauge({ name: 'process_resident_memory_bytes', help: 'Resident memory of the orchestrator process', registers, collect() { this.set(process.memoryUsage.rss()); } });
    new Gauge({ name: 'nodejs_heap_size_used_bytes', help: 'V8 heap in use', registers, collect() { this.set(process.memoryUsage().heapUsed); } });
    this.#requests = new Counter({
      name: 'gpumesh_requests_total', help: 'Jobs that reached a terminal state, by outcome (succeeded, failed, cancelled, expired)',
      labelNames: ['model', 'outcome'], registers,
    });
    this.#energy = new Counter({
      name: 'gpumesh_energy_joules_total', help: 'Energy jobs took on their GPUs (each its share of its batch), from the power the drivers reported',
      labelNames: ['model', 'host'], registers,
    });
    this.#inferences = new Counter({ name: 'gpumesh_inference_count_total', help: 'Jobs sent to a replica for execution (batched or not)', labelNames: ['model'], registers });
    this.#executions = new Counter({ name: 'gpumesh_execution_count_total', help: 'Batches sent to a replica (one forward pass each)', labelNames: ['model'], registers });
    this.#rejected = new Counter({ name: 'gpumesh_rejected_total', help: 'Jobs refused with 429, by reason (queue_full, mesh_full, rate_limited, cap_reached)', labelNames: ['model', 'reason'], registers });
    this.#queueSeconds = new Histogram({ name: 'gpumesh_queue_duration_seconds', help: 'Time from admission to dispatch', labelNames: ['model'], buckets: SECONDS, registers });
    this.#computeSeconds = new Histogram({ name: 'gpumesh_compute_duration_seconds', help: 'Engine time of the batch that ran a job', labelNames: ['model'], buckets: SECONDS, registers });
    this.#requestSeconds = new Histogram({
      name: 'gpumesh_request_duration_seconds', help: 'Time from admission to the terminal state', labelNames: ['model', 'outcome'], buckets: SECONDS, registers,
    });
    this.#refusedReports = new Counter({
      name: 'gpumesh_link_reports_refused_total', help: 'Agent reports refused: about jobs the reporting session does not hold, or models its grant does not allow',
      labelNames: ['host', 'message'], registers,
    });
    this.#linksClosed = new Counter({
      name: 'gpumesh_link_closed_total', help: 'Agent links the orchestrator closed for what they cost it (over-budget: kept sending more messages than agents.link allows)',
      labelNames: ['reason'], registers,
    });
    this.#linksClosed.inc({ reason: 'over-budget' }, 0);
    this.#blobIntegrityFailures = new Counter({
      name: 'gpumesh_blob_integrity_failures_total', help: 'Stored blobs found corrupt and quarantined, by the check that caught them (size, hash)',
      labelNames: ['check'], registers,
    });
    // Both series exist from the start, so an alert on increase() sees the first failure.
    for (const check of ['size', 'hash']) this.#blobIntegrityFailures.inc({ check }, 0);
    this.#blobVerifications = new Counter({
      name: 'gpumesh_blob_verifications_total', help: 'Whole stored blobs hashed to verify them before or while serving them (a verified blob is served unhashed until its file changes)', registers,
    });
    this.#replicaRefusals = new Counter({
      name: 'gpumesh_replica_load_refusals_total', help: 'Loads the autoscaler asked for that an agent refused (no room, too large, a failed pull), by the error code',
      labelNames: ['host', 'model', 'code'], registers,
    });
    this.#replicas = new Gauge({ name: 'gpumesh_model_replicas', help: 'Hosts where the model is loaded and takes batches', labelNames: ['model'], registers });
    this.#replicasDesired = new Gauge({ name: 'gpumesh_model_replicas_desired', help: 'Replicas the autoscaler wants for the model now', labelNames: ['model'], registers });
    new Gauge({
      name: 'gpumesh_queue_depth', help: 'Jobs waiting in the queue', labelNames: ['model'], registers,
      collect() {
        this.reset();
        for (const [model, depth] of Object.entries(sources.queueDepths())) this.set({ model }, depth);
      },
    });
    const hostGauge = (name: string, help: string, value: (host: HostSession) => number): void => {
      new Gauge({
        name, help, labelNames: ['host'], registers,
        collect() {
          this.reset();
          for (const host of sources.hosts) this.set({ host: host.id }, value(host));
        },
      });
    };
    hostGauge('gpumesh_host_connected', 'Whether the host\'s agent is connected (absent when it is not)', () => 1);
    hostGauge('gpumesh_host_jobs_in_flight', 'Jobs the host is running', (host) => host.jobsInFlight);
    const deviceGauge = (name: string, help: string, value: (device: HostSession['devices'][number]) => number): void => {
      new Gauge({
        name, help, labelNames: ['host', 'device'], registers,
        collect() {
          this.reset();
          for (const host of sources.hosts) for (const device of host.devices) this.set({ host: host.id, device: device.id }, value(device));
        },
      });
    };
    hostGauge('gpumesh_host_healthy', 'Whether the host\'s heartbeats arrive on time (1) or are overdue (0)', (host) => (sources.healthy?.(host) ?? true ? 1 : 0));
    new Gauge({
      name: 'gpumesh_breaker_state', help: 'Circuit breaker of a host × model: 0 closed, 1 half-open, 2 open', labelNames: ['host', 'model'], registers,
      collect() {
        this.reset();
        for (const breaker of sources.breakers?.() ?? []) if (breaker.model !== null) this.set({ host: breaker.host, model: breaker.model }, BREAKER_VALUE[breaker.state]);
      },
    });
    new Gauge({
      name: 'gpumesh_host_breaker_state', help: 'A host\'s own circuit breaker (its link dropping): 0 closed, 1 half-open, 2 open', labelNames: ['host'], registers,
      collect() {
        this.reset();
        for (const breaker of sources.breakers?.() ?? []) if (breaker.model === null) this.set({ host: breaker.host }, BREAKER_VALUE[breaker.state]);
      },
    });
    new Gauge({
      name: 'gpumesh_replica_throughput_jobs_per_second', help: 'Measured jobs per second of a model on a host (moving average over completed batches)',
      labelNames: ['host', 'model'], registers,
      collect() {
        this.reset();
        for (const entry of sources.throughput?.() ?? []) this.set({ host: entry.host, model: entry.model }, entry.jobsPerSecond);
      },
    });
    this.#breakerTransitions = new Counter({
      name: 'gpumesh_breaker_transitions_total', help: 'Circuit breaker state changes, by the state entered (model "" is the host\'s own breaker)',
      labelNames: ['host', 'model', 'to'], registers,
    });
    this.#attemptTimeouts = new Counter({
      name: 'gpumesh_attempt_timeouts_total', help: 'Batches given up for outliving their attempt timeout (AGENT_TIMEOUT)', labelNames: ['host', 'model'], registers,
    });
    this.#probes = new Counter({
      name: 'gpumesh_probes_total', help: 'Health probes finished, by outcome (ok, failed, timeout, lost, inconclusive)', labelNames: ['host', 'model', 'outcome'], registers,
    });
    deviceGauge('gpumesh_device_memory_used_bytes', 'Memory the host\'s resident models take on the device', (device) => device.usedMB * MB);
    deviceGauge('gpumesh_device_memory_budget_bytes', 'Memory the agent may use on the device', (device) => device.budgetMB * MB);
  }

  batchDispatched(model: string, size: number, queueWaitsMs: readonly number[]): void {
    this.#executions.inc({ model });
    this.#inferences.inc({ model }, size);
    for (const wait of queueWaitsMs) this.#queueSeconds.observe({ model }, wait / 1000);
  }

  jobFinished(model: string, outcome: 'succeeded' | 'failed' | 'cancelled' | 'expired', totalMs: number, computeMs?: number): void {
    this.#requests.inc({ model, outcome });
    this.#requestSeconds.observe({ model, outcome }, totalMs / 1000);
    if (computeMs !== undefined) this.#computeSeconds.observe({ model }, computeMs / 1000);
    for (const listener of this.#finishedListeners) listener(model, outcome, totalMs);
  }

  /** A job that succeeded took this much energy (J) on `host` (its share of its batch's). */
  energyUsed(model: string, host: string, joules: number): void {
    this.#energy.inc({ model, host }, joules);
    this.#energyByModel.set(model, (this.#energyByModel.get(model) ?? 0) + joules);
    this.#energyByHost.set(host, (this.#energyByHost.get(host) ?? 0) + joules);
  }

  /** Energy since the orchestrator started, in Wh, by model and by host (only those that reported any). */
  energy(): { byModel: Record<string, number>; byHost: Record<string, number> } {
    const wh = (map: Map<string, number>): Record<string, number> => Object.fromEntries([...map].sort(([a], [b]) => a.localeCompare(b)).map(([key, joules]) => [key, Math.round(joules / 3.6) / 1000]));
    return { byModel: wh(this.#energyByModel), byHost: wh(this.#energyByHost) };
  }

  /** Subscribe to every job that reaches a terminal state: its model, outcome and time from admission. */
  onJobFinished(listener: (model: string, outcome: string, totalMs: number) => void): void {
    this.#finishedListeners.push(listener);
  }

  rejected(model: string, reason: 'queue_full' | 'mesh_full' | 'rate_limited' | 'cap_reached'): void {
    this.#rejected.inc({ model, reason });
  }

  reportRefused(host: string, message: string, count = 1): void {
    this.#refusedReports.inc({ host, message }, count);
  }

  linkClosed(reason: 'over-budget'): void {
    this.#linksClosed.inc({ reason });
  }

  blobIntegrityFailed(check: 'size' | 'hash'): void {
    this.#blobIntegrityFailures.inc({ check });
  }

  blobVerified(): void {
    this.#blobVerifications.inc();
  }

  attemptTimedOut(host: string, model: string): void {
    this.#attemptTimeouts.inc({ host, model });
  }

  probed(host: string, model: string, outcome: string): void {
    this.#probes.inc({ host, model, outcome });
  }

  breakerChanged(host: string, model: string | null, to: BreakerState): void {
    this.#breakerTransitions.inc({ host, model: model ?? '', to });
  }

  replicaLoadRefused(host: string, model: string, code: string): void {
    this.#replicaRefusals.inc({ host, model, code });
  }

  /** Set by the autoscaler after each look. */
  replicas(model: string, ready: number, desired: number): void {
    this.#replicas.set({ model }, ready);
    this.#replicasDesired.set({ model }, desired);
  }

  async text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
