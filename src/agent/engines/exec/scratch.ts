import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { alive } from '../../governance/cgroups/cgroupfs.js';

const PREFIX = 'gpumesh-exec-';

/**
 * A run's scratch directory, `gpumesh-exec-<agent pid>-<random>`: the pid says whose it is, so the folders of an
 * agent that was killed mid-run (its `finally` never ran) can be told from a running agent's and swept.
 */
export function makeScratch(root: string): Promise<string> {
  return mkdtemp(join(root, `${PREFIX}${process.pid}-`));
}

/** Remove the scratch directories of agents no longer running; returns how many went. */
export async function sweepScratch(root: string): Promise<number> {
  let entries: string[];
  try {
    entries = await readdir(root);
  } catch {
    return 0;
  }
  let removed = 0;
  for (const entry of entries) {
    const pid = Number(new RegExp(`^${PREFIX}(\\d+)-`).exec(entry)?.[1]);
    if (!Number.isSafeInteger(pid) || pid === process.pid || alive(pid)) continue;
    await rm(join(root, entry), { recursive: true, force: true });
    removed++;
  }
  return removed;
}
