import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pino } from 'pino';
import { sha256Digest, type OrchestratorMessage } from '../../src/protocol/index.js';
import { FakeClock } from './fake-clock.js';
import { policyFor, resolveConfig, type BreakerPolicy, type ResolvedModelPolicy } from '../../src/orchestrator/config/config.js';
import { EventBus, type ScopedEvent } from '../../src/orchestrator/events/event-bus.js';
import { createJobCore, type JobCore, type JobCoreDeps, type RowWrite } from '../../src/orchestrator/jobs/index.js';
import { MeshMetrics } from '../../src/orchestrator/metrics/mesh-metrics.js';
import { type RegisteredModel } from '../../src/orchestrator/registry/index.js';
import { DigestLocks } from '../../src/orchestrator/blobs/digest-locks.js';
import { LocalBlobStore } from '../../src/orchestrator/blobs/local-blob-store.js';
import { JOB_INPUTS } from '../../src/orchestrator/job-inputs/job-inputs.js';
import { AttemptBudgets, BreakerBoard, HealthBook, HostRegistry, HostSession, Prober, Router, ThroughputBook, type AttemptTimeoutPolicy } from '../../src/orchestrator/routing/index.js';
import { announceBreakers } from '../../src/orchestrator/metrics/announce-breakers.js';
import { RoutingFeedback } from '../../src/orchestrator/jobs/routing-feedback.js';
import { Admission, Scheduler } from '../../src/orchestrator/scheduler/index.js';
import { jobs as jobStore, SqliteStore, type Db, type GroupCommit, type JobRecord } from '../../src/orchestrator/store/index.js';

export interface FakeHost {
  session: HostSession;
  sent: OrchestratorMessage[];
  /** Messages of one type sent to this host so far. */
  of<T extends OrchestratorMessage['type']>(type: T): Extract<OrchestratorMessage, { type: T }>[];
}

/**
 * The orchestrator's job roles wired as the facade wires them, on an
 * in-memory store and a fake clock, with hosts whose links are arrays.
 * Time moves only with `clock.advance`; commits happen with `settle()`.
 */
export class JobCoreHarness {
  readonly clock: FakeClock;
  readonly events = new EventBus();
  readonly seen: ScopedEvent[] = [];
  readonly hosts = new HostRegistry();
  readonly store: SqliteStore;
  readonly db: Db;
  readonly commits: GroupCommit;
  readonly metrics: MeshMetrics;
  readonly scheduler: Scheduler;
  readonly core: JobCore;
  readonly models = new Map<string, RegisteredModel>();
  readonly breakers: BreakerBoard;
  readonly throughput = new ThroughputBook();
  readonly health: HealthBook;
  readonly router: Router;
  readonly prober: Prober;
  #seq = 0;

  constructor(options: {
    store?: SqliteStore; policy?: Partial<ResolvedModelPolicy>; retryBackoffMs?: number; reconnectGraceMs?: number;
    breakers?: Partial<BreakerPolicy>; attemptTimeout?: Partial<AttemptTimeoutPolicy>; probeIntervalMs?: number; heartbeatMs?: number; random?: () => number;
    clock?: FakeClock;
    /** A waiting job's caps, checked at its release (JobCoreDeps.checkCaps). */
    checkCaps?: JobCoreDeps['checkCaps'];
  } = {}) {
    this.clock = options.clock ?? new FakeClock(1_000_000);
    this.store = options.store ?? new SqliteStore(':memory:');
    this.db = this.store.db;
    this.commits = this.store.commits;
    const config = resolveConfig({ breakers: { replica: options.breakers ?? {}, host: options.breakers ?? {} } }, '/tmp/unused');
    this.models.set('gen', {
      manifest: { name: 'gen', version: '1', engine: 'onnx', digest: `sha256:${'a'.repeat(64)}`, bytes: 1, memoryMB: 64, jobTypes: ['image'], params: {} },
      policy: { ...policyFor(config, 'gen'), ...options.policy },
      jobInputs: JOB_INPUTS.image,
    });
    this.scheduler = new Scheduler({ model: (name) => this.models.get(name), agingMs: 30_000 });
    this.breakers = new BreakerBoard({ clock: this.clock, policies: config.breakers });
    this.health = new HealthBook({ clock: this.clock, heartbeatMs: options.heartbeatMs ?? 1_000_000 });
    this.router = new Router({ hosts: this.hosts, breakers: this.breakers, health: this.health, throughput: this.throughput, random: options.random });
    const budgets = new AttemptBudgets(this.throughput, { ...config.health.attemptTimeout, ...options.attemptTimeout });
    this.metrics = new MeshMetrics({
      queueDepths: () => this.scheduler.depths(), hosts: this.hosts, breakers: () => this.breakers.all(), throughput: () => this.throughput.all(),
    });
    this.events.subscribeAll((scoped) => this.seen.push(scoped));
    const log = pino({ level: 'silent' });
    this.core = createJobCore({
      store: this.store, commits: this.commits, clock: this.clock, events: this.events, metrics: this.metrics, scheduler: this.scheduler,
      router: this.router, hosts: this.hosts, admission: new Admission(this.clock),
      blobs: new LocalBlobStore(mkdtempSync(join(tmpdir(), 'gpumesh-core-'))), locks: new DigestLocks(), log,
      model: (name) => this.models.get(name), uploadCredential: (batchId) => `upload-${batchId}`,
      retryBackoffMs: options.retryBackoffMs ?? 100, reconnectGraceMs: options.reconnectGraceMs ?? 5_000, uploadLimitBytes: 1 << 20,
      attemptBudgets: budgets, checkCaps: options.checkCaps,
    });
    this.core.states.observeAttempts(new RoutingFeedback({ breakers: this.breakers, throughput: this.throughput, health: this.health, model: (name) => this.models.get(name) }));
    announceBreakers({ breakers: this.breakers, events: this.events, metrics: this.metrics, log, clock: this.clock });
    this.prober = new Prober({
      clock: this.clock, hosts: this.hosts, breakers: this.breakers, health: this.health, budgets, log,
      model: (name) => this.models.get(name), models: () => this.models.values(), uploadCredential: (batchId) => `upload-${batchId}`,
      intervalMs: options.probeIntervalMs ?? 0, onProbed: (host, model, outcome) => this.metrics.probed(host, model, outcome),
    });
  }

