import type { JobEvent, MeshEvent } from '../../protocol/api/index.js';
import { systemClock, type Clock } from '../../protocol/clock.js';

/** The attributes of a job that decide who may see its events. */
export interface EventScope {
  type: string;
  model: string;
  album: string;
}

export type ScopedEvent =
  /** `id` is `<epoch>.<seq>`: the SSE event id; a reconnecting client sends it back as Last-Event-ID. */
  | { id: string; kind: 'job'; event: JobEvent; scope: EventScope }
  /** About the mesh rather than a job: for grants that may read mesh status. */
  | { id: string; kind: 'mesh'; event: MeshEvent };

type Listener = (scoped: ScopedEvent) => void;
type JobListener = (scoped: Extract<ScopedEvent, { kind: 'job' }>) => void;

const REPLAY_EVENTS = 4096;

/**
 * In-process fan-out of events to SSE streams. Listeners of one job are
 * kept apart from listeners of everything, so a busy mesh does not call every
 * job-stream listener for every event. The newest events are kept so a client
 * that reconnects with Last-Event-ID misses nothing; ids carry this process's
 * start time, so an id from before a restart is recognised as unreplayable.
 */
export class EventBus {
  readonly #all = new Set<Listener>();
  readonly #byJob = new Map<string, Set<JobListener>>();
  /** This process's start, in the ids: an id from before a restart is recognised as unreplayable. */
  readonly #epoch: string;
  readonly #recent = new Ring<ScopedEvent>(REPLAY_EVENTS);
  #seq = 0;

  /** The mesh's time: the ids' epoch, and the waits of those who listen for an event (a job's end, a keepalive). */
  readonly clock: Clock;

  constructor(clock: Clock = systemClock) {
    this.clock = clock;
    this.#epoch = clock.now().toString(36);
  }

  publish(event: JobEvent, scope: EventScope): void {
    const scoped = { id: this.#nextId(), kind: 'job' as const, event, scope };
    this.#remember(scoped);
    const listeners = this.#byJob.get(event.jobId);
    if (listeners) for (const listener of listeners) listener(scoped);
  }

  /**
   * An event for the job's followers only, never kept for replay nor sent to every stream (a preview picture: large,
   * and worth something only while the job runs).
   */
  publishLive(event: JobEvent, scope: EventScope): void {
    const listeners = this.#byJob.get(event.jobId);
    if (!listeners) return;
    const scoped = { id: this.#nextId(), kind: 'job' as const, event, scope };
    for (const listener of listeners) listener(scoped);
  }

  publishMesh(event: MeshEvent): void {
    this.#remember({ id: this.#nextId(), kind: 'mesh', event });
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
      const oldest = this.#recent.oldest();
      const oldestSeq = oldest ? seqOf(oldest.id) : this.#seq + 1;
      if (epoch === this.#epoch && Number.isInteger(seq) && seq >= oldestSeq - 1) {
        replayed = true;
        this.#recent.forEach((scoped) => { if (seqOf(scoped.id) > seq) listener(scoped); });
      }
    }
    this.#all.add(listener);
    return { unsubscribe: () => this.#all.delete(listener), replayed };
  }

  subscribeJob(jobId: string, listener: JobListener): () => void {
    let listeners = this.#byJob.get(jobId);
    if (!listeners) this.#byJob.set(jobId, (listeners = new Set()));
    listeners.add(listener);
    return () => {
      listeners.delete(listener);
      if (listeners.size === 0) this.#byJob.delete(jobId);
    };
  }

  #nextId(): string {
    return `${this.#epoch}.${++this.#seq}`;
  }

  #remember(scoped: ScopedEvent): void {
    this.#recent.push(scoped);
    for (const listener of this.#all) listener(scoped);
  }
}

const seqOf = (id: string): number => Number(id.slice(id.indexOf('.') + 1));

/** The newest `capacity` items, oldest first: a fixed array written round, so keeping one more costs no copying. */
class Ring<T> {
  readonly #items: (T | undefined)[];
  #next = 0;
  #size = 0;

  constructor(capacity: number) {
    this.#items = new Array<T | undefined>(capacity);
  }

  push(item: T): void {
    this.#items[this.#next] = item;
    this.#next = (this.#next + 1) % this.#items.length;
    this.#size = Math.min(this.#size + 1, this.#items.length);
  }

  oldest(): T | undefined {
    return this.#size === 0 ? undefined : this.#items[(this.#next - this.#size + this.#items.length) % this.#items.length];
  }

  forEach(visit: (item: T) => void): void {
    const start = this.#next - this.#size + this.#items.length;
    for (let k = 0; k < this.#size; k++) visit(this.#items[(start + k) % this.#items.length]!);
  }
}
