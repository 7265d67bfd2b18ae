import type { JobEvent } from '../protocol/index.js';

/** The attributes of a job that decide who may see its events. */
export interface EventScope {
  type: string;
  model: string;
  album: string;
}

export interface ScopedEvent {
  /** `<epoch>.<seq>`: the SSE event id; a reconnecting client sends it back as Last-Event-ID. */
  id: string;
  event: JobEvent;
  scope: EventScope;
}

type Listener = (scoped: ScopedEvent) => void;

const REPLAY_EVENTS = 4096;

/**
 * In-process fan-out of job events to SSE streams. Listeners of one job are
 * kept apart from listeners of everything, so a busy mesh does not call every
 * job-stream listener for every event. The newest events are kept so a client
 * that reconnects with Last-Event-ID misses nothing; ids carry this process's
 * start time, so an id from before a restart is recognised as unreplayable.
 */
export class JobEventBus {
  readonly #all = new Set<Listener>();
  readonly #byJob = new Map<string, Set<Listener>>();
  readonly #epoch = Date.now().toString(36);
  readonly #recent: ScopedEvent[] = [];
  #seq = 0;

  publish(event: JobEvent, scope: EventScope): void {
    const scoped = { id: `${this.#epoch}.${++this.#seq}`, event, scope };
    this.#recent.push(scoped);
    if (this.#recent.length > REPLAY_EVENTS) this.#recent.splice(0, this.#recent.length - REPLAY_EVENTS);
    for (const listener of this.#all) listener(scoped);
    const listeners = this.#byJob.get(event.jobId);
    if (listeners) for (const listener of listeners) listener(scoped);
  }

  /**
   * Listen to every event. With `after` (a Last-Event-ID), first replay what
   * came after it; returns false as `replayed` when that id cannot be replayed
   * (another process's, or older than the buffer), so the client must resync.
   */
  subscribeAll(listener: Listener, after?: string): { unsubscribe: () => void; replayed: boolean } {
    let replayed = after === undefined;
    if (after !== undefined) {
      const [epoch, seqText] = after.split('.');
      const seq = Number(seqText);
      const oldest = this.#recent[0];
      const oldestSeq = oldest ? Number(oldest.id.split('.')[1]) : this.#seq + 1;
      if (epoch === this.#epoch && Number.isInteger(seq) && seq >= oldestSeq - 1) {
        replayed = true;
        for (const scoped of this.#recent) if (Number(scoped.id.split('.')[1]) > seq) listener(scoped);
      }
    }
    this.#all.add(listener);
    return { unsubscribe: () => this.#all.delete(listener), replayed };
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
