import type { HostInfo, HostSession } from './host.js';

/** A host that was connected and is not now: remembered so routing decisions can say it is disconnected. */
export interface DepartedHost {
  info: HostInfo;
  lostAt: number;
  lastSeenAt: number;
}

/** Departed hosts remembered at most (the oldest is forgotten first). */
const DEPARTED_LIMIT = 256;

/**
 * The hosts whose agents are connected now, by id. The agent hub adds and
 * removes them; the router and the status views read them; whoever must act
 * when the set changes (the dispatcher: a new host may take queued work)
 * subscribes.
 */
export class HostRegistry {
  readonly #hosts = new Map<string, HostSession>();
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

  /** Add a session; one with the same host id is replaced (the caller fails the old one over). */
  set(session: HostSession): void {
    this.#hosts.set(session.id, session);
    this.#departed.delete(session.id);
    this.changed();
  }

  /** Remove a session if it is still the current one for its host; returns whether it was. */
  delete(session: HostSession, now = session.lastSeenAt): boolean {
    if (this.#hosts.get(session.id) !== session) return false;
    this.#hosts.delete(session.id);
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

  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
}
