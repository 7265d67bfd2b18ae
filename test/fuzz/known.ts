/**
 * Ids the server has handed out during a fuzz run (jobs, batches, digests),
 * so generated inputs can name things that exist. Generators stay pure: they
 * write a marker such as `@@job:3`, and the runner swaps it for the fourth
 * (modulo) job id seen so far just before the input is sent.
 */
export type KnownKind = 'job' | 'batch' | 'digest';

const MARKER = /@@(job|batch|digest):(\d+)/g;

export const MARKERS: readonly string[] = (['job', 'batch', 'digest'] as const).flatMap((kind) => Array.from({ length: 6 }, (_, n) => `@@${kind}:${n}`));

export class KnownIds {
  readonly #pools: Record<KnownKind, string[]> = { job: [], batch: [], digest: [] };
  readonly #limit: number;

  constructor(limit = 200) {
    this.#limit = limit;
  }

  add(kind: KnownKind, id: unknown): void {
    if (typeof id !== 'string' || id.length === 0) return;
    const pool = this.#pools[kind];
    if (pool.includes(id)) return;
    pool.push(id);
    if (pool.length > this.#limit) pool.shift();
  }

  /** Replace markers in a string; a marker with no id of its kind yet becomes a plausible unknown one. */
  resolveText(text: string): string {
    return text.replace(MARKER, (_whole, kind: KnownKind, n: string) => {
      const pool = this.#pools[kind];
      return pool.length > 0 ? pool[Number(n) % pool.length]! : `${kind === 'digest' ? `sha256:${'0'.repeat(63)}` : `${kind[0]}_unknown`}${n}`;
    });
  }

  /** Replace markers in every string of a JSON value. */
  resolve(value: unknown): unknown {
    if (typeof value === 'string') return this.resolveText(value);
    if (Array.isArray(value)) return value.map((item) => this.resolve(item));
    if (value && typeof value === 'object') {
      const copy: Record<string, unknown> = {};
      for (const [key, item] of Object.entries(value)) {
        Object.defineProperty(copy, key, { value: this.resolve(item), enumerable: true, configurable: true, writable: true });
      }
      return copy;
    }
    return value;
  }
}
