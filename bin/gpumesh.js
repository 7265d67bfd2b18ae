#!/usr/bin/env -S node --max-semi-space-size=4
// The gpumesh command. The TypeScript sources are compiled to dist/ by `npm install` (the prepare script).
//
// --max-semi-space-size=4: V8's young generation capped at 4 MB (two semi-spaces) instead of growing to 16. A server
// process's garbage is collected in shorter, more frequent pauses: one-at-a-time tiny jobs through `gpumesh up`
// went from 2.1-3.7 ms to 1.5-2.1 ms at p99, at the same throughput (bench/RESULTS.md, "The young generation").
// Node reads it only on its command line (or NODE_OPTIONS): `npm start` and the systemd units in docs/operations.md
// pass it too; a process started as `node bin/gpumesh.js` runs with V8's default.
import { existsSync } from 'node:fs';

const entry = new URL('../dist/cli/main.js', import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write('gpumesh: not built yet; run `npm run build` in the gpumesh folder\n');
  process.exit(1);
}
await import(entry.href);
