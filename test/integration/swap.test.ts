import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { JobView } from '../../src/protocol/api/index.js';
import { removeDir, ROOT, startMesh, tempDir, waitFor, type RunningMesh, TSX_LOADER } from '../helpers/mesh.js';

/**
 * Two models that cannot both fit on the one device of a real mesh (`gpumesh up` with a 1000 MB CPU budget; each
 * model declares 600 MB), each a server the agent starts from its command template: an OpenAI-style image
 * stand-in that serves only its own model's name (a job sent to the wrong server fails with model_not_found).
 * Jobs of the two alternate; under batch-before-swap the device swaps a few times, not once per batch, and every
 * job is answered by its own model's server.
 */
const STANDIN = join(ROOT, 'test/fixtures/standins/openai-images-standin.ts');
const server = (name: string) => ({
  engine: 'openai-images', types: ['image'], memoryMB: 600,
  batching: { maxBatchSize: 4 },
  settings: {
    model: name,
    command: `'${process.execPath}' --import ${TSX_LOADER} '${STANDIN}' --port \${PORT} --models ${name} --slow-ms 10 --start-delay-ms 150`,
    readiness: { http: '/v1/models', timeoutMs: 60_000, intervalMs: 50 },
    stopGraceMs: 2000,
  },
});

let mesh: RunningMesh;
const data = tempDir();

beforeAll(async () => {
  mesh = await startMesh({
    data, args: ['--cpu-budget', '1000'],
    config: { models: { a: server('a'), b: server('b') }, scheduling: { swapPolicy: 'batch-before-swap', maxSwapHoldMs: 10_000 } },
  });
}, 120_000);

afterAll(async () => {
  await mesh?.stop();
  removeDir(data);
});

describe('two models that cannot both fit on one device, alternating (batch-before-swap)', () => {
  it('every job runs on its own model\'s server, and the device swaps far less often than once per batch', async () => {
    const client = mesh.client();
    const ids: { id: string; model: string }[] = [];
    for (let i = 0; i < 24; i++) {
      const model = i % 2 === 0 ? 'a' : 'b';
      const { id } = await client.submit({ type: 'image', model, input: { prompt: `swap ${i}`, seed: i, width: 64, height: 64 } });
      ids.push({ id, model });
    }
    const views = await waitFor(async () => {
      const all = await Promise.all(ids.map(({ id }) => client.job(id) as Promise<JobView>));
      return all.every((view) => ['succeeded', 'failed', 'cancelled', 'expired'].includes(view.status)) ? all : null;
    }, { timeoutMs: 60_000, what: 'every job to end' });
    expect(views.map((view) => `${view.status} ${view.error?.message ?? ""}`)).toEqual(ids.map(() => "succeeded "));
    expect(views.map((view) => view.model)).toEqual(ids.map(({ model }) => model));

    // Batches in the order they started, and which of them waited for their model to load (a server start).
    const batches = new Map<string, { model: string; startedAt: string; loaded: boolean }>();
    for (const view of views) {
      for (const attempt of view.attempts) {
        if (attempt.status !== 'succeeded') continue;
        batches.set(attempt.batchId, { model: view.model, startedAt: attempt.startedAt!, loaded: (attempt.loadMs ?? 0) > 0 });
      }
    }
    const order = [...batches.values()].sort((x, y) => x.startedAt.localeCompare(y.startedAt));
    const loads = order.filter((batch) => batch.loaded).length;
    // Each model's first batch loads it; a swap back and forth after that is allowed, once per model change, no more.
    const changes = order.filter((batch, index) => index > 0 && batch.model !== order[index - 1]!.model).length;
    expect(loads).toBe(changes + 1);
    // Naive LRU would change model on every batch (12 jobs each, at most 4 per batch: ≥ 6 batches); held, a few times.
    expect(order.length).toBeGreaterThanOrEqual(6);
    expect(changes).toBeLessThan(order.length - 1);
    expect(changes).toBeLessThanOrEqual(3);
  });
});
