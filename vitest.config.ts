import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 90_000,
    // Integration tests start real processes; two cores cannot run many at once.
    maxWorkers: 2,
    fileParallelism: true,
  },
});
