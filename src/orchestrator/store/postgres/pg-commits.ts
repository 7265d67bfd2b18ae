import type { Logger } from 'pino';
import type { Pool, PoolClient } from 'pg';
import type { Commits } from '../mesh-store.js';

/** One statement, as sent. */
export interface Statement {
  text: string;
  values: unknown[];
}

/** The epoch this orchestrator holds the mesh's lease with: every transaction checks it first. */
export interface Fence {
  holder: string;
  epoch: number;
}

/** The lease moved to another orchestrator: this one's writes are refused by the database. */
export class FencedError extends Error {
  constructor(fence: Fence) {
    super(`the mesh lease is no longer held by ${fence.holder} at epoch ${fence.epoch}: another orchestrator took it over`);
  }
}

export interface PgCommitsDeps {
  pool: Pool;
  log: Logger;
  /** The lease's fence, checked by every transaction; null: none (a store used alone, as the conformance suite does). */
  fence(): Fence | null;
  /** The lease was lost: the waiting writes are dropped, and this orchestrator must stop writing (it exits). */
  onFenced(error: FencedError): void;
  /** The database went away (true) or came back (false): admission answers STORE_UNAVAILABLE meanwhile. */
  onAvailability(down: boolean, detail: string): void;
  /** Waits between tries of a transaction the database could not take (ms): the first, and the most. */
  retry?: { initialMs: number; maxMs: number };
}

/** The writes of one `write` call: committed together or, when one is refused, not at all. */
type Unit = Statement[];

interface Batch {
  units: Unit[];
  waiters: { resolve(): void; reject(error: Error): void }[];
  after: (() => void)[];
}

/**
 * Group commit on PostgreSQL, writing behind. A write queues its statements; when the turn of the event loop ends
 * (setImmediate) the turn's writes go to the database as one transaction, after the one before has committed — so a
 * write's effect is in memory at once (the job roles keep what they need) and durable a round trip later, which is
 * what `durable` (a 202) and `afterCommit` (an agent's acknowledgement) wait for.
 *
 * Every transaction first checks the fence: the mesh lease still held at this orchestrator's epoch, read FOR SHARE so
 * no other orchestrator can take the lease over until the transaction ends. A stale orchestrator's late writes are
 * refused by the database, not by luck (Temporal's RangeID; Kleppmann's fencing tokens).
 *
 * A database that does not answer (restarting, the network) is tried again, backing off, for as long as it takes —
 * the writes stay queued, in order, and nothing that was promised is lost. A statement the database refuses (a
 * constraint) costs only its own write: the transaction is made again with a savepoint per write, and the refused
 * write is logged and dropped, as SQLite's savepoints do.
 */
export class PgCommits implements Commits {
  readonly #deps: PgCommitsDeps;
  #batch: Batch | null = null;
  #current: Unit | null = null;
  /** The last batch handed to the database: resolves once it is committed. */
  #last: Promise<void> = Promise.resolve();
  #inFlight = 0;
  #down = false;

  constructor(deps: PgCommitsDeps) {
    this.#deps = deps;
  }

