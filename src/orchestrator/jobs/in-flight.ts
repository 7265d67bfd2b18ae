import type { HostSession, InFlightBatch } from '../routing/index.js';

/** Where a dispatched job is: the host session that holds it and the batch it is part of. */
export interface Placement {
  host: HostSession;
  batch: InFlightBatch;
}

/**
 * Which host session holds each dispatched job, in which batch. This is what
 * decides whose reports count: only the session a job was dispatched to (or
 * that took it over after a reconnect) may report on it. A batch with no jobs
 * left frees its host's slot.
 */
export class InFlight {
  readonly #byJob = new Map<string, Placement>();
  readonly #slotFreed = new Set<(host: HostSession) => void>();

  /** Record a batch sent to a host. */
  place(host: HostSession, batch: InFlightBatch): void {
    host.batches.set(batch.id, batch);
    for (const jobId of batch.jobIds) this.#byJob.set(jobId, { host, batch });
  }

  of(jobId: string): Placement | undefined {
    return this.#byJob.get(jobId);
  }

  /** Whether this session holds this job as part of this batch. */
  holds(host: HostSession, batchId: string, jobId: string): boolean {
    const placement = this.#byJob.get(jobId);
    return placement !== undefined && placement.host === host && placement.batch.id === batchId;
  }

  /** The jobs a session holds, batch by batch. */
  jobsOf(host: HostSession): { jobId: string; batch: InFlightBatch }[] {
    return [...host.batches.values()].flatMap((batch) => [...batch.jobIds].map((jobId) => ({ jobId, batch })));
  }

  /** Hand a job to another session (a reconnect of the same host that still holds it), keeping its batch id. */
  move(jobId: string, to: HostSession, batchId: string, model: string, dispatchedAt: number): void {
    this.release(jobId, false);
    let batch = to.batches.get(batchId);
    if (!batch) to.batches.set(batchId, (batch = { id: batchId, model, jobIds: new Set(), dispatchedAt }));
    batch.jobIds.add(jobId);
    this.#byJob.set(jobId, { host: to, batch });
  }

  /** Forget where a job is; a batch left empty frees its host's slot. */
  release(jobId: string, notify = true): void {
    const placement = this.#byJob.get(jobId);
    if (!placement) return;
    this.#byJob.delete(jobId);
    placement.batch.jobIds.delete(jobId);
    if (placement.batch.jobIds.size > 0 || placement.host.batches.get(placement.batch.id) !== placement.batch) return;
    placement.host.batches.delete(placement.batch.id);
    // A computed batch gave its slot back already.
    if (notify && !placement.batch.computed) for (const listener of this.#slotFreed) listener(placement.host);
  }

  /**
   * The host's engine is done with a batch it holds (its outputs are on their way): its slot is free now, though its
   * jobs stay placed until their results. False when the host holds no such batch.
   */
  computed(host: HostSession, batchId: string): boolean {
    if (!host.batchComputed(batchId)) return false;
    for (const listener of this.#slotFreed) listener(host);
    return true;
  }

  onSlotFreed(listener: (host: HostSession) => void): void {
    this.#slotFreed.add(listener);
  }
}
