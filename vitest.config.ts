import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 90_000,
    // Integration tests start real processes; two cores cannot run many at once.
    maxWorkers: 2,
    fileParallelism: true,
    // A gpumesh command a test starts without --data or GPUMESH_HOME keeps its data in the platform's folder
    // ($XDG_DATA_HOME/gpumesh here): one of this run's own, never the machine's.
    env: { XDG_DATA_HOME: mkdtempSync(join(tmpdir(), 'gpumesh-test-xdg-')) },
  },
});
