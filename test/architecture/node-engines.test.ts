import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/mesh.js';

const { satisfies, minVersion } = createRequire(import.meta.url)('semver') as {
  satisfies(version: string, range: string): boolean;
  minVersion(range: string): { version: string } | null;
};

interface Locked { engines?: { node?: string } | string[]; dev?: boolean; optional?: boolean; os?: string[]; cpu?: string[] }
const packageJson = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { engines: { node: string }; overrides?: unknown };
const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, Locked> };

/** What npm installs here: packages for another OS or CPU are skipped, and so is their engines check. */
const installedHere = (entry: Locked): boolean => (!entry.os || entry.os.includes(process.platform)) && (!entry.cpu || entry.cpu.includes(process.arch));
const nodeRange = (entry: Locked): string | undefined => (Array.isArray(entry.engines) ? undefined : entry.engines?.node);

/**
 * `npm install` warns (EBADENGINE) for every installed package whose engines exclude the running Node: gpumesh
 * supports the Node its package.json names (the oldest, and the current LTS), so none may (issue 22: cookie@2.0.2,
 * through Fastify's light-my-request 6.8, wanted Node 22 while the README said 20 — now light-my-request is pinned
 * at 6.6.0, which takes cookie 1.x, as a direct dependency).
 */
describe('dependencies install on every Node gpumesh supports', () => {
  const oldest = minVersion(packageJson.engines.node)!.version;
  it('steers with direct pins, not overrides: npm applies overrides only to the root project, and a host that joins installs gpumesh as a package', () => {
    expect(packageJson.overrides).toBeUndefined();
  });
  it.each([
    ['what gpumesh needs to run', false, [oldest, '22.12.0']],
    ['what its tests and builds need', true, [process.versions.node, '22.12.0']],
  ] as const)('%s', (_what, dev, versions) => {
    const refusing = Object.entries(lock.packages)
      .filter(([path, entry]) => path !== '' && Boolean(entry.dev) === dev && installedHere(entry) && nodeRange(entry))
      .flatMap(([path, entry]) => versions.filter((version) => !satisfies(version, nodeRange(entry)!)).map((version) => `${path} (${nodeRange(entry)}) refuses Node ${version}`));
    expect(refusing).toEqual([]);
  });
});
