import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The gpumesh command (bin/gpumesh.js). */
const GPUMESH_BIN = fileURLToPath(new URL('../../../bin/gpumesh.js', import.meta.url));

/**
 * The options the command runs Node with: its `const NODE_FLAGS = […]` line is the one place they are written. A
 * gpumesh process that starts another through `process.execPath` (the agent of `up --agent-process`, the test and
 * network harnesses) passes the same ones, so every gpumesh process runs alike. `bin` may be another build's command
 * (a side-by-side benchmark of two checkouts): one from before the command was a plain Node script wrote them in its
 * `exec node …` shell line.
 */
export function launchFlags(bin = GPUMESH_BIN): string[] {
  const text = readFileSync(bin, 'utf8');
  const flags = /^const NODE_FLAGS = (\[.*\]);$/m.exec(text)?.[1];
  if (flags) return JSON.parse(flags) as string[];
  const shellLine = /^\/\/ 2>\/dev\/null; exec node (.*?) ?"\$0" "\$@"$/m.exec(text)?.[1];
  return shellLine?.trim().split(/\s+/).filter(Boolean) ?? [];
}

/** The arguments for `process.execPath` that run `gpumesh <args>` as the command itself would. */
export function gpumeshArgs(args: readonly string[], bin = GPUMESH_BIN): string[] {
  return [...launchFlags(bin), bin, ...args];
}
