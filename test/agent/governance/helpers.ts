import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino, type Logger } from 'pino';
import { Governor } from '../../../src/agent/governance/index.js';
import { waitFor } from '../../helpers/mesh.js';

export const FIXTURES = fileURLToPath(new URL('../../fixtures/engines/', import.meta.url));

/** A command template that runs a fixture with this Node.js (paths single-quoted: the template splits like a shell). */
export function fixture(name: string, args = ''): string {
  return `'${process.execPath}' '${join(FIXTURES, `${name}.mjs`)}' ${args}`.trim();
}

export const silentLog: Logger = pino({ level: 'silent' });

/** A logger whose JSON lines are kept, to check what the agent says. */
export function capturingLog(): { log: Logger; lines: { level: number; msg: string; [key: string]: unknown }[] } {
  const lines: { level: number; msg: string }[] = [];
  const log = pino({ level: 'debug' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { log, lines };
}

/** A process's state letter and process group, or null when it is gone. */
function stat(pid: number): { state: string; pgid: number } | null {
  try {
    // The command name (in parentheses) may hold spaces; the fields after it are fixed.
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return { state: fields[0]!, pgid: Number(fields[2]) };
  } catch {
    return null;
  }
}

/**
 * Whether a process runs. A killed process whose parent died waits as a zombie until
 * PID 1 reaps it (on this host, whenever PID 1 gets to it): it is dead, and counts as gone.
 */
export function pidAlive(pid: number): boolean {
  const status = stat(pid);
  return status !== null && status.state !== 'Z';
}

/** Whether any live process is left in a process group. */
export function groupAlive(pgid: number): boolean {
  return readdirSync('/proc').some((entry) => {
    if (!/^\d+$/.test(entry)) return false;
    const status = stat(Number(entry));
    return status !== null && status.pgid === pgid && status.state !== 'Z';
  });
}

/** Nothing of a process is left: its group is empty and its cgroup directories are gone. */
export async function expectNothingLeft(pgid: number, cgroupPaths: readonly string[]): Promise<void> {
  await waitFor(() => !groupAlive(pgid), { timeoutMs: 5000, what: `process group ${pgid} to be empty` });
  for (const path of cgroupPaths) if (existsSync(path)) throw new Error(`cgroup ${path} is still there`);
}

/** A cgroup file, from whichever of the cgroup's directories (one per v1 hierarchy) has it. */
export function cgroupFile(paths: readonly string[], file: string): string {
  for (const path of paths) if (existsSync(join(path, file))) return readFileSync(join(path, file), 'utf8').trim();
  throw new Error(`no ${file} in ${paths.join(', ')}`);
}

/**
 * A governor with cgroups if this host allows them, else why not. Tests that
 * need cgroups skip with that reason in their name (and a warning), never silently.
 */
export async function cgroupGovernor(agentId: string, log: Logger = silentLog): Promise<{ governor: Governor; skip: string | null }> {
  const governor = await Governor.create({ agentId, log });
  const skip = governor.cgroupVersion === null ? `skipped: no usable cgroups here (${governor.cgroupsUnavailable})` : null;
  if (skip) console.warn(`[${agentId}] ${skip}`);
  return { governor, skip };
}

/** The name of a test that needs cgroups, with the reason when it is skipped. */
export const needsCgroups = (name: string, skip: string | null): string => (skip ? `${name} (${skip})` : name);
