import type { HostSession } from './host.js';

/**
 * The hosts whose agents are connected now, by id. The agent hub adds and
 * removes them; the router and the status views read them; whoever must act
 * when the set changes (the dispatcher: a new host may take queued work)
 * subscribes.
 */
export class HostRegistry {
  readonly #hosts = new Map<string, HostSession>();
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
    this.changed();
  }

  /** Remove a session if it is still the current one for its host; returns whether it was. */
  delete(session: HostSession): boolean {
    if (this.#hosts.get(session.id) !== session) return false;
    this.#hosts.delete(session.id);
    this.changed();
    return true;
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
