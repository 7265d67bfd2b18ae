import type { JobEvent, MeshEvent } from '../../protocol/api/index.js';
import { systemClock, type Clock } from '../../protocol/clock.js';

/** The attributes of a job that decide who may see its events. */
export interface EventScope {
  type: string;
  model: string;
  album: string;
}

export type ScopedEvent =
  /**
   * `id` is `<epoch>.<seq>`: the SSE event id; a reconnecting client sends it back as Last-Event-ID. `data` is the
   * event as JSON where the bus made it (a `succeeded` event, which carries the job's result): once, for every stream
   * that sends it.
   */
  | { id: string; kind: 'job'; event: JobEvent; scope: EventScope; data?: string }
  /** About the mesh rather than a job: for grants that may read mesh status. */
  | { id: string; kind: 'mesh'; event: MeshEvent; data?: string };

type Listener = (scoped: ScopedEvent) => void;
type JobListener = (scoped: Extract<ScopedEvent, { kind: 'job' }>) => void;

/** The newest events kept for replay: this many at most, and at most about this many characters of them. */
const REPLAY_EVENTS = 4096;
const REPLAY_CHARS = 16 * 1024 * 1024;
/**
 * What an event without a result is counted as: its fields are the mesh's own words and ids, but for a `queued`
 * event's prompt (LIMITS.promptChars) and an error's message — a bound, not a measure.
 */
const SMALL_EVENT_CHARS = 2048;

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
  readonly #recent = new ReplayBuffer(REPLAY_EVENTS, REPLAY_CHARS);
  #seq = 0;

  /** The mesh's time: the ids' epoch, and the waits of those who listen for an event (a job's end, a keepalive). */
  readonly clock: Clock;

  constructor(clock: Clock = systemClock) {
    this.clock = clock;
    this.#epoch = clock.now().toString(36);
  }

  /** `json`: a `succeeded` event's JSON where its publisher made it already (exactly what JSON.stringify(event) writes). */
  publish(event: JobEvent, scope: EventScope, json?: string): void {
    // A job's end with its result and artifacts can be large: kept as its JSON, measured, and written as it is by every
    // stream that sends it.
    const data = event.type === 'succeeded' ? json ?? JSON.stringify(event) : undefined;
    const scoped = { id: this.#nextId(), kind: 'job' as const, event, scope, ...(data === undefined ? {} : { data }) };
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
      const oldestSeq = this.#recent.oldestSeq() ?? this.#seq + 1;
      if (epoch === this.#epoch && Number.isInteger(seq) && seq >= oldestSeq - 1) {
        replayed = true;
        this.#recent.forEach((kept) => { if (kept.seq > seq) listener(kept.scoped(this.#epoch)); });
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
    this.#recent.push(new KeptEvent(this.#seq, scoped));
    for (const listener of this.#all) listener(scoped);
  }
}

/**
 * An event as the replay buffer keeps it: its number, who may see it, and the event — as its JSON where it carries a
 * job's result and artifacts (a large one must be measured to be bounded, and a string is one flat object however
 * large), else as the event itself. The listener of a replay gets the event as it was published.
 */
class KeptEvent {
  readonly seq: number;
  readonly kind: ScopedEvent['kind'];
  readonly type: string;
  readonly model: string;
  readonly album: string;
  readonly event: JobEvent | MeshEvent | null;
  readonly data: string | null;

  constructor(seq: number, scoped: ScopedEvent) {
    this.seq = seq;
    this.kind = scoped.kind;
    // The scope's strings are the job's own (not copies): kept by reference, they cost nothing.
    this.type = scoped.kind === 'job' ? scoped.scope.type : '';
    this.model = scoped.kind === 'job' ? scoped.scope.model : '';
    this.album = scoped.kind === 'job' ? scoped.scope.album : '';
    this.data = scoped.data ?? null;
    this.event = this.data === null ? scoped.event : null;
  }

  /** What it counts for against the buffer's bound. */
  get chars(): number {
    return this.data?.length ?? SMALL_EVENT_CHARS;
  }

  scoped(epoch: string): ScopedEvent {
    const id = `${epoch}.${this.seq}`;
    const data = this.data ?? undefined;
    const event = this.event ?? JSON.parse(this.data!) as JobEvent | MeshEvent;
    if (this.kind === 'mesh') return { id, kind: 'mesh', event: event as MeshEvent };
    return { id, kind: 'job', event: event as JobEvent, scope: { type: this.type, model: this.model, album: this.album }, ...(data === undefined ? {} : { data }) };
  }
}

/**
 * The newest events, oldest first, up to `capacity` of them and about `maxChars` (a job's result rides in its
 * `succeeded` event: a few large ones must not hold the orchestrator's memory): a fixed array written round, so keeping
 * one more costs no copying.
 */
class ReplayBuffer {
  readonly #items: (KeptEvent | undefined)[];
  readonly #maxChars: number;
  #next = 0;
  #size = 0;
  #chars = 0;

  constructor(capacity: number, maxChars: number) {
    this.#items = new Array<KeptEvent | undefined>(capacity);
    this.#maxChars = maxChars;
  }

  push(item: KeptEvent): void {
    const capacity = this.#items.length;
    if (this.#size === capacity) this.#dropOldest();
    this.#items[this.#next] = item;
    this.#next = (this.#next + 1) % capacity;
    this.#size++;
    this.#chars += item.chars;
    // The newest is kept whatever its size; older ones make room for it.
    while (this.#chars > this.#maxChars && this.#size > 1) this.#dropOldest();
  }

  /** The number of the oldest event kept; undefined when none is. */
  oldestSeq(): number | undefined {
    return this.#size === 0 ? undefined : this.#items[this.#oldestIndex()]!.seq;
  }

  forEach(visit: (item: KeptEvent) => void): void {
    const start = this.#oldestIndex();
    for (let k = 0; k < this.#size; k++) visit(this.#items[(start + k) % this.#items.length]!);
  }

  #oldestIndex(): number {
    return (this.#next - this.#size + this.#items.length) % this.#items.length;
  }

  #dropOldest(): void {
    const index = this.#oldestIndex();
    this.#chars -= this.#items[index]!.chars;
    this.#items[index] = undefined;
    this.#size--;
  }
}
