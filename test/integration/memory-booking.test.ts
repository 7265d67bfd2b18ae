import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { meshForFile, waitFor } from '../helpers/mesh.js';

/**
 * A device is booked at its models' working peaks, not at what they hold after a batch: a real `gpumesh up` whose
 * agent reports on a slow heartbeat (30 s), so nothing but the booking itself can bring the peak to the mesh in time.
 * A batch of large pictures peaks well above what the model keeps; the mesh's figure for the device shows the peak at
 * once, and the model, unloaded and loaded again, is booked at that peak from its first moment.
 */
const running = meshForFile({
  env: { GPUMESH_LOG_LEVEL: 'debug' },
  config: {
    agents: { heartbeatMs: 30_000, staleAfterMs: 120_000 },
    models: { gen: { batching: { maxBatchSize: 3, preferredBatchSizes: [3], maxQueueDelayMs: 2000 } } },
  },
});

interface Status { hosts: { devices: { id: string; usedMB: number }[]; resident: { model: string; memoryMB: number }[] }[] }
const status = async (): Promise<Status> => running().client().request<Status>('GET', '/v1/status');
const used = async (): Promise<number> => (await status()).hosts[0]!.devices[0]!.usedMB;
const genMB = async (): Promise<number | undefined> => (await status()).hosts[0]!.resident.find((model) => model.model === 'gen')?.memoryMB;

/** The peaks the agent measured for gen's batches (its debug log: `batch computed`). */
function measuredPeaks(): number[] {
  return readFileSync(join(running().data, 'logs', 'agent.log'), 'utf8').split('\n')
    .filter((line) => line.includes('"msg":"batch computed"') && line.includes('"model":"gen"'))
    .map((line) => (JSON.parse(line) as { memory?: { peakMB: number } }).memory?.peakMB ?? 0);
}

describe('the budget books a model at its working peak', () => {
  it('a batch that peaks above what the model keeps is on the device\'s figure at once; reloaded, the model is booked at that peak', { timeout: 180_000 }, async () => {
    const client = running().client();
    const small = await client.submit({ type: 'image', input: { prompt: 'warm', width: 32, height: 32, steps: 1 } });
    expect((await client.follow(small.id)).type).toBe('succeeded');
    const before = await used();

    const jobs = [0, 1, 2].map((seed) => ({ type: 'image', input: { prompt: `large ${seed}`, seed, width: 448, height: 448, steps: 3 } }));
    const submitted = await client.request<{ results: { id: string }[] }>('POST', '/v1/jobs:batch', { jobs });
    for (const { id } of submitted.results) expect((await client.follow(id)).type).toBe('succeeded');
    const sizes = await Promise.all(submitted.results.map(async ({ id }) => (await client.job(id)).attempts.at(-1)!.batchSize));
    expect(sizes).toEqual([3, 3, 3]);

    const peak = Math.max(...measuredPeaks());
    expect(peak).toBeGreaterThan(before + 50);
    // At once: the next heartbeat is half a minute away.
    const booked = await waitFor(async () => {
      const now = await used();
      return now >= peak ? now : null;
    }, { timeoutMs: 3000, what: `the device's figure to show the batch's peak of ${peak} MB (it showed ${before} MB before the batch)` });
    expect(await genMB()).toBe(booked);

    // Let go and loaded again: the load itself holds little, but its batches will need the peak again.
    await client.request('POST', '/v1/models/gen/unload', {});
    await waitFor(async () => (await genMB()) === undefined, { what: 'gen to be unloaded' });
    const loaded = await client.request<{ loaded: { memoryMB: number | null }[] }>('POST', '/v1/models/gen/load', {});
    expect(loaded.loaded[0]!.memoryMB!).toBeLessThan(peak);
    const rebooked = await waitFor(async () => {
      const now = await genMB();
      return now !== undefined && now >= peak ? now : null;
    }, { timeoutMs: 3000, what: `gen, loaded again, to be booked at its peak of ${peak} MB` });
    expect(await used()).toBeGreaterThanOrEqual(rebooked);
  });
});
