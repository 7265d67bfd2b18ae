import type { JobEvent } from '../protocol/index.js';

/** The attributes of a job that decide who may see its events. */
export interface EventScope {
  type: string;
  model: string;
  album: string;
}

export interface ScopedEvent {
  event: JobEvent;
  scope: EventScope;
}

type Listener = (scoped: ScopedEvent) => void;

/**
 * In-process fan-out of job events to SSE streams. Listeners of one job are
 * kept apart from listeners of everything, so a busy mesh does not call every
 * job-stream listener for every event.
 */
export class JobEventBus {
  readonly #all = new Set<Listener>();
  readonly #byJob = new Map<string, Set<Listener>>();

  publish(event: JobEvent, scope: EventScope): void {
    const scoped = { event, scope };
    for (const listener of this.#all) listener(scoped);
    const listeners = this.#byJob.get(event.jobId);
    if (listeners) for (const listener of listeners) listener(scoped);
  }

  subscribeAll(listener: Listener): () => void {
    this.#all.add(listener);
    return () => this.#all.delete(listener);
  }

  subscribeJob(jobId: string, listener: Listener): () => void {
    let listeners = this.#byJob.get(jobId);
    if (!listeners) this.#byJob.set(jobId, (listeners = new Set()));
    listeners.add(listener);
    return () => {
      listeners.delete(listener);
      if (listeners.size === 0) this.#byJob.delete(jobId);
    };
  }

  get listenerCount(): number {
    let count = this.#all.size;
    for (const listeners of this.#byJob.values()) count += listeners.size;
    return count;
  }
}
