import { stmt, type Db } from './db.js';
import type { Commits } from '../contract/commits.js';

/**
 * How long a transaction that nobody waits for stays open for more writes. Most writes are waited for — a submit's
 * 202, an upload's 201 — and commit at the end of their turn; the others (a dispatch, a job's end, an audit entry)
 * wait for the next write that is, or this long: a job answered on the request that waited for it (its row written
 * at its end) is then one commit among many instead of one commit each.
 */
export const UNWAITED_COMMIT_MS = 5;

/**
 * Group commit: every write made during one turn of the event loop joins one
 * transaction, committed once with setImmediate when something waits for it
 * (`durable`), else within UNWAITED_COMMIT_MS. On a busy mesh this turns
 * hundreds of commits a second (each a WAL write) into a few dozen.
 * `write` runs a function inside the open transaction (as a savepoint, so a
 * throw undoes only its own changes); `durable` resolves once everything
 * written so far is committed — the 202 to a submit waits for it.
 */
export class GroupCommit implements Commits {
  readonly #db: Db;
  readonly #unwaitedMs: number;
  #open = false;
  #waiters: { resolve(): void; reject(error: unknown): void }[] = [];
  #after: (() => void)[] = [];
  /** The commit at the end of this turn, asked for by a waiter; and the later one of a transaction nobody waits for. */
  #soon = false;
  #later: NodeJS.Timeout | null = null;

  /** `unwaitedMs`: how long writes nobody waits for may stay uncommitted (0: commit every turn). */
  constructor(db: Db, unwaitedMs = UNWAITED_COMMIT_MS) {
    this.#db = db;
    this.#unwaitedMs = unwaitedMs;
  }

  write<T>(fn: () => T): T {
    this.#begin();
    // A savepoint by hand: better-sqlite3's db.transaction() builds new wrapper functions on every call.
    stmt(this.#db, 'SAVEPOINT write').run();
    try {
      const result = fn();
      stmt(this.#db, 'RELEASE write').run();
      return result;
    } catch (error) {
      stmt(this.#db, 'ROLLBACK TO write').run();
      stmt(this.#db, 'RELEASE write').run();
      throw error;
    }
  }

  /**
   * `write` for a function that runs exactly one statement. SQLite undoes a failed statement by itself and leaves
   * the transaction open, so the savepoint `write` takes would only cost two more statements (a job's insert is the
   * busiest write there is).
   */
  writeOne<T>(fn: () => T): T {
    this.#begin();
    return fn();
  }

  /** Resolves when the writes made so far are committed; rejects with SQLite's error when their commit failed. */
  durable(): Promise<void> {
    if (!this.#open) return Promise.resolve();
    this.#commitSoon();
    return new Promise((resolve, reject) => this.#waiters.push({ resolve, reject }));
  }

  /** Run `fn` once the writes made so far are committed (at once if nothing is pending). */
  afterCommit(fn: () => void): void {
    if (this.#open) this.#after.push(fn);
    else fn();
  }

  /** Commit now (shutdown). */
  flush(): void {
    if (this.#later) clearTimeout(this.#later);
    this.#later = null;
    if (!this.#open) return;
    this.#open = false;
    const waiters = this.#waiters;
    const after = this.#after;
    this.#waiters = [];
    this.#after = [];
    try {
      if (this.#db.inTransaction) stmt(this.#db, 'COMMIT').run();
    } catch (error) {
      // The commit failed (a full disk: SQLITE_FULL; an I/O error) and SQLite rolled the turn's transaction back: none
      // of its writes is stored. What waited for them to be durable learns it (a submit answers 507 STORAGE_FULL and
      // takes its job back), and what was to follow their commit does not happen (an agent not acknowledged sends its
      // result again). The process goes on — thrown from here it would end it —, and the next turn may find room.
      try {
        if (this.#db.inTransaction) stmt(this.#db, 'ROLLBACK').run();
      } catch {
        // Nothing left to roll back.
      }
      for (const { reject } of waiters) reject(error);
      return;
    }
    for (const fn of after) fn();
    for (const { resolve } of waiters) resolve();
  }

  #begin(): void {
    if (this.#open) return;
    stmt(this.#db, 'BEGIN').run();
    this.#open = true;
    if (this.#unwaitedMs <= 0) this.#commitSoon();
    else this.#later = setTimeout(() => this.flush(), this.#unwaitedMs);
  }

  /** Commit at the end of this turn: something waits for it. */
  #commitSoon(): void {
    if (this.#soon) return;
    this.#soon = true;
    setImmediate(() => {
      this.#soon = false;
      this.flush();
    });
  }
}
