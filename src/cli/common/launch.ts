import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The gpumesh command (bin/gpumesh.js). */
const GPUMESH_BIN = fileURLToPath(new URL('../../../bin/gpumesh.js', import.meta.url));

/**
 * The options the command runs Node with when started as itself: the `exec node …` line at its top is the one place
 * they are written. A gpumesh process that starts another through `process.execPath` (the agent of
 * `up --agent-process`, the test and network harnesses) passes the same ones, so every gpumesh process runs alike.
 */
export function launchFlags(bin = GPUMESH_BIN): string[] {
  const launch = /^\/\/ 2>\/dev\/null; exec node (.*?) ?"\$0" "\$@"$/m.exec(readFileSync(bin, 'utf8'));
  return launch?.[1]?.trim().split(/\s+/).filter(Boolean) ?? [];
}

/** The arguments for `process.execPath` that run `gpumesh <args>` as the command itself would. */
export function gpumeshArgs(args: readonly string[], bin = GPUMESH_BIN): string[] {
  return [...launchFlags(bin), bin, ...args];
}
