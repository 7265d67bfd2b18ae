import Database from 'better-sqlite3';
import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { MeshError } from '../../../protocol/index.js';
import { systemClock, type Clock } from '../../../protocol/clock.js';
import type { Migration } from '../contract/migration.js';
import { MIGRATIONS } from './migrations.js';

export type Db = Database.Database;

/**
 * Open the store: WAL so readers never block the writer, and synchronous=NORMAL,
 * which survives a killed process (the WAL is in the OS page cache) and loses
 * at most the last transactions on power loss — the trade every job queue on SQLite makes.
 */
export function openDb(path: string, clock: Clock = systemClock): Db {
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
  migrate(db, MIGRATIONS, clock);
  return db;
}

/**
 * Apply the migrations not yet applied, in order, each in its own transaction, recorded with the time `clock` says.
 * Returns the versions applied now.
 */
export function migrate(db: Db, migrations: readonly Migration[] = MIGRATIONS, clock: Clock = systemClock): number[] {
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
        migration.version, migration.name, clock.now(),
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
