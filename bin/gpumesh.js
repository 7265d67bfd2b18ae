#!/usr/bin/env node
// The gpumesh command. The TypeScript sources are compiled to dist/ by `npm install` (the prepare script).
//
// A plain Node script, so that npm's command shims run it everywhere — on Windows without a POSIX shell, where a
// `#!/bin/sh` bin needs one on PATH.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

// NODE_FLAGS, the one place they are written (src/cli/common/launch.ts reads the line as it stands):
// --max-semi-space-size=32: V8's young generation may grow to 32 MB (two semi-spaces) instead of 16. Since a job's
// objects are no longer pretenured (below), a scavenge copies only what lives across it: at 32 MB one takes longer
// (~1.9 against 0.7 ms) but comes every few hundred tiny jobs instead of every ~50, so fewer than 1 % of jobs meet
// one — 7-12 % less CPU a job, more jobs a second under load, and the pauses out of the p99 (one
// at a time: OIP p99 1.1 against 1.7 ms; bench/RESULTS.md, "Issue 30, fourth session"). Peak resident memory under
// load is about the same (~300 MB either way); after a load it stays higher for longer (292 against 181 MB 20 s
// later), and a large body streamed through leaves up to ~60 MB of its pieces' garbage (6 MB at 4 MB). `npm start`, the service definitions (`gpumesh agent service --print`) and a gpumesh process that starts
// another (src/cli/common/launch.ts) pass them to Node at once. A long-running command (up, serve, agent) started
// without them becomes Node again with them, in place (process.execve: POSIX, Node 22.15+), so its pid, its signals
// and its service manager's view stay its own. Where Node cannot do that (Windows, Node 20)
// it runs without them rather than as a child of a second process, which a service manager could end alone and so
// leave its agent running.
// --no-allocation-site-pretenuring: V8 would allocate the objects of a site whose objects often survived a scavenge in
// the old generation from then on. A server's hot sites make mostly medium-lived objects (a job's record, a batch, the
// link's messages: they live the milliseconds a job takes), which die there and wait for a mark-compact: 8-16 % less
// CPU a job under load, 4 % one at a time, the same tails (bench/RESULTS.md, "Issue 30, third session").
const NODE_FLAGS = ["--max-semi-space-size=32", "--no-allocation-site-pretenuring"];
const LONG_RUNNING = new Set(['up', 'serve', 'agent']);

const entry = new URL('../dist/cli/main.js', import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write('gpumesh: not built yet; run `npm run build` in the gpumesh folder\n');
  process.exit(1);
}

const args = process.argv.slice(2);
const inPlace = typeof process.execve === 'function' && process.platform !== 'win32'; // Windows' throws ERR_FEATURE_UNAVAILABLE_ON_PLATFORM
if (inPlace && LONG_RUNNING.has(args[0]) && !NODE_FLAGS.every((flag) => process.execArgv.includes(flag))) {
  process.execve(process.execPath, [process.execPath, ...NODE_FLAGS, ...process.execArgv, fileURLToPath(import.meta.url), ...args], process.env);
}
await import(entry.href);
