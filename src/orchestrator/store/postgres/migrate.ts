import type pg from 'pg';
import { MeshError } from '../../../protocol/index.js';
import type { Clock } from '../../../protocol/clock.js';
import type { Migration } from '../contract/migration.js';
import { PG_MIGRATIONS } from './migrations.js';

/** The advisory lock migrations run under: any 64-bit number of our own ("gpumesh" in ASCII). */
const MIGRATION_LOCK = 0x6770756d657368;

/**
 * Apply the migrations not yet applied, in order, each in its own transaction, under a session advisory lock: two
 * orchestrators starting at once against a fresh database run each migration once (the second waits, then finds
 * them applied), each recorded with the time `clock` says. Returns the versions applied now. A database newer than
 * this gpumesh is STORE_TOO_NEW.
 */
export async function migratePostgres(pool: pg.Pool, clock: Clock, migrations: readonly Migration[] = PG_MIGRATIONS): Promise<number[]> {
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`);
    const applied = new Set((await client.query<{ version: number }>('SELECT version FROM schema_migrations')).rows.map((row) => row.version));
    const latest = Math.max(0, ...applied);
    const known = Math.max(0, ...migrations.map((migration) => migration.version));
    if (latest > known) throw new MeshError('STORE_TOO_NEW', { found: latest, known });
    const done: number[] = [];
    for (const migration of [...migrations].sort((a, b) => a.version - b.version)) {
      if (applied.has(migration.version)) continue;
      await client.query('BEGIN');
      try {
        await client.query(migration.sql);
        await client.query('INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)', [migration.version, migration.name, clock.now()]);
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK');
        throw error;
      }
      done.push(migration.version);
    }
    return done;
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => {});
    client.release();
  }
}
