import { afterEach, describe, expect, it } from 'vitest';
import { JobExplainer } from '../../../src/orchestrator/jobs/index.js';
import { JobCoreHarness } from '../../helpers/job-core.js';

/** Why a job waits, asked of the job roles on a fake clock. */
let harness: JobCoreHarness;
afterEach(() => harness?.close());

const explainer = () => new JobExplainer({
  store: harness.store, clock: harness.clock, scheduler: harness.scheduler, router: harness.router, failover: harness.core.failover,
  model: (name) => harness.models.get(name),
});
const explain = (id: string) => explainer().explain(harness.job(id)!);

describe('JobExplainer', () => {
  it('a batch to fill: its group, the size that releases it, and when it leaves anyway', async () => {
    harness = new JobCoreHarness({ policy: { batching: { maxBatchSize: 4, preferredBatchSizes: [4], maxQueueDelayMs: 5000 } } });
    harness.host('laptop', { resident: true });
    harness.host('busy', { resident: true });
    const first = harness.submit();
    await harness.settle();
    // Nothing arrives to keep it company, so it leaves early for an idle replica: it went at once.
    expect(harness.status(first.id)).toBe('dispatched');
    // Arrivals make a partial batch worth holding back.
    const jobs = [harness.submit(), harness.submit()];
    await harness.settle();
    const view = await explain(jobs[1]!.id);
    expect(view.waiting).toMatchObject({ for: 'a batch to fill', position: { ahead: 1, queued: 2 }, batch: { size: 2, target: 4 } });
    expect(view.waiting!.batch!.releaseBy).toBe(new Date(harness.clock.now() + 5000).toISOString());
    expect(view.summary).toMatch(/^waiting for a batch to fill: 2 of 4 compatible jobs queued; it leaves by /);
  });

  it('a free slot, a host of its classes, a retry backoff, and its turn', async () => {
    harness = new JobCoreHarness({ retryBackoffMs: 1000 });
    const laptop = harness.host('laptop', { resident: true });
    harness.host('desktop', { classes: ['video'] });
    const running = harness.submit();
    const queued = harness.submit();
    await harness.settle();
    expect((await explain(queued.id)).waiting).toMatchObject({
      for: 'a free slot', position: { ahead: 0, queued: 1 },
      hosts: [{ host: 'laptop', class: 'image', canTake: false, reason: 'no free slot' }, { host: 'desktop', class: null, canTake: false, reason: 'class not granted' }],
    });
    expect((await explain(queued.id)).summary).toBe('waiting for a free slot: every usable host of class image is busy (laptop: no free slot; desktop: class not granted)');
    // Only hosts it may not use: no host of its classes.
    const elsewhere = harness.submit({ hosts: ['desktop'] });
    await harness.settle();
    expect((await explain(elsewhere.id)).waiting).toMatchObject({ for: 'a host of its classes' });
    expect((await explain(elsewhere.id)).summary).toBe('waiting for a host of its classes: no usable host serves image (laptop: host not granted; desktop: class not granted)');
    // The running job's attempt fails: it waits out its backoff.
    const [run] = laptop.of('run');
    harness.core.intake.failed(laptop.session, { type: 'failed', jobId: running.id, batchId: run!.batchId, retryable: true, error: { code: 'ENGINE_CRASHED', message: 'boom' } });
    await harness.settle();
    expect((await explain(running.id)).waiting).toMatchObject({ for: 'retry backoff', retryAt: new Date(harness.clock.now() + 1000).toISOString(), position: null });
    expect((await explain(running.id)).attempts).toEqual([
      expect.objectContaining({ n: 1, host: 'laptop', status: 'failed', error: { code: 'ENGINE_CRASHED', message: 'boom' }, route: expect.objectContaining({ host: 'laptop', class: 'image' }) }),
    ]);
    // The queued job took the freed slot; a finished or running job is summed up in one sentence.
    expect((await explain(queued.id)).summary).toBe('sent to laptop (attempt 1); waiting for it to start');
    const dispatched = harness.job(queued.id)!;
    harness.core.intake.done(laptop.session, { type: 'done', jobId: queued.id, batchId: dispatched.batchId!, artifacts: [], timings: { loadMs: 0, computeMs: 5, totalMs: 5 } });
    await harness.settle();
    expect((await explain(queued.id))).toMatchObject({ status: 'succeeded', summary: 'succeeded after 1 attempt', waiting: null });
  });
});
