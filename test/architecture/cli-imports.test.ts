import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/mesh.js';

/**
 * What the CLI may import of `src/` (docs/architecture.md, "Module map"): the protocol (the API's answers, the wire,
 * the files both sides share), its own files (its HTTP client is cli/common/), and each side's public entry — the
 * orchestrator's and the agent's index.ts, which a command loads when it starts one — besides the leaves both sides
 * use as well: the client side of TLS (tls-client/index.ts: the pinning its HTTP client is built on), the one backoff
 * (net/backoff.ts: how its retries wait) and the package's version. Anything else is an internal of another part: a
 * test fails naming the file and its import.
 */
const SRC = join(ROOT, 'src');
const CLI = join(SRC, 'cli');
const SPECIFIER = /(?:import|export)\s[^'";]*?from\s+['"](\.{1,2}\/[^'"]+)['"]|import\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g;

const ALLOWED_FOLDERS = ['protocol/', 'cli/'];
const ALLOWED_FILES = new Set(['orchestrator/index.ts', 'agent/index.ts', 'tls-client/index.ts', 'net/backoff.ts', 'version.ts']);

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    return entry.isDirectory() ? sources(path) : entry.name.endsWith('.ts') ? [path] : [];
  });
}

/** `src/`-relative path of what a relative specifier names (`.js` read as the `.ts` it is built from). */
const target = (file: string, specifier: string): string => relative(SRC, resolve(dirname(file), specifier)).replace(/\.js$/, '.ts');

describe('the CLI imports only the protocol, its own files and each side\'s public entry', () => {
  it('has no import of another part\'s internals', () => {
    const files = sources(CLI);
    expect(files.length).toBeGreaterThan(10);
    const offending: string[] = [];
    for (const file of files) {
      for (const match of readFileSync(file, 'utf8').matchAll(SPECIFIER)) {
        const to = target(file, match[1] ?? match[2]!);
        if (ALLOWED_FOLDERS.some((folder) => to.startsWith(folder)) || ALLOWED_FILES.has(to)) continue;
        offending.push(`${relative(SRC, file)} imports ${to}`);
      }
    }
    expect(offending).toEqual([]);
  });

  it('reads a relative import as the file it names', () => {
    expect(target(join(CLI, 'commands/up.ts'), '../../orchestrator/index.js')).toBe('orchestrator/index.ts');
    expect(target(join(CLI, 'common/settings.ts'), '../../agent/governance/cgroups/cgroupfs.js')).toBe('agent/governance/cgroups/cgroupfs.ts');
  });
});
