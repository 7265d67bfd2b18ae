import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../src/cli/common/client.js';
import { meshForFile } from '../helpers/mesh.js';

/**
 * Memory measured, not declared, end to end: `gpumesh up` with a small CPU
 * budget for its agent. The agent measures what each batch of the built-in
 * generator really takes and reports it; the orchestrator learns from it.
 */
const BUDGET_MB = 400;
const running = meshForFile({
  args: ['--cpu-budget', String(BUDGET_MB)],
  // The agent logs each batch's measured memory at debug level (off the hot path at info).
  env: { GPUMESH_LOG_LEVEL: 'debug' },
  // Batches of up to 16 if nothing else held them back.
  config: { models: { gen: { batching: { maxBatchSize: 16, preferredBatchSizes: [16], maxQueueDelayMs: 200 } } } },
});

const image = (prompt: string, side: number) => ({ type: 'image', input: { prompt, seed: 1, width: side, height: side, steps: 2 } });

async function run(prompt: string, side: number): Promise<void> {
  const client = running().client();
  const { id } = await client.submit(image(prompt, side));
  expect((await client.follow(id)).type).toBe('succeeded');
}

describe('memory measured, not declared', () => {
  it('after a few measured jobs, a much larger job is refused at submit with the figures; normal jobs keep working', async () => {
    // Before anything is measured the manifest's guess (128 MB) is all there is: nothing is refused on it.
    for (const side of [64, 128, 256]) await run(`measure ${side}`, side);
    const refused = await running().client().submit(image('far too large', 1024)).then(() => null, (error: unknown) => error);
    expect(refused).toBeInstanceOf(ApiError);
    const { status, code, message } = refused as ApiError;
    expect({ status, code }).toEqual({ status: 422, code: 'JOB_TOO_LARGE' });
    const [, need] = /needs an estimated (\d+) MB on model "gen"/.exec(message) ?? [];
    expect(Number(need), message).toBeGreaterThan(BUDGET_MB);
    expect(message).toContain('1024x1024 = 1048576 pixels');
    expect(message).toMatch(/MB per pixel, learned from \d+ measured batches/);
    expect(message).toContain(`${BUDGET_MB} MB on `);
    // The agent reported its figures over the link and logged what it measured.
    expect(readFileSync(join(running().data, 'logs', 'agent.log'), 'utf8')).toContain('"declaredMB":128');
    // Normal jobs keep working.
    await run('still fine', 128);
  });

  it('a burst is released in batches capped to what fits the host\'s budget, not the 16 the policy allows', async () => {
    const client = running().client();
    const ids = [];
    for (let i = 0; i < 16; i++) ids.push((await client.submit(image(`burst ${i}`, 256))).id);
    const outcomes = await Promise.all(ids.map((id) => client.follow(id)));
    expect(outcomes.every((event) => event.type === 'succeeded')).toBe(true);
    const sizes = (await Promise.all(ids.map((id) => client.job(id)))).map((view) => view.attempts.at(-1)!.batchSize);
    // A 256x256 image takes about 60 MB of working memory on top of the model: 16 of them would need over 1 GB.
    expect(Math.max(...sizes)).toBeLessThan(16);
    expect(Math.max(...sizes)).toBeGreaterThan(1);
    // And what the agent measured for those batches stayed within its budget (it warns when a batch's peak does not).
    const agentLog = readFileSync(join(running().data, 'logs', 'agent.log'), 'utf8');
    expect(agentLog).toContain('"msg":"batch computed"');
    expect(agentLog).not.toContain('more than the device budget');
  });
});