  /** Queue a statement in the write under way (a store's write methods call this; only inside `write`). */
  statement(text: string, values: unknown[]): void {
    // Every store write runs inside commits.write; one outside would never be committed.
    if (!this.#current) throw new Error(`a write outside commits.write: ${text.slice(0, 60)}`);
    this.#current.push({ text, values });
  }

  write<T>(fn: () => T): T {
    if (this.#current) return fn(); // a write within a write joins it
    const unit: Unit = [];
    this.#current = unit;
    try {
      const result = fn();
      if (unit.length > 0) this.#open().units.push(unit);
      return result;
    } finally {
      this.#current = null;
    }
  }

  writeOne<T>(fn: () => T): T {
    return this.write(fn);
  }

  durable(): Promise<void> {
    if (this.#batch) return new Promise((resolve, reject) => this.#batch!.waiters.push({ resolve, reject }));
    return this.#last;
  }

  afterCommit(fn: () => void): void {
    if (this.#batch) this.#batch.after.push(fn);
    else if (this.#inFlight > 0) void this.#last.then(fn, () => {});
    else fn();
  }

  /** Hand what is pending to the database now; resolves when everything written so far is committed. */
  flush(): Promise<void> {
    const batch = this.#batch;
    if (!batch) return this.#last;
    this.#batch = null;
    this.#inFlight++;
    const committed = this.#last.catch(() => {}).then(() => this.#commit(batch)).finally(() => this.#inFlight--);
    this.#last = committed;
    return committed;
  }

  /** Whether writes are waiting for a database that does not answer. */
  get down(): boolean {
    return this.#down;
  }

  #open(): Batch {
    if (!this.#batch) {
      this.#batch = { units: [], waiters: [], after: [] };
      setImmediate(() => void this.flush().catch(() => {}));
    }
    return this.#batch;
  }

  async #commit(batch: Batch): Promise<void> {
    const { initialMs, maxMs } = this.#deps.retry ?? { initialMs: 50, maxMs: 2000 };
    let waitMs = initialMs;
    let savepoints = false;
    for (;;) {
      try {
        if (batch.units.length > 0) await this.#transaction(batch.units, savepoints);
        break;
      } catch (error) {
        if (error instanceof FencedError) {
          for (const waiter of batch.waiters) waiter.reject(error);
          this.#deps.onFenced(error);
          throw error;
        }
        if (isRefusal(error) && !savepoints) {
          savepoints = true;
          continue;
        }
        if (!this.#down) {
          this.#down = true;
          this.#deps.onAvailability(true, (error as Error).message);
        }
        await new Promise((resolve) => setTimeout(resolve, waitMs));
        waitMs = Math.min(maxMs, waitMs * 2);
      }
    }
    if (this.#down) {
      this.#down = false;
      this.#deps.onAvailability(false, 'the database answers again');
    }
    for (const fn of batch.after) fn();
    for (const waiter of batch.waiters) waiter.resolve();
  }

  async #transaction(units: readonly Unit[], savepoints: boolean): Promise<void> {
    const client = await this.#deps.pool.connect();
    let broken = false;
    try {
      await client.query('BEGIN');
      const fence = this.#deps.fence();
      if (fence) {
        const held = await client.query('SELECT 1 FROM mesh_lease WHERE name = $1 AND holder = $2 AND epoch = $3 FOR SHARE', ['mesh', fence.holder, fence.epoch]);
        if (held.rowCount !== 1) throw new FencedError(fence);
      }
      if (savepoints) await this.#oneByOne(client, units);
      else await pipelined(client, units.flat());
      await client.query('COMMIT');
    } catch (error) {
      broken = !isRefusal(error) && !(error instanceof FencedError);
      await client.query('ROLLBACK').catch(() => (broken = true));
      throw error;
    } finally {
      client.release(broken);
    }
  }

  /** Each write in its own savepoint: one the database refuses is undone alone, and said. */
  async #oneByOne(client: PoolClient, units: readonly Unit[]): Promise<void> {
    for (const unit of units) {
      await client.query('SAVEPOINT write');
      try {
        for (const statement of unit) await client.query(statement.text, statement.values);
        await client.query('RELEASE SAVEPOINT write');
      } catch (error) {
        if (!isRefusal(error)) throw error;
        await client.query('ROLLBACK TO SAVEPOINT write');
        this.#deps.log.error({ err: error, statement: unit[0]?.text.slice(0, 120) }, 'the database refused a write; it was dropped');
      }
    }
  }
}

/** Send every statement at once (the client queues them in order): one round trip's wait for the lot. */
async function pipelined(client: PoolClient, statements: readonly Statement[]): Promise<void> {
  const results = await Promise.allSettled(statements.map((statement) => client.query(statement.text, statement.values)));
  const failed = results.find((result): result is PromiseRejectedResult => result.status === 'rejected');
  if (failed) throw failed.reason;
}

/**
 * A statement the database refused for what it says (SQLSTATE class 22, data; 23, a constraint), as opposed to a
 * database that could not be reached or went away mid-way, which is worth trying again as it was.
 */
export function isRefusal(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' && /^(22|23)/.test(code);
}
