#!/usr/bin/env node
// The gpumesh command. The TypeScript sources are compiled to dist/ by `npm install` (the prepare script).
//
// A plain Node script, so that npm's command shims run it everywhere — on Windows without a POSIX shell, where a
// `#!/bin/sh` bin needs one on PATH.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

// NODE_FLAGS, the one place they are written (src/cli/common/launch.ts reads the line as it stands):
// --max-semi-space-size=4: V8's young generation capped at 4 MB (two semi-spaces) instead of growing to 16. A server
// process's garbage is collected in shorter, more frequent pauses: one-at-a-time tiny jobs through `gpumesh up`
// went from 2.1-4.1 ms to 1.5-2.7 ms at p99, for at most a few per cent of throughput under load (bench/RESULTS.md,
// "The young generation"). The long-running commands (up, serve, agent) started without them start Node again with
// them — in place where Node can (process.execve, POSIX, Node 22.15+), else as a child this process waits for and
// passes SIGTERM and SIGHUP to (Ctrl-C reaches the child from the terminal itself). `npm start`, the systemd units in
// docs/operations.md and a gpumesh process that starts another (src/cli/common/launch.ts) pass them at once.
const NODE_FLAGS = ["--max-semi-space-size=4"];
const LONG_RUNNING = new Set(['up', 'serve', 'agent']);

const entry = new URL('../dist/cli/main.js', import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write('gpumesh: not built yet; run `npm run build` in the gpumesh folder\n');
  process.exit(1);
}

const args = process.argv.slice(2);
if (LONG_RUNNING.has(args[0]) && !NODE_FLAGS.every((flag) => process.execArgv.includes(flag))) {
  const argv = [...NODE_FLAGS, ...process.execArgv, fileURLToPath(import.meta.url), ...args];
  if (typeof process.execve === 'function') process.execve(process.execPath, [process.execPath, ...argv], process.env);
  const child = spawn(process.execPath, argv, { stdio: 'inherit' });
  for (const signal of ['SIGTERM', 'SIGHUP']) process.on(signal, () => child.kill(signal));
  process.on('SIGINT', () => {}); // the terminal sent it to the child as well; the child decides when to exit
  child.once('error', (error) => {
    process.stderr.write(`gpumesh: could not start Node again with ${NODE_FLAGS.join(' ')}: ${error.message}\n`);
    process.exit(1);
  });
  child.once('exit', (code, signal) => {
    if (signal) {
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
    } else process.exit(code ?? 1);
  });
} else {
  await import(entry.href);
}
