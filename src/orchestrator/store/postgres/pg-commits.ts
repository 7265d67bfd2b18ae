import type { Logger } from 'pino';
import pg, { type Pool, type PoolClient } from 'pg';
import type { Clock } from '../../../protocol/clock.js';
import type { Commits } from '../contract/commits.js';
import type { Fence } from '../contract/mesh-lease.js';
import { Backoff } from '../../../net/backoff.js';

/** One statement, as sent. */
export interface Statement {
  text: string;
  values: unknown[];
  /** Made for one transaction (a coalesced INSERT): not worth preparing. */
  oneOff?: boolean;
  /**
   * A row of a statement that several of its kind share (`key`): consecutive ones are sent as one, `sql` given the
   * rows as `(…), (…)` with the parameters cast to `types` (an UPDATE … FROM (VALUES …)). Alone, `text` is sent.
   */
  rows?: { key: string; types: readonly string[]; sql(tuples: string): string };
}

/** The SQLSTATE gpumesh_hold_lease raises when the lease moved on (migrations.ts, migration 2). */
const FENCED = 'GM001';

/** The lease moved to another orchestrator: this one's writes are refused by the database. */
export class FencedError extends Error {
  constructor(fence: Fence) {
    super(`the mesh lease is no longer held by ${fence.holder} at epoch ${fence.epoch}: another orchestrator took it over`);
  }
}

export interface PgCommitsDeps {
  /** The pool (a transaction made again write by write takes a connection of it). */
  pool: Pool;
  /** How to open the connection writes go on (the pool's settings). */
  connection: pg.ClientConfig;
  log: Logger;
  /** The waits between tries of a transaction the database could not take. */
  clock: Clock;
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
 * (setImmediate) the turn's writes go to the database as one transaction — or, while one is out, they wait and go
 * with every later turn's as one transaction when it is back — so a
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
  #client: pg.Client | null = null;

  constructor(deps: PgCommitsDeps) {
    this.#deps = deps;
  }

  /** Queue a statement in the write under way (a store's write methods call this; only inside `write`). */
  statement(text: string, values: unknown[], rows?: Statement['rows']): void {
    // Every store write runs inside commits.write; one outside would never be committed.
    if (!this.#current) throw new Error(`a write outside commits.write: ${text.slice(0, 60)}`);
    this.#current.push(rows ? { text, values, rows } : { text, values });
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
    const committed = this.#last.catch(() => {}).then(() => this.#commit(batch)).finally(() => {
      this.#inFlight--;
      // What was written while this transaction was out goes next, all of it in one.
      if (this.#inFlight === 0 && this.#batch) void this.flush().catch(() => {});
    });
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
      // At the end of the turn — unless a transaction is out: then the writes of every turn until it is back go
      // together in the next (group commit proper: the busier the mesh, the larger and fewer the transactions).
      setImmediate(() => {
        if (this.#inFlight === 0) void this.flush().catch(() => {});
      });
    }
    return this.#batch;
  }

