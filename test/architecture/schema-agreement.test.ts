import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { migrate, MIGRATIONS, openDb, SqliteStore, type Db } from '../../src/orchestrator/store/index.js';
import { PostgresStore } from '../../src/orchestrator/store/postgres/index.js';
import { postgresForFile } from '../helpers/postgres.js';

/**
 * SQLite's migrations and PostgreSQL's are written separately (store/sqlite/migrations.ts, store/postgres/
 * migrations.ts), in each database's own SQL, and read by the same row functions (store/contract/): the two schemas must
 * describe the same tables with the same columns, or one store would lose what the other keeps. Each is read from a
 * fresh database itself — SQLite's `sqlite_master` and `PRAGMA table_xinfo`, PostgreSQL's `information_schema` —
 * after every migration has run, and compared table by table: each column's name, its type, whether it may be NULL,
 * and whether it is part of the primary key.
 *
 * Types are compared in SQLite's words, PostgreSQL's mapped to them where they differ by design (below). Differences
 * kept on purpose:
 * - the tables only a store shared by several orchestrators needs (the mesh lease, the orchestrators seen, the secret
 *   grants are signed with: store/postgres/mesh-lease.ts) are PostgreSQL's alone — one SQLite file has one orchestrator;
 * - `job_seq_blocks`, the sequence PostgreSQL hands out blocks of job numbers from, is a sequence, not a table
 *   (SQLite numbers rows itself: `seq` is the rowid).
 */
const SHARED_STORE_ONLY = ['mesh_lease', 'orchestrators', 'mesh_secrets'];

/**
 * PostgreSQL's types in SQLite's words. BIGINT holds times in epoch ms and sizes, INTEGER small counts and dimensions:
 * both are SQLite's INTEGER (a 64-bit integer either way). DOUBLE PRECISION is REAL. TIMESTAMPTZ appears only in the
 * shared store's own tables, where the database's clock decides (the lease).
 */
const POSTGRES_TYPES: Record<string, string> = {
  bigint: 'INTEGER',
  integer: 'INTEGER',
  text: 'TEXT',
  'double precision': 'REAL',
  'timestamp with time zone': 'TIMESTAMPTZ',
};

interface Column {
  type: string;
  notNull: boolean;
  primaryKey: boolean;
}
/** Table → column → what it is. */
type Schema = Map<string, Map<string, Column>>;

function sqliteSchema(db: Db): Schema {
  const schema: Schema = new Map();
  const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").all() as { name: string }[];
  for (const { name } of tables) {
    // table_xinfo lists generated columns too (hidden 2 and 3), which table_info leaves out.
    const columns = db.prepare(`PRAGMA table_xinfo(${JSON.stringify(name)})`).all() as { name: string; type: string; notnull: number; pk: number; hidden: number }[];
    schema.set(name, new Map(columns.filter((column) => column.hidden !== 1).map((column) => [column.name, {
      type: column.type.toUpperCase(),
      // Every primary key here is NOT NULL in SQLite too: WITHOUT ROWID tables enforce it, and the rowid tables' keys
      // are INTEGER PRIMARY KEY, the rowid itself.
      notNull: column.notnull === 1 || column.pk > 0,
      primaryKey: column.pk > 0,
    }])));
  }
  return schema;
}

async function postgresSchema(store: PostgresStore): Promise<Schema> {
  const { rows: columns } = await store.pool.query<{ table_name: string; column_name: string; data_type: string; is_nullable: string }>(
    `SELECT c.table_name, c.column_name, c.data_type, c.is_nullable FROM information_schema.columns c
      JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
      WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE' ORDER BY c.table_name, c.ordinal_position`);
  const { rows: keys } = await store.pool.query<{ table_name: string; column_name: string }>(
    `SELECT k.table_name, k.column_name FROM information_schema.table_constraints c
      JOIN information_schema.key_column_usage k ON k.constraint_schema = c.constraint_schema AND k.constraint_name = c.constraint_name
      WHERE c.table_schema = 'public' AND c.constraint_type = 'PRIMARY KEY'`);
  const primary = new Set(keys.map((key) => `${key.table_name}.${key.column_name}`));
  const schema: Schema = new Map();
  for (const column of columns) {
    if (!schema.has(column.table_name)) schema.set(column.table_name, new Map());
    schema.get(column.table_name)!.set(column.column_name, {
      type: POSTGRES_TYPES[column.data_type] ?? `unmapped: ${column.data_type}`,
      notNull: column.is_nullable === 'NO',
      primaryKey: primary.has(`${column.table_name}.${column.column_name}`),
    });
  }
  return schema;
}

