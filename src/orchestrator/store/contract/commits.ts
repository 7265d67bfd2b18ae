/**
 * Group commit: every write made in one turn of the event loop joins one transaction, committed once. `write` runs a
 * function of writes inside it (a throw undoes only that function's writes); `durable` resolves once everything
 * written so far is committed — a 202 waits for it; `afterCommit` runs a function then (acknowledgements to agents).
 */
export interface Commits {
  write<T>(fn: () => T): T;
  /** `write` for a function of exactly one statement (a store may skip the savepoint). */
  writeOne<T>(fn: () => T): T;
  durable(): Promise<void>;
  afterCommit(fn: () => void): void;
  /** Commit what is pending now: at shutdown, and where the turn's last writes were just made (jobs/unwritten.ts). */
  flush(): void | Promise<void>;
}
