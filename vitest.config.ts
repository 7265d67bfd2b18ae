import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defineConfig } from 'vitest/config';

/**
 * Test files that get a fresh module graph each (vitest's isolation): those that start meshes and browsers, whose
 * modules keep state for the life of a mesh, and the one that measures its own process's memory. Every other file
 * shares its worker's modules with the files run before it there: each file importing the modules again cost about
 * half a second, a minute of the suite on two cores. Such a file must leave no state behind (environment variables,
 * timers, LIMITS) — as each already does.
 */
const OWN_MODULES = ['test/integration/**/*.test.ts', 'test/browser/**/*.test.ts', 'test/agent/governance/process-memory.test.ts'];

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 90_000,
    // Integration tests start real processes; two cores cannot run many at once.
    maxWorkers: 2,
    fileParallelism: true,
    // A gpumesh command a test starts without --data or GPUMESH_HOME keeps its data in the platform's folder
    // ($XDG_DATA_HOME/gpumesh here): one of this run's own, never the machine's.
    env: { XDG_DATA_HOME: mkdtempSync(join(tmpdir(), 'gpumesh-test-xdg-')) },
    projects: [
      { extends: true, test: { name: 'shared-modules', include: ['test/**/*.test.ts'], exclude: OWN_MODULES, isolate: false } },
      { extends: true, test: { name: 'own-modules', include: OWN_MODULES } },
    ],
  },
});