  /** A connected host with `concurrency` slots. */
  host(id: string, options: { concurrency?: number; classes?: string[]; join?: boolean; engines?: string[]; budgetMB?: number; resident?: boolean } = {}): FakeHost {
    const sent: OrchestratorMessage[] = [];
    const session = new HostSession(
      {
        id, classes: options.classes ?? ['image'], engines: options.engines ?? ['onnx'], concurrency: options.concurrency ?? 1, version: 'test',
        devices: [{ id: 'cpu', kind: 'cpu', name: 'test', memoryTotalMB: 8192, budgetMB: options.budgetMB ?? 4096, usedMB: 0 }],
      },
      [], `${id}-${++this.#seq}`, this.clock.now(), (message) => sent.push(message),
    );
    if (options.resident) session.loaded({ model: 'gen', digest: this.models.get('gen')!.manifest.digest, device: 'cpu', memoryMB: 64, lastUsedAt: this.clock.now() });
    if (options.join !== false) this.hosts.set(session);
    return { session, sent, of: (type) => sent.filter((message) => message.type === type) as never };
  }

  /** Admit an image job the way the job service does. */
  /** `write`: when its row is written (JobStates.create): `now` unless told. */
  submit(fields: { deadlineAt?: number | null; prompt?: string; classes?: string[]; hosts?: string[] | null; write?: RowWrite } = {}): JobRecord {
    const job = this.core.states.create({
      id: `j_${++this.#seq}`, type: 'image', model: 'gen', priority: 2, album: 'default', classes: fields.classes ?? ['image'], hosts: fields.hosts ?? null,
      input: { prompt: fields.prompt ?? 'test', seed: 1, width: 8, height: 8, steps: 1 }, grantId: 'g', idempotencyKey: null,
      createdAt: this.clock.now(), deadlineAt: fields.deadlineAt ?? null,
    }, undefined, fields.write);
    this.core.cancellation.arm(job);
    this.core.dispatcher.enqueue(job);
    return job;
  }

  /** Let queued microtasks (pumps, acks) run and commit what was written. */
  async settle(): Promise<void> {
    for (let i = 0; i < 3; i++) {
      await Promise.resolve();
      this.commits.flush();
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /** Deliver an output of a job in a batch, as the upload route does. */
  async upload(jobId: string, batchId: string, bytes: Buffer): Promise<string> {
    const digest = sha256Digest(bytes);
    await this.core.outputs.receive({ jobId, batchId, digest, mediaType: 'image/png' }, Readable.from([bytes]));
    return digest;
  }

  status(jobId: string): string | undefined {
    return this.job(jobId)?.status;
  }

  /** A job's record: the one in memory while it is unfinished, else the store's (read at once: SQLite in memory). */
  job(jobId: string): JobRecord | null {
    return this.core.states.active(jobId) ?? jobStore.getJob(this.db, jobId);
  }

  jobEvents(jobId: string): string[] {
    return this.seen.flatMap((scoped) => (scoped.kind === 'job' && scoped.event.jobId === jobId ? [scoped.event.type] : []));
  }

  /** Mesh events of one type seen so far. */
  meshEvents(type: string): unknown[] {
    return this.seen.flatMap((scoped) => (scoped.kind === 'mesh' && scoped.event.type === type ? [scoped.event] : []));
  }

  close(): void {
    this.prober.close();
    this.breakers.close();
    this.core.close();
    this.commits.flush();
  }
}
