import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { identityTag, ownIdentity, tagStillRuns } from '../../governance/process-identity.js';

const PREFIX = 'gpumesh-exec-';

let owner: string | null = null;
/** This agent, named for good (its pid and when it started): whose a scratch folder is. */
const ownerTag = (): string => (owner ??= identityTag(ownIdentity()));

/**
 * A run's scratch directory, `gpumesh-exec-<agent pid>.<its start>-<random>`: the tag says whose it is — the pid and
 * when that process started, since a pid alone is handed out again (under Wine every agent may show the same one) —,
 * so the folders of an agent that was killed mid-run (its `finally` never ran) can be told from a running agent's and
 * swept.
 */
export function makeScratch(root: string): Promise<string> {
  return mkdtemp(join(root, `${PREFIX}${ownerTag()}-`));
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
    const tag = new RegExp(`^${PREFIX}(\\d+\\.[0-9a-z]+)-`).exec(entry)?.[1];
    // A folder of an older agent (its pid alone) is kept: what it names cannot be told for sure.
    if (tag === undefined || tag === ownerTag() || tagStillRuns(tag)) continue;
    await rm(join(root, entry), { recursive: true, force: true });
    removed++;
  }
  return removed;
}
