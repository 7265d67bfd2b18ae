import type { Statement } from './pg-commits.js';

/**
 * How the PostgreSQL store's table modules reach the database (PostgresStore gives them this): writes are queued in
 * the turn's transaction and sent behind (PgCommits), reads wait for the writes before them.
 */
export interface PgAccess {
  /** Queue a write in the write under way (only inside `commits.write`); `rows`: how consecutive ones of its kind are sent as one. */
  write(text: string, values: unknown[], rows?: Statement['rows']): void;
  /** A read, after the writes made before it are committed, so it sees them. */
  read<T>(text: string, values?: unknown[]): Promise<T[]>;
}

/** `$1, $2, …` from `start`. */
export const marks = (count: number, start = 1): string => Array.from({ length: count }, (_, i) => `$${start + i}`).join(', ');

/** A WHERE clause built of conditions written with `?`, numbered `$n` in order. */
export class Where {
  readonly values: unknown[] = [];
  readonly #conditions: string[] = [];

  add(condition: string, ...values: unknown[]): void {
    let text = condition;
    for (const value of values) {
      this.values.push(value);
      text = text.replace('?', `$${this.values.length}`);
    }
    this.#conditions.push(text);
  }

  /** A column limited to `values`; null: no limit; empty: nothing matches. */
  in(column: string, values: readonly unknown[] | null | undefined): void {
    if (!values) return;
    if (values.length === 0) this.#conditions.push('FALSE');
    else this.add(`${column} = ANY(?)`, [...values]);
  }

  /** A column of model names limited to `models` by name: every version of each too (`ocr` matches `ocr@2`; SQLite's is sqlite/model-filter.ts). */
  models(column: string, models: readonly string[]): void {
    if (models.length === 0) this.#conditions.push('FALSE');
    else this.add(`(${column} = ANY(?) OR split_part(${column}, '@', 1) = ANY(?))`, [...models], [...models]);
  }

  sql(): string {
    return this.#conditions.length > 0 ? `WHERE ${this.#conditions.join(' AND ')}` : '';
  }

  /** The placeholder of the next value (a LIMIT after the conditions). */
  next(): string {
    return `$${this.values.length + 1}`;
  }
}