  async #commit(batch: Batch): Promise<void> {
    const backoff = new Backoff(this.#deps.retry ?? { initialMs: 50, maxMs: 2000 });
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
        const waitMs = backoff.next();
        await new Promise<void>((resolve) => this.#deps.clock.setTimer(waitMs, resolve));
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
    if (savepoints) return this.#savepointed(units);
    // The check, the writes and the COMMIT leave together on the writing connection (pipeline mode): one round trip.
    // A statement that fails aborts the transaction, and the server answers the COMMIT with a ROLLBACK.
    const fence = this.#deps.fence();
    const writer = await this.#writer();
    const statements: Statement[] = [
      { text: 'BEGIN', values: [] },
      ...(fence ? [{ text: 'SELECT gpumesh_hold_lease($1, $2)', values: [fence.holder, fence.epoch] }] : []),
      ...coalesced(units.flat()),
      { text: 'COMMIT', values: [] },
    ];
    const results = await Promise.allSettled(statements.map((statement) => writer.query(prepared(statement))));
    const failed = results.find((result): result is PromiseRejectedResult => result.status === 'rejected');
    if (!failed) return;
    const error = failed.reason as Error & { code?: string };
    if (fence && error.code === FENCED) throw new FencedError(fence);
    if (!isRefusal(error)) this.#dropWriter();
    throw error;
  }

  /** The connection writes go on: its own, pipelined (the pool's serve reads); made again after it broke. */
  async #writer(): Promise<pg.Client> {
    if (this.#client) return this.#client;
    const client = new pg.Client({ ...this.#deps.connection, pipeline: true } as pg.ClientConfig);
    client.on('error', (error) => {
      this.#deps.log.warn({ err: error }, 'the writing connection to PostgreSQL broke');
      if (this.#client === client) this.#client = null;
    });
    await client.connect();
    this.#client = client;
    return client;
  }

  #dropWriter(): void {
    const client = this.#client;
    this.#client = null;
    void client?.end().catch(() => {});
  }

  /** End the writing connection (the store closes). */
  async end(): Promise<void> {
    const client = this.#client;
    this.#client = null;
    await client?.end().catch(() => {});
  }

  /** The transaction made again with a savepoint per write, on a connection of the pool: one the database refuses is dropped alone. */
  async #savepointed(units: readonly Unit[]): Promise<void> {
    const client = await this.#deps.pool.connect();
    let broken = false;
    try {
      await client.query('BEGIN');
      const fence = this.#deps.fence();
      if (fence) {
        try {
          await client.query('SELECT gpumesh_hold_lease($1, $2)', [fence.holder, fence.epoch]);
        } catch (error) {
          if ((error as { code?: string }).code === FENCED) throw new FencedError(fence);
          throw error;
        }
      }
      await this.#oneByOne(client, units);
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

/** Most rows one coalesced INSERT carries (PostgreSQL takes at most 65,535 parameters a statement). */
const MAX_ROWS = 1000;
// An INSERT of one row of parameters, nothing or ON CONFLICT DO NOTHING after (DO UPDATE may not meet a row twice).
const INSERT = /^(INSERT INTO [^(]+\([^)]*\) VALUES )\((\$\d+(?:, \$\d+)*)\)((?: ON CONFLICT DO NOTHING)?)$/s;

/**
 * Consecutive INSERTs of the same text, each of one row of parameters `$1…$n` in order, as one INSERT of many rows
 * (`VALUES (…), (…)`): a turn's jobs, artifacts or audit entries cost the server one statement instead of one each,
 * in the same order. Anything else is left as it is.
 */
export function coalesced(statements: readonly Statement[]): Statement[] {
  const out: Statement[] = [];
  for (let i = 0; i < statements.length;) {
    const first = statements[i]!;
    if (first.rows) {
      let end = i + 1;
      while (end < statements.length && end - i < MAX_ROWS && statements[end]!.rows?.key === first.rows.key) end++;
      if (end - i > 1) {
        const rows = statements.slice(i, end);
        const { types } = first.rows;
        const tuples = rows.map((_, row) => `(${types.map((type, k) => `$${row * types.length + k + 1}::${type}`).join(', ')})`);
        out.push({ text: first.rows.sql(tuples.join(', ')), values: rows.flatMap((row) => row.values), oneOff: true });
        i = end;
        continue;
      }
    }
    const match = INSERT.exec(first.text);
    const width = match ? match[2]!.split(', ').length : 0;
    if (!match || !match[2]!.split(', ').every((mark, k) => mark === `$${k + 1}`)) {
      out.push(first);
      i++;
      continue;
    }
    let end = i + 1;
    while (end < statements.length && end - i < MAX_ROWS && statements[end]!.text === first.text) end++;
    if (end - i === 1) {
      out.push(first);
      i++;
      continue;
    }
    const rows = statements.slice(i, end);
    const tuples = rows.map((_, row) => `(${Array.from({ length: width }, (_, k) => `$${row * width + k + 1}`).join(', ')})`);
    out.push({ text: `${match[1]}${tuples.join(', ')}${match[3]}`, values: rows.flatMap((row) => row.values), oneOff: true });
    i = end;
  }
  return out;
}

/** Statement names by text: a write of a text seen before is executed without being parsed again. */
const names = new Map<string, string>();

/** A write as pg's query config: named (prepared once per connection) unless its text is one of a kind (a coalesced INSERT). */
function prepared(statement: Statement): pg.QueryConfig {
  if (statement.values.length === 0 || statement.oneOff) return { text: statement.text, values: statement.values };
  let name = names.get(statement.text);
  if (!name && names.size < 500) names.set(statement.text, (name = `gpumesh_write_${names.size + 1}`));
  return name ? { name, text: statement.text, values: statement.values } : { text: statement.text, values: statement.values };
}

/**
 * A statement the database refused for what it says — a constraint, a value, anything but the connection — as opposed
 * to a database that could not be reached, went away mid-way or asked to be tried again, which is worth trying again
 * as it was. SQLSTATE classes 08 (connection), 40 (rolled back: a deadlock, a serialization failure), 53 (out of
 * resources) and 57 (an operator: a shutdown, a restart) are tried again; an error without a SQLSTATE is the socket's.
 */
function isRefusal(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && !/^(08|40|53|57)/.test(code);
}
