import { execFile } from 'node:child_process';

/** How long the owner's activity command may take; one that takes longer says nothing (not "in use"). */
const ACTIVITY_TIMEOUT_MS = 10_000;

/**
 * Run the owner's activity command (`owner.activityCommand`, from the host's own config: its owner wrote it, so a
 * string runs in the system's shell as they would type it; a list runs as argv). True when it exits 0: the owner is
 * using the machine. Its output is not read.
 */
export function ownerActive(command: string | readonly string[]): Promise<boolean> {
  return new Promise((resolve) => {
    const done = (error: Error | null): void => resolve(error === null);
    const options = { timeout: ACTIVITY_TIMEOUT_MS, windowsHide: true };
    if (typeof command === 'string') execFile(command, { ...options, shell: true }, done);
    else execFile(command[0]!, command.slice(1), options, done);
  });
}
