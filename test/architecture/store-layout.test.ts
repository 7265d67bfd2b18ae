import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, posix } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/mesh.js';

/**
 * The store's rooms (docs/architecture.md, "The store: one interface, SQLite or PostgreSQL"): `contract/` says what any
 * store answers, `sqlite/` and `postgres/` each write it once for their database, and neither borrows from the other —
 * what both use lives in the contract. Each database's driver is imported in its room alone, so a mesh on SQLite never
 * loads `pg`; the rest of the orchestrator reaches the store by its public entries only.
 */
const STORE = 'src/orchestrator/store/';
/** Every module a file names: imports, re-exports, `import()`, `require` and `require.resolve`. */
const SPECIFIER = /(?:import|export)\s[^'";]*?from\s+['"]([^'"]+)['"]|import\s+['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)|(?:require|\.resolve)\(\s*['"]([^'"]+)['"]\s*\)/g;

interface Edge {
  file: string;
  /** The module as written. */
  specifier: string;
  /** For a relative one, the file it names (repository-relative, `.ts`); null for a package. */
  target: string | null;
}

function edges(): Edge[] {
  const files = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', 'src'], { cwd: ROOT, encoding: 'utf8' })
    .split('\n').filter((file) => file.endsWith('.ts'));
  return files.flatMap((file) => [...readFileSync(join(ROOT, file), 'utf8').matchAll(SPECIFIER)].map((match) => {
    const specifier = (match[1] ?? match[2] ?? match[3] ?? match[4])!;
    const target = specifier.startsWith('.') ? posix.join(dirname(file), specifier).replace(/\.js$/, '.ts') : null;
    return { file, specifier, target };
  }));
}

/** The package a bare specifier names (`pg/lib/x` → `pg`). */
const packageOf = (specifier: string): string => specifier.split('/')[0]!;
const show = (edge: Edge): string => `${edge.file} imports ${edge.specifier}`;

describe("the store's layout", () => {
  const all = edges();

  it.each([
    ['pg', `${STORE}postgres/`],
    ['better-sqlite3', `${STORE}sqlite/`],
  ])('%s is imported only under %s', (driver, room) => {
    const outside = all.filter((edge) => edge.target === null && packageOf(edge.specifier) === driver && !edge.file.startsWith(room));
    expect(outside.map(show)).toEqual([]);
  });

  it('contract/ imports neither store, and sqlite/ and postgres/ never borrow from each other: each stands on the contract, protocol/ and net/ (the one backoff)', () => {
    const rooms: Record<string, string[]> = {
      [`${STORE}contract/`]: [`${STORE}contract/`, 'src/protocol/'],
      [`${STORE}sqlite/`]: [`${STORE}sqlite/`, `${STORE}contract/`, 'src/protocol/', 'src/net/'],
      [`${STORE}postgres/`]: [`${STORE}postgres/`, `${STORE}contract/`, 'src/protocol/', 'src/net/'],
    };
    const strays = all.filter((edge) => {
      const allowed = Object.entries(rooms).find(([room]) => edge.file.startsWith(room))?.[1];
      return allowed && edge.target !== null && !allowed.some((folder) => edge.target!.startsWith(folder));
    });
    expect(strays.map(show)).toEqual([]);
  });

  it('the rest of src/ reaches the store by its public entries: store/index.ts and ids.ts, and postgres/index.ts from standby/ alone', () => {
    const entries = [`${STORE}index.ts`, `${STORE}ids.ts`];
    const strays = all.filter((edge) => {
      if (edge.file.startsWith(STORE) || !edge.target?.startsWith(STORE)) return false;
      if (entries.includes(edge.target)) return false;
      return !(edge.target === `${STORE}postgres/index.ts` && edge.file.startsWith('src/orchestrator/standby/'));
    });
    expect(strays.map(show)).toEqual([]);
  });

  it('reads the imports it judges (a pattern that matched nothing would pass every rule)', () => {
    expect(all.some((edge) => edge.file === `${STORE}postgres/pg-commits.ts` && edge.specifier === 'pg')).toBe(true);
    expect(all.some((edge) => edge.file === `${STORE}sqlite/checkpointer.ts` && edge.specifier === 'better-sqlite3')).toBe(true);
    expect(all.some((edge) => edge.file === 'src/orchestrator/index.ts' && edge.target === 'src/orchestrator/standby/shared-orchestrator.ts')).toBe(true);
  });
});