/** Every way the two schemas differ, one line each; empty when they agree. */
function differences(sqlite: Schema, postgres: Schema): string[] {
  const found: string[] = [];
  const spelled = (column: Column): string => `${column.type}${column.notNull ? ' NOT NULL' : ''}${column.primaryKey ? ' PRIMARY KEY' : ''}`;
  const tables = new Set([...sqlite.keys(), ...postgres.keys()].filter((table) => !SHARED_STORE_ONLY.includes(table)));
  for (const table of [...tables].sort()) {
    const ours = sqlite.get(table);
    const theirs = postgres.get(table);
    if (!ours || !theirs) {
      found.push(`${table}: a table in ${ours ? 'SQLite' : 'PostgreSQL'} only`);
      continue;
    }
    for (const column of [...new Set([...ours.keys(), ...theirs.keys()])].sort()) {
      const a = ours.get(column);
      const b = theirs.get(column);
      if (!a || !b) found.push(`${table}.${column}: a column in ${a ? 'SQLite' : 'PostgreSQL'} only`);
      else if (spelled(a) !== spelled(b)) found.push(`${table}.${column}: ${spelled(a)} in SQLite, ${spelled(b)} in PostgreSQL`);
    }
  }
  return found;
}

const log = pino({ level: 'silent' });
const cluster = postgresForFile();
const opened: { close(): unknown }[] = [];
afterAll(async () => {
  for (const store of opened) await store.close();
});

describe('the SQLite and PostgreSQL schemas', () => {
  it('describe the same tables, each with the same columns: type, NULL or not, primary key', async () => {
    const sqlite = new SqliteStore(':memory:');
    const postgres = await PostgresStore.open({ url: await cluster().createDatabase('agreement'), log });
    opened.push(sqlite, postgres);
    const ours = sqliteSchema(sqlite.db);
    const theirs = await postgresSchema(postgres);
    expect(differences(ours, theirs)).toEqual([]);
    // What the comparison stands on: the tables are read at all, the shared store's own are there, and they are all.
    expect([...ours.keys()]).toEqual(expect.arrayContaining(['jobs', 'attempts', 'artifacts', 'blobs', 'uploads', 'grants', 'audit', 'schema_migrations']));
    expect(ours.get('jobs')!.size).toBeGreaterThan(25);
    expect([...theirs.keys()].filter((table) => !ours.has(table)).sort()).toEqual([...SHARED_STORE_ONLY].sort());
    expect([...theirs.values()].flatMap((columns) => [...columns.values()]).filter((column) => column.type.startsWith('unmapped'))).toEqual([]);
  });

  it('a migration that adds a column on one side only is a difference', async () => {
    const db = openDb(':memory:');
    opened.push(db);
    migrate(db, [...MIGRATIONS, { version: 1000, name: 'a column PostgreSQL lacks', sql: 'ALTER TABLE jobs ADD COLUMN only_here TEXT' }]);
    const postgres = await PostgresStore.open({ url: await cluster().createDatabase('drift'), log });
    opened.push(postgres);
    await postgres.pool.query('ALTER TABLE grants ADD COLUMN only_there TEXT; ALTER TABLE blobs ALTER COLUMN media_type DROP NOT NULL');
    expect(differences(sqliteSchema(db), await postgresSchema(postgres))).toEqual([
      'blobs.media_type: TEXT NOT NULL in SQLite, TEXT in PostgreSQL',
      'grants.only_there: a column in PostgreSQL only',
      'jobs.only_here: a column in SQLite only',
    ]);
  });
});
