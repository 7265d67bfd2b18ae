#!/bin/sh
// 2>/dev/null; exec node --max-semi-space-size=4 "$0" "$@"
// The gpumesh command. The TypeScript sources are compiled to dist/ by `npm install` (the prepare script).
//
// Run as a command, the file is a shell script for its first two lines (to sh, `//` is a directory it cannot run,
// silenced, and the rest of the line starts Node on this file; to Node both lines are comments): a portable way to
// give Node an option, where `#!/usr/bin/env -S node …` needs an env that knows -S (BusyBox's does not).
//
// --max-semi-space-size=4: V8's young generation capped at 4 MB (two semi-spaces) instead of growing to 16. A server
// process's garbage is collected in shorter, more frequent pauses: one-at-a-time tiny jobs through `gpumesh up`
// went from 2.1-4.1 ms to 1.5-2.7 ms at p99, for at most a few per cent of throughput under load (bench/RESULTS.md,
// "The young generation"). `npm start` and the systemd units in docs/operations.md pass it too, and a gpumesh process
// that starts another (the agent of `up --agent-process`) reads it from this line (src/cli/common/launch.ts); a process
// started as `node bin/gpumesh.js` runs with V8's default.
import { existsSync } from 'node:fs';

const entry = new URL('../dist/cli/main.js', import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write('gpumesh: not built yet; run `npm run build` in the gpumesh folder\n');
  process.exit(1);
}
await import(entry.href);
