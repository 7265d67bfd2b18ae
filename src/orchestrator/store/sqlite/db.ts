import Database from 'better-sqlite3';
import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { MIGRATIONS, type Migration } from './migrations.js';
import { MeshError } from '../../protocol/index.js';

export type Db = Database.Database;

/**
 * Open the store: WAL so readers never block the writer, and synchronous=NORMAL,
 * which survives a killed process (the WAL is in the OS page cache) and loses
 * at most the last transactions on power loss — the trade every job queue on SQLite makes.
 */
export function openDb(path: string): Db {
  if (path !== ':memory:') {
    mkdirSync(dirname(path), { recursive: true });
    // The store holds grant records: only its owner may read it. SQLite gives its -wal and -shm files the database file's mode.
    if (!existsSync(path)) writeFileSync(path, '', { mode: 0o600 });
    chmodSync(path, 0o600);
  }
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
  // The group commit's savepoints keep the pages they change in a sub-journal, which SQLite spills to a temporary file
  // (created, written and unlinked: /var/tmp/etilqs_*) once it passes 64 KiB: about once per dispatched batch under
  // load. In memory it is a few pages of RAM for the length of one write.
  db.pragma('temp_store = MEMORY');
  migrate(db);
  return db;
}

/** Apply the migrations not yet applied, in order, each in its own transaction. Returns the versions applied now. */
export function migrate(db: Db, migrations: readonly Migration[] = MIGRATIONS): number[] {
  db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`);
  const applied = new Set(
    (db.prepare('SELECT version FROM schema_migrations').all() as { version: number }[]).map((row) => row.version),
  );
  const latest = Math.max(0, ...applied);
  const known = Math.max(0, ...migrations.map((m) => m.version));
  if (latest > known) {
    throw new MeshError('STORE_TOO_NEW', { found: latest, known });
  }
  const done: number[] = [];
  for (const migration of [...migrations].sort((a, b) => a.version - b.version)) {
    if (applied.has(migration.version)) continue;
    db.transaction(() => {
      db.exec(migration.sql);
      db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(
        migration.version, migration.name, Date.now(),
      );
    })();
    done.push(migration.version);
  }
  return done;
}

const cache = new WeakMap<Db, Map<string, Database.Statement>>();

/** A prepared statement, prepared once per database; query modules call this instead of `db.prepare`. */
export function stmt(db: Db, sql: string): Database.Statement {
  let statements = cache.get(db);
  if (!statements) cache.set(db, (statements = new Map()));
  let statement = statements.get(sql);
  if (!statement) statements.set(sql, (statement = db.prepare(sql)));
  return statement;
}

/**
 * Group commit: every write made during one turn of the event loop joins one
 * transaction, committed once with setImmediate. On a busy mesh this turns
 * hundreds of commits a second (each a WAL write) into a few dozen.
 * `write` runs a function inside the open transaction (as a savepoint, so a
 * throw undoes only its own changes); `durable` resolves once everything
 * written so far is committed — the 202 to a submit waits for it.
 */
export class GroupCommit {
  readonly #db: Db;
  #open = false;
  #waiters: { resolve(): void; reject(error: unknown): void }[] = [];
  #after: (() => void)[] = [];

  constructor(db: Db) {
    this.#db = db;
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
    return new Promise((resolve, reject) => this.#waiters.push({ resolve, reject }));
  }

  /** Run `fn` once the writes made so far are committed (at once if nothing is pending). */
  afterCommit(fn: () => void): void {
    if (this.#open) this.#after.push(fn);
    else fn();
  }

  /** Commit now (shutdown). */
  flush(): void {
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
    setImmediate(() => this.flush());
  }
}
