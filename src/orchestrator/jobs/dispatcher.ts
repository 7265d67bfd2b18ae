import type { Logger } from 'pino';
import { MeshError } from '../../protocol/index.js';
import type { Clock, Timer } from '../../protocol/clock.js';
import type { MeshMetrics } from '../metrics/mesh-metrics.js';
import type { RegisteredModel } from '../registry/index.js';
import { encodeRoute, needsOf, type HostRegistry, type HostSession, type RouteDecision, type Router } from '../routing/index.js';
import type { Admission, QueuedJob, Release, Scheduler } from '../scheduler/index.js';
import type { JobRecord } from '../store/index.js';
import { newId } from '../store/ids.js';
import type { InFlight } from './in-flight.js';
import type { JobStates } from './states.js';
import { runMessage, type MintUploadCredential } from '../routing/run-message.js';

export interface DispatcherDeps {
  clock: Clock;
  scheduler: Scheduler;
  router: Router;
  hosts: HostRegistry;
  states: JobStates;
  inFlight: InFlight;
  admission: Admission;
  metrics: MeshMetrics;
  log: Logger;
  model(name: string): RegisteredModel | undefined;
  /** A credential that lets the outputs of one batch's jobs be uploaded until `validUntil` (epoch ms). */
  uploadCredential: MintUploadCredential;
}

/**
 * Moves work from the queues to the hosts: puts jobs in their queues, asks
 * the scheduler for the next batch whenever something changed (an arrival, a
 * freed slot, a host joining), records the batch and sends `run` over the
 * host's link. The one place that composes what a host is told to run or stop.
 */
export class Dispatcher {
  readonly #deps: DispatcherDeps;
  readonly #pickHost: (model: RegisteredModel, job: QueuedJob) => HostSession | null;
  /** The router's last decision: the scheduler releases a batch right after the pick that found its host. */
  #decision: RouteDecision | null = null;
  #pumpQueued = false;
  #wake: { at: number; timer: Timer } | null = null;
  #closed = false;

  constructor(deps: DispatcherDeps) {
    this.#deps = deps;
    this.#pickHost = (model, job) => {
      this.#decision = deps.router.route(model, { classes: job.classes, hosts: job.hosts ?? null, avoid: job.avoid, workflow: job.input ? needsOf(job.input) : null });
      return this.#decision.host;
    };
    deps.inFlight.onSlotFreed(() => this.requestPump());
    deps.hosts.onChange(() => this.requestPump());
    deps.states.onTerminal((job) => {
      deps.scheduler.remove(job.model, job.id);
      deps.inFlight.release(job.id);
    });
  }

  /** Put a queued job in its model's queue; a retry names the hosts that failed it, to go elsewhere when it can. */
  enqueue(job: JobRecord, avoid: readonly string[] = []): void {
    const model = this.#deps.model(job.model);
    if (!model) {
      this.#deps.states.ended(job, 'failed', new MeshError('UNKNOWN_MODEL', { model: job.model, known: '(the model was removed since the job was queued)' }));
      return;
    }
    // Jobs share a batch only if they would be routed alike: same shapes, same classes in the same order, same granted and avoided hosts.
    this.#deps.scheduler.enqueue({
      id: job.id, seq: job.seq, model: job.model, priority: job.priority, enqueuedAt: this.#deps.clock.now(),
      compatKey: `${model.jobInputs.compatKey(job.input)}|${job.classes.join(',')}|${job.hosts?.join(',') ?? '*'}|${avoid.join(',')}`,
      classes: job.classes, hosts: job.hosts, avoid, input: job.input, lineage: job.grantId,
    });
    this.requestPump();
  }

  /** Tell the host that holds a job to stop it. */
  cancelOnHost(jobId: string): void {
    this.#deps.inFlight.of(jobId)?.host.send({ type: 'cancel', jobId });
  }

  /** Coalesce many triggers (arrivals, freed slots) into one pass after the current tick's work. */
  requestPump(): void {
    if (this.#pumpQueued || this.#closed) return;
    this.#pumpQueued = true;
    queueMicrotask(() => {
      this.#pumpQueued = false;
      this.pump();
    });
  }

  /** Send every batch that is ready and has a host; then sleep until the next one may be. */
  pump(): void {
    const { clock, scheduler } = this.#deps;
    for (;;) {
      const next = scheduler.next(clock.now(), this.#pickHost);
      if ('wakeAt' in next) {
        this.#armWake(next.wakeAt);
        return;
      }
      this.#send(next.release);
    }
  }

  close(): void {
    this.#closed = true;
    this.#wake?.timer.cancel();
    this.#wake = null;
  }

  #send({ model, jobs: queued, host }: Release): void {
    const { states, clock } = this.#deps;
    const now = clock.now();
    const batchId = newId('b');
    const name = model.manifest.name;
    const records = queued.map((entry) => states.active(entry.id)).filter((job): job is JobRecord => job?.status === 'queued');
    const route = this.#decision?.host === host ? encodeRoute(this.#decision) : null;
    this.#decision = null;
    const jobs = states.dispatched(records, { batchId, host: host.id, replica: `${host.id}/${name}`, route });
    if (jobs.length === 0) return;
    this.#deps.inFlight.place(host, { id: batchId, model: name, jobIds: new Set(jobs.map((job) => job.id)), dispatchedAt: now });
    // Valid for as long as the batch's jobs may run, and an hour more for slow uploads.
    const validUntil = Math.max(...jobs.map((job) => job.deadlineAt ?? now + model.policy.maxTimeoutMs)) + 3_600_000;
    host.send(runMessage({
      batchId, model: model.manifest, validUntil, jobs: jobs.map((job) => ({ id: job.id, input: job.input, deadlineAt: job.deadlineAt })),
    }, this.#deps.uploadCredential));
    // Bookkeeping after the send: the batch is on its way sooner.
    this.#deps.admission.recordDrain(name, jobs.length);
    this.#deps.metrics.batchDispatched(name, jobs.length, jobs.map((job) => now - job.createdAt));
    this.#deps.log.debug({ batchId, host: host.id, model: name, size: jobs.length }, 'batch dispatched');
  }

  #armWake(at: number): void {
    const now = this.#deps.clock.now();
    if (this.#wake && this.#wake.at <= at && this.#wake.at > now) return;
    this.#wake?.timer.cancel();
    this.#wake = null;
    if (at === Infinity || this.#closed) return;
    const timer = this.#deps.clock.setTimer(at - now, () => {
      this.#wake = null;
      this.pump();
    });
    this.#wake = { at, timer };
  }
}
