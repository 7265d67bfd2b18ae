import type { Logger } from 'pino';
import type { BatchMemoryReport } from '../../protocol/index.js';
import type { Clock } from '../../protocol/clock.js';
import type { EventBus } from '../events/event-bus.js';
import { LinkRefusals } from './refusals.js';
import type { MeshMetrics } from '../metrics/mesh-metrics.js';
import type { RegisteredModel } from '../registry/index.js';
import type { BlobStore } from '../blobs/blob-store.js';
import type { DigestLocks } from '../blobs/digest-locks.js';
import type { AttemptBudgets, HostRegistry, Router } from '../routing/index.js';
import type { Admission, Scheduler } from '../scheduler/index.js';
import type { Commits, MeshStore } from '../store/index.js';
import { AttemptTimeouts } from './attempt-timeouts.js';
import { Cancellation } from './cancellation.js';
import { Dispatcher } from './dispatcher.js';
import { Failover } from './failover.js';
import { InFlight } from './in-flight.js';
import { JobOutputs } from './outputs.js';
import { Recovery } from './recovery.js';
import { ResultIntake } from './results.js';
import { JobSources, type JobSourcesDeps, type SourcePictures } from './sources.js';
import { JobStates } from './states.js';

export interface JobCoreDeps {
  store: MeshStore;
  commits: Commits;
  clock: Clock;
  events: EventBus;
  metrics: MeshMetrics;
  scheduler: Scheduler;
  router: Router;
  hosts: HostRegistry;
  admission: Admission;
  blobs: BlobStore;
  /** The per-digest locks the blob services share (outputs are stored and published under them). */
  locks: DigestLocks;
  log: Logger;
  model(name: string): RegisteredModel | undefined;
  uploadCredential(batchId: string, validUntil: number): string;
  retryBackoffMs: number;
  reconnectGraceMs: number;
  uploadLimitBytes: number;
  /** Learn from the memory a batch measured (MemoryPlanner.observe). */
  observeMemory?(model: string, report: BatchMemoryReport): void;
  /** How long each attempt may take on its host (per-attempt timeouts). */
  attemptBudgets: AttemptBudgets;
  /** Pictures judged by digest (InputImages): a source's output is one before a waiting job starts from it. */
  pictures?: SourcePictures;
  /** A waiting job's caps, checked again when it is released (JobSourcesDeps.checkCaps); absent: not enforced. */
  checkCaps?: JobSourcesDeps['checkCaps'];
}

/** The job roles, built in dependency order: what the orchestrator and the role tests both run. */
export interface JobCore {
  states: JobStates;
  inFlight: InFlight;
  dispatcher: Dispatcher;
  failover: Failover;
  cancellation: Cancellation;
  /** Jobs that wait for other jobs' outputs. */
  sources: JobSources;
  recovery: Recovery;
  outputs: JobOutputs;
  intake: ResultIntake;
  timeouts: AttemptTimeouts;
  /** Tells of what hosts report that is refused, once per message (the intake's reports, the hub's model reports). */
  refusals: LinkRefusals;
  /** Stop every timer the roles hold (shutdown). */
  close(): void;
}

export function createJobCore(deps: JobCoreDeps): JobCore {
  const { store, commits, clock, events, metrics, log, model } = deps;
  const states = new JobStates({ store, commits, clock, events, metrics, log: log.child({ part: 'jobs' }) });
  const inFlight = new InFlight();
  const dispatcher = new Dispatcher({
    clock, scheduler: deps.scheduler, router: deps.router, hosts: deps.hosts, states, inFlight, admission: deps.admission, metrics, model,
    uploadCredential: deps.uploadCredential, log: log.child({ part: 'dispatch' }),
  });
  const failover = new Failover({ clock, states, inFlight, dispatcher, model, retryBackoffMs: deps.retryBackoffMs, log: log.child({ part: 'failover' }) });
  const cancellation = new Cancellation({ clock, states, inFlight, dispatcher });
  const sources = new JobSources({ store, states, dispatcher, pictures: deps.pictures, checkCaps: deps.checkCaps, log: log.child({ part: 'sources' }) });
  const recovery = new Recovery({ clock, states, inFlight, dispatcher, cancellation, sources, reconnectGraceMs: deps.reconnectGraceMs, log: log.child({ part: 'recovery' }) });
  const outputs = new JobOutputs({ store, commits, clock, blobs: deps.blobs, locks: deps.locks, states, limitBytes: deps.uploadLimitBytes });
  const refusals = new LinkRefusals({ clock, events, metrics, log: log.child({ part: 'link' }) });
  const intake = new ResultIntake({
    clock, states, inFlight, failover, outputs, locks: deps.locks, commits, refusals, log: log.child({ part: 'results' }), observeMemory: deps.observeMemory,
  });
  const timeouts = new AttemptTimeouts({
    clock, states, inFlight, failover, dispatcher, hosts: deps.hosts, budgets: deps.attemptBudgets, metrics, model, log: log.child({ part: 'timeouts' }),
  });
  return {
    states, inFlight, dispatcher, failover, cancellation, sources, recovery, outputs, intake, timeouts, refusals,
    close() {
      for (const part of [dispatcher, failover, cancellation, recovery, timeouts, states]) part.close();
    },
  };
}
