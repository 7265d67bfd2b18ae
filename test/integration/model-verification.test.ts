import { createHash } from 'node:crypto';
import { readFileSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { JobView } from '../../src/protocol/api/index.js';
import { meshForFile, waitFor } from '../helpers/mesh.js';

/**
 * A model file corrupted in the agent's cache after it was verified once:
 * `gpumesh up` whose agent unloads idle models after a second, so the next
 * job loads the model again from the (damaged) cache.
 */
const running = meshForFile({ args: ['--idle-unload', '1'] });

const job = { type: 'image', input: { prompt: 'a lighthouse at dusk', seed: 7, width: 64, height: 64, steps: 3 } };

async function render(): Promise<JobView> {
  const client = running().client();
  const { id } = await client.submit(job);
  await client.follow(id);
  return client.job(id);
}

/** Where the agent caches a model file (see ModelCache.pathOf). */
const cachedPath = (digest: string): string => join(running().data, 'agent', 'models', digest.replace(':', '-'));

async function idle(): Promise<void> {
  await waitFor(async () => {
    const status = await running().client().request<{ hosts: { resident: { model: string }[] }[] }>('GET', '/v1/status');
    return status.hosts.every((host) => host.resident.length === 0);
  }, { timeoutMs: 30_000, what: 'the agent to unload its idle model' });
}

const sha256 = (bytes: Uint8Array): string => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;

describe('models are verified before every load', () => {
  it('a cached model damaged after its first use is detected, pulled again, and the job still makes the same image', async () => {
    const models = await running().client().request<{ models: { name: string; digest: string }[] }>('GET', '/v1/models');
    const digest = models.models.find((model) => model.name === 'gen')!.digest;
    const path = cachedPath(digest);
    const first = await render();
    expect(first.status).toBe('succeeded');
    const image = first.artifacts[0]!.digest;

    for (const damage of ['flip bytes, same size', 'truncate'] as const) {
      await idle();
      if (damage === 'truncate') truncateSync(path, 512);
      else {
        const bytes = readFileSync(path);
        for (let i = 0; i < 64; i++) bytes[(bytes.length >> 1) + i]! ^= 0x5a;
        writeFileSync(path, bytes);
      }
      const again = await render();
      expect(again.status, `${damage}: ${JSON.stringify(again.error)}`).toBe('succeeded');
      expect(again.attempts).toHaveLength(1);
      expect(again.artifacts[0]!.digest, damage).toBe(image);
      expect(sha256(readFileSync(path)), `${damage}: the cache file was repaired`).toBe(digest);
    }
    expect(readFileSync(join(running().data, 'logs', 'agent.log'), 'utf8')).toContain('cached model file is corrupt');
  }, 120_000);
});
