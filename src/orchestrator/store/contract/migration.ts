/**
 * One of a store's numbered migrations, which only go forward. Each runs once, inside a transaction, and is recorded
 * in `schema_migrations`; running them again is a no-op. Each store has its own list in its own SQL (sqlite/
 * migrations.ts, postgres/migrations.ts); test/architecture/schema-agreement.test.ts holds them to the same tables.
 */
export interface Migration {
  version: number;
  name: string;
  sql: string;
}
