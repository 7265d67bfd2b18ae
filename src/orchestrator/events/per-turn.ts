/**
 * Requests made during one turn of the event loop, answered once after it
 * (setImmediate), for the keys named or for all. Every submit is a turn's I/O
 * callback of its own, so a microtask would answer each submit apart; after the
 * turn, one answer covers every submit and batch end that came in together.
 */
export class PerTurn {
  readonly #run: (keys: ReadonlySet<string> | 'all') => void;
  #pending: Set<string> | 'all' | null = null;
  #closed = false;

  constructor(run: (keys: ReadonlySet<string> | 'all') => void) {
    this.#run = run;
  }

  /** Ask for `key` (or, without one, for all) to be handled after this turn. */
  request(key?: string): void {
    const pending = this.#pending;
    if (this.#closed || pending === 'all') return;
    if (key === undefined) this.#pending = 'all';
    else if (pending) pending.add(key);
    else this.#pending = new Set([key]);
    if (pending !== null) return;
    setImmediate(() => {
      const pending = this.#pending;
      this.#pending = null;
      if (pending !== null && !this.#closed) this.#run(pending);
    });
  }

  close(): void {
    this.#closed = true;
  }
}
