import type { Device, OrchestratorMessage, ResidentModel } from '../../protocol/index.js';
import type { Clock, Timer } from '../clock.js';

/** A batch a host is running: which jobs, on which model, since when. */
export interface InFlightBatch {
  id: string;
  model: string;
  jobIds: Set<string>;
  dispatchedAt: number;
}

export interface HostInfo {
  id: string;
  classes: string[];
  devices: Device[];
  engines: string[];
  concurrency: number;
  version: string;
}

/**
 * One connected agent as the orchestrator sees it: what it said in its hello,
 * what its heartbeats report, the batches it runs, and the way to send it a
 * message. The link layer feeds it; the router reads it; the dispatcher
 * records batches on it.
 */
export class HostSession {
  readonly info: HostInfo;
  readonly session: string;
  readonly connectedAt: number;
  lastSeenAt: number;
  resident: ResidentModel[] = [];
  devices: Device[];
  /** Model digests in the agent's local file cache (loading one of these needs no pull). */
  readonly cached: Set<string>;
  readonly batches = new Map<string, InFlightBatch>();
  /** Health probes running here (batch ids); each takes a slot like a batch. */
  readonly probes = new Set<string>();
  /** Finishing its work and taking no more (set by whoever drains hosts); the router passes it over. */
  draining = false;
  /**
   * Replica changes the autoscaler asked this host for and has not seen happen yet, by model name: a model being
   * loaded is a replica already (no other host is asked for it, and batches may go there and wait for the load);
   * one being unloaded neither counts nor takes batches.
   */
  readonly replicaChanges = new Map<string, { change: 'load' | 'unload'; at: number }>();
  /** Models this host was asked to hold for their minReplicas (`load` with `hold`). */
  readonly held = new Set<string>();
  readonly #send: (message: OrchestratorMessage) => void;
  readonly #ackLater: AckDelay | null;
  #acks: string[] = [];
  #ackTimer: Timer | null = null;

  /**
   * `ackDelay`: acknowledgements wait up to this long and ride along with the next message to the host — the next
   * batch, usually — instead of waking the agent once for each (null: they leave at the end of the tick).
   */
  constructor(info: HostInfo, cached: readonly string[], session: string, now: number, send: (message: OrchestratorMessage) => void, ackDelay: AckDelay | null = null) {
    this.info = info;
    this.cached = new Set(cached);
    this.session = session;
    this.connectedAt = now;
    this.lastSeenAt = now;
    this.devices = info.devices;
    this.#send = send;
    this.#ackLater = ackDelay;
  }

  get id(): string {
    return this.info.id;
  }

  get freeSlots(): number {
    return Math.max(0, this.info.concurrency - this.batches.size - this.probes.size);
  }

  get jobsInFlight(): number {
    let count = 0;
    for (const batch of this.batches.values()) count += batch.jobIds.size;
    return count;
  }

  isResident(model: string): boolean {
    return this.resident.some((entry) => entry.model === model);
  }

  /** A loaded replica: the model is resident here and not being unloaded. */
  hasReadyReplica(model: string): boolean {
    return this.isResident(model) && this.replicaChanges.get(model)?.change !== 'unload';
  }

  /** A replica as the autoscaler counts them: ready, being loaded, or running the model (a load on demand); not being unloaded. */
  hasReplica(model: string): boolean {
    const change = this.replicaChanges.get(model)?.change;
    if (change !== undefined) return change === 'load';
    if (this.isResident(model)) return true;
    for (const batch of this.batches.values()) if (batch.model === model) return true;
    return false;
  }

  /** The largest memory budget of any device: a model bigger than this can never load here. */
  get largestBudgetMB(): number {
    return Math.max(0, ...this.devices.map((device) => device.budgetMB));
  }

  /** The agent loaded a model: it is resident, and its file is in the agent's cache. */
  loaded(model: ResidentModel): void {
    this.resident = [...this.resident.filter((entry) => entry.model !== model.model), model];
    this.cached.add(model.digest);
  }

  unloaded(model: string): void {
    this.resident = this.resident.filter((entry) => entry.model !== model);
  }

  send(message: OrchestratorMessage): void {
    this.#flushAcks();
    this.#send(message);
  }

  /** Acknowledge a result; acknowledgements travel together (see the constructor's `ackDelay`). */
  ack(jobId: string): void {
    if (this.#acks.length === 0) {
      if (this.#ackLater) this.#ackTimer = this.#ackLater.clock.setTimer(this.#ackLater.ms, () => this.#flushAcks());
      else queueMicrotask(() => this.#flushAcks());
    }
    this.#acks.push(jobId);
  }

  #flushAcks(): void {
    this.#ackTimer?.cancel();
    this.#ackTimer = null;
    if (this.#acks.length === 0) return;
    const jobIds = this.#acks;
    this.#acks = [];
    this.#send({ type: 'ack', jobIds });
  }
}

export interface AckDelay {
  clock: Pick<Clock, 'setTimer'>;
  ms: number;
}
