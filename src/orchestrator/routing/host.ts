import type { Device, OrchestratorMessage, ResidentModel } from '../../protocol/index.js';

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
  /** Model digests in the agent's local cache. */
  cachedModels: string[];
}

/**
 * One connected agent as the orchestrator sees it. The link layer feeds it
 * messages; the router reads it; the dispatcher records batches on it.
 */
export class HostSession {
  readonly info: HostInfo;
  readonly session: string;
  readonly connectedAt: number;
  lastSeenAt: number;
  resident: ResidentModel[] = [];
  devices: Device[];
  readonly batches = new Map<string, InFlightBatch>();
  readonly #send: (message: OrchestratorMessage) => void;
  #acks: string[] = [];

  constructor(info: HostInfo, session: string, now: number, send: (message: OrchestratorMessage) => void) {
    this.info = info;
    this.session = session;
    this.connectedAt = now;
    this.lastSeenAt = now;
    this.devices = info.devices;
    this.#send = send;
  }

  get id(): string {
    return this.info.id;
  }

  get freeSlots(): number {
    return Math.max(0, this.info.concurrency - this.batches.size);
  }

  get jobsInFlight(): number {
    let count = 0;
    for (const batch of this.batches.values()) count += batch.jobIds.size;
    return count;
  }

  isResident(model: string): boolean {
    return this.resident.some((entry) => entry.model === model);
  }

  /** The largest memory budget of any device: a model bigger than this can never load here. */
  get largestBudgetMB(): number {
    return Math.max(0, ...this.devices.map((device) => device.budgetMB));
  }

  send(message: OrchestratorMessage): void {
    this.#send(message);
  }

  /** Acknowledge a result; acknowledgements made in one tick travel as one message. */
  ack(jobId: string): void {
    if (this.#acks.length === 0) {
      queueMicrotask(() => {
        const jobIds = this.#acks;
        this.#acks = [];
        this.#send({ type: 'ack', jobIds });
      });
    }
    this.#acks.push(jobId);
  }

  /** Which batch, if any, holds this job. */
  batchOf(jobId: string): InFlightBatch | undefined {
    for (const batch of this.batches.values()) if (batch.jobIds.has(jobId)) return batch;
    return undefined;
  }
}
