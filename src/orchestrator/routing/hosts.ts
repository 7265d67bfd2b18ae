import type { ResidentModel } from '../../protocol/index.js';
import type { HostInfo, HostSession } from './host.js';
import { IndexedSet } from './indexed-set.js';

/** A host that was connected and is not now: remembered so routing decisions can say it is disconnected. */
export interface DepartedHost {
  info: HostInfo;
  lostAt: number;
  lastSeenAt: number;
}

/** Departed hosts remembered at most (the oldest is forgotten first). */
const DEPARTED_LIMIT = 256;

const EMPTY = new IndexedSet<HostSession>();

/**
 * The hosts whose agents are connected now, by id, and indexed by class and
 * by resident model so that a routing decision looks only at the hosts that
 * could take the job (with a thousand hosts, a scan of all of them costs more
 * than the decision may). The agent hub adds and removes them; the router and
 * the status views read them; whoever must act when the set changes (the
 * dispatcher: a new host may take queued work) subscribes.
 */
export class HostRegistry {
  readonly #hosts = new Map<string, HostSession>();
  readonly #byClass = new Map<string, IndexedSet<HostSession>>();
  readonly #byResident = new Map<string, IndexedSet<HostSession>>();
  readonly #freeByClass = new Map<string, IndexedSet<HostSession>>();
  /** How many hosts have each distinct list of classes (a handful of lists, however many hosts). */
  readonly #classLists = new Map<string, { classes: readonly string[]; count: number }>();
  readonly #departed = new Map<string, DepartedHost>();
  readonly #listeners = new Set<() => void>();

  get size(): number {
    return this.#hosts.size;
  }

  get(id: string): HostSession | undefined {
    return this.#hosts.get(id);
  }

  [Symbol.iterator](): IterableIterator<HostSession> {
    return this.#hosts.values();
  }

  /** Connected hosts that serve `klass`. */
  inClass(klass: string): IndexedSet<HostSession> {
    return this.#byClass.get(klass) ?? EMPTY;
  }

  /** Connected hosts that serve `klass` and have a free slot now. */
  freeInClass(klass: string): IndexedSet<HostSession> {
    return this.#freeByClass.get(klass) ?? EMPTY;
  }

  /** Connected hosts where `model` is resident. */
  residentOn(model: string): IndexedSet<HostSession> {
    return this.#byResident.get(model) ?? EMPTY;
  }

  /** Connected hosts that serve at least one of `classes`. */
  countServing(classes: readonly string[]): number {
    if (classes.length === 1) return this.inClass(classes[0]!).size;
    let count = 0;
    for (const list of this.#classLists.values()) if (list.classes.some((name) => classes.includes(name))) count += list.count;
    return count;
  }

  /** Add a session; one with the same host id is replaced (the caller fails the old one over). */
  set(session: HostSession): void {
    const previous = this.#hosts.get(session.id);
    if (previous) this.#unindex(previous);
    this.#hosts.set(session.id, session);
    this.#departed.delete(session.id);
    for (const klass of session.info.classes) this.#indexIn(this.#byClass, klass, session);
    const key = session.info.classes.join('\n');
    const list = this.#classLists.get(key);
    if (list) list.count++;
    else this.#classLists.set(key, { classes: session.info.classes, count: 1 });
    for (const entry of session.resident) this.#indexIn(this.#byResident, entry.model, session);
    this.#reindexSlots(session);
    session.watch({ residency: (host, before) => this.#reindexResidency(host, before), slots: (host) => this.#reindexSlots(host) });
    this.changed();
  }

  /** Remove a session if it is still the current one for its host; returns whether it was. */
  delete(session: HostSession, now = session.lastSeenAt): boolean {
    if (this.#hosts.get(session.id) !== session) return false;
    this.#hosts.delete(session.id);
    this.#unindex(session);
    this.#departed.set(session.id, { info: session.info, lostAt: now, lastSeenAt: session.lastSeenAt });
    if (this.#departed.size > DEPARTED_LIMIT) this.#departed.delete(this.#departed.keys().next().value!);
    this.changed();
    return true;
  }

  /** Hosts that were connected and are not now, oldest departure first. */
  departed(): IterableIterator<DepartedHost> {
    return this.#departed.values();
  }

  /** Something about a host changed that may let it take work (joined, slot freed, model loaded). */
  changed(): void {
    for (const listener of this.#listeners) listener();
  }

  #unindex(session: HostSession): void {
    session.watch(null);
    for (const klass of session.info.classes) {
      this.#byClass.get(klass)?.delete(session);
      this.#freeByClass.get(klass)?.delete(session);
    }
    const key = session.info.classes.join('\n');
    const list = this.#classLists.get(key)!;
    if (--list.count === 0) this.#classLists.delete(key);
    for (const entry of session.resident) this.#byResident.get(entry.model)?.delete(session);
  }

  #reindexResidency(host: HostSession, before: readonly ResidentModel[]): void {
    for (const entry of before) if (!host.isResident(entry.model)) this.#byResident.get(entry.model)?.delete(host);
    for (const entry of host.resident) this.#indexIn(this.#byResident, entry.model, host);
  }

  #reindexSlots(host: HostSession): void {
    const free = host.freeSlots > 0;
    for (const klass of host.info.classes) {
      if (free) this.#indexIn(this.#freeByClass, klass, host);
      else this.#freeByClass.get(klass)?.delete(host);
    }
  }

  #indexIn(index: Map<string, IndexedSet<HostSession>>, key: string, host: HostSession): void {
    let members = index.get(key);
    if (!members) index.set(key, (members = new IndexedSet()));
    members.add(host);
  }

  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
}
