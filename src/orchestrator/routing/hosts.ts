import type { HostInfo, HostSession } from './host.js';
import { IndexedSet } from './indexed-set.js';
import { keepNewest } from '../../protocol/bounded.js';

type Entry = [Map<string, IndexedSet<HostSession>>, string];

/** What a host was last indexed under: its state then, and the entries that state put it in. */
interface Indexed {
  free: boolean;
  resident: string[];
  replicas: string[];
  always: Entry[];
  whenFree: Entry[];
}

/** A host that was connected and is not now: remembered so routing decisions can say it is disconnected. */
export interface DepartedHost {
  info: HostInfo;
  lostAt: number;
  lastSeenAt: number;
  /** It drained and closed its link on purpose (host:left), rather than being lost. */
  left: boolean;
  /** It said it went to sleep before it left (its sleep policy): a Wake-on-LAN packet may bring it back. */
  asleep: boolean;
}

/** Departed hosts remembered at most (the oldest is forgotten first). */
const DEPARTED_LIMIT = 256;

const EMPTY = new IndexedSet<HostSession>();

const sameMembers = (a: readonly string[], b: readonly string[]): boolean => a.length === b.length && a.every((item) => b.includes(item));

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
  /** Hosts holding a replica of a model, by `class\nmodel`; and those of them with a free slot. */
  readonly #replicas = new Map<string, IndexedSet<HostSession>>();
  readonly #freeReplicas = new Map<string, IndexedSet<HostSession>>();
  /** What each host was last indexed under, to take it out of exactly those entries. */
  readonly #indexed = new Map<HostSession, Indexed>();
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

  /** Connected hosts of `klass` holding a replica of `model` (resident, being loaded, or running it; not being unloaded). */
  replicasIn(klass: string, model: string): IndexedSet<HostSession> {
    return this.#replicas.get(`${klass}\n${model}`) ?? EMPTY;
  }

  /** Those of replicasIn with a free slot. */
  freeReplicasIn(klass: string, model: string): IndexedSet<HostSession> {
    return this.#freeReplicas.get(`${klass}\n${model}`) ?? EMPTY;
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
    this.#reindex(session);
    session.watch((host) => this.#reindex(host));
    this.changed();
  }

  /** Remove a session if it is still the current one for its host (`left`: it drained and left); returns whether it was. */
  delete(session: HostSession, now = session.lastSeenAt, left = false): boolean {
    if (this.#hosts.get(session.id) !== session) return false;
    this.#hosts.delete(session.id);
    this.#unindex(session);
    // Whatever way it went, a host that said it goes to sleep sleeps.
    this.#departed.set(session.id, { info: session.info, lostAt: now, lastSeenAt: session.lastSeenAt, left, asleep: session.away?.state === 'asleep' });
    keepNewest(this.#departed, DEPARTED_LIMIT);
    this.changed();
    return true;
  }

  /** What a host, connected or departed, said of itself in its hello; undefined for one never seen (or forgotten). */
  info(id: string): HostInfo | undefined {
    return this.#hosts.get(id)?.info ?? this.#departed.get(id)?.info;
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
    this.#unindexState(session);
    for (const klass of session.info.classes) this.#byClass.get(klass)?.delete(session);
    const key = session.info.classes.join('\n');
    const list = this.#classLists.get(key)!;
    if (--list.count === 0) this.#classLists.delete(key);
  }

  /**
   * Put `host` under what it is now: its resident models, whether a slot is free, its replicas by class. Only the
   * entries that changed are touched — as a batch comes and goes, mostly just the free ones — since taking a host out
   * of an index and putting it back costs V8 a fresh hash table for every map it leaves empty, and a table of a
   * long-lived map is allocated in the old generation: garbage that only a full collection clears.
   */
  #reindex(host: HostSession): void {
    const previous = this.#indexed.get(host);
    const free = host.freeSlots > 0;
    const resident = host.resident.map((entry) => entry.model);
    const replicas = [...host.replicaModels()];
    if (previous && sameMembers(previous.resident, resident) && sameMembers(previous.replicas, replicas)) {
      if (free === previous.free) return;
      for (const [index, key] of previous.whenFree) {
        if (free) this.#indexIn(index, key, host);
        else index.get(key)?.delete(host);
      }
      previous.free = free;
      return;
    }
    const next = this.#entriesOf(host, resident, replicas, free);
    const before = previous ? this.#membership(previous) : [];
    const after = this.#membership(next);
    const has = (entries: Entry[], [index, key]: Entry): boolean => entries.some(([other, otherKey]) => other === index && otherKey === key);
    for (const entry of before) if (!has(after, entry)) entry[0].get(entry[1])?.delete(host);
    for (const entry of after) if (!has(before, entry)) this.#indexIn(entry[0], entry[1], host);
    this.#indexed.set(host, next);
  }

  #unindexState(host: HostSession): void {
    const state = this.#indexed.get(host);
    if (!state) return;
    this.#indexed.delete(host);
    for (const [index, key] of this.#membership(state)) index.get(key)?.delete(host);
  }

  /** The index entries a host belongs under whatever its slots, and those it belongs under while a slot is free. */
  #entriesOf(host: HostSession, resident: string[], replicas: string[], free: boolean): Indexed {
    const always: Entry[] = resident.map((model) => [this.#byResident, model]);
    const whenFree: Entry[] = [];
    for (const klass of host.info.classes) {
      whenFree.push([this.#freeByClass, klass]);
      for (const model of replicas) {
        always.push([this.#replicas, `${klass}\n${model}`]);
        whenFree.push([this.#freeReplicas, `${klass}\n${model}`]);
      }
    }
    return { free, resident, replicas, always, whenFree };
  }

  #membership(state: Indexed): Entry[] {
    return state.free ? [...state.always, ...state.whenFree] : state.always;
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
