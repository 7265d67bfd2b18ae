import { execFile } from 'node:child_process';

/** How long the owner's activity command may take; one that takes longer says nothing (not "in use"). */
const ACTIVITY_TIMEOUT_MS = 10_000;

/**
 * Run one of the owner's commands (from the host's own config: its owner wrote it, so a string runs in the system's
 * shell as they would type it; a list runs as argv). True when it exits 0. Its output is not read. `timeoutMs`: it is
 * ended after this long (counted as a failure); none: it runs as long as it runs (a sleep command that returns when
 * the machine wakes).
 */
export function runOwnerCommand(command: string | readonly string[], timeoutMs?: number): Promise<boolean> {
  return new Promise((resolve) => {
    const done = (error: Error | null): void => resolve(error === null);
    const options = { windowsHide: true, ...(timeoutMs === undefined ? {} : { timeout: timeoutMs }) };
    if (typeof command === 'string') execFile(command, { ...options, shell: true }, done);
    else execFile(command[0]!, command.slice(1), options, done);
  });
}

/** The owner's activity command (`owner.activityCommand`): true when it exits 0, "I am using this machine". */
export const ownerActive = (command: string | readonly string[]): Promise<boolean> => runOwnerCommand(command, ACTIVITY_TIMEOUT_MS);
