import { afterEach, describe, expect, it } from 'vitest';
import { Admission, LineageCaps } from '../../../src/orchestrator/scheduler/index.js';
import type { JobCaps } from '../../../src/orchestrator/store/index.js';
import { JobCoreHarness } from '../../helpers/job-core.js';

/**
 * A waiting job released into its queue is admitted there as a submit would be: its grant's caps, kept with it, are
 * checked again against its lineage's use at that moment. Role level (JobCoreHarness: in-memory SQLite, fake clock),
 * with no host connected so the lineage's queued jobs stay queued while they are counted.
 */
let harness: JobCoreHarness | undefined;
afterEach(() => harness?.close());

function setup(caps: JobCaps) {
  // Built after the harness (they read its clock and scheduler), asked only once jobs move.
  let lineage: { caps: LineageCaps; admission: Admission } | undefined;
  harness = new JobCoreHarness({
    checkCaps: (job, kept) => lineage!.caps.check(job.grantId, kept, 1, (excess) => lineage!.admission.retryAfter(job.model, excess)),
  });
  const h = harness;
  lineage = { caps: new LineageCaps({ clock: h.clock, queuedOf: (id) => h.scheduler.queuedOf(id) }), admission: new Admission(h.clock) };
  const { store, commits, core } = h;
  // A source that succeeded already, with its picture.
  const source = commits.write(() => store.jobs.insertJob({
    id: 'j_source', type: 'image', model: 'gen', priority: 2, album: 'default', classes: ['image'], input: { prompt: 'p' }, grantId: 'g',
    idempotencyKey: null, createdAt: h.clock.now(), deadlineAt: null,
  }));
  commits.write(() => {
    store.jobs.finishJob(source.seq, 'succeeded', h.clock.now(), { result: null });
    store.artifacts.insertArtifact({
      digest: `sha256:${'b'.repeat(64)}`, jobId: source.id, type: 'image', model: 'gen', host: 'h', album: 'default', mediaType: 'image/png', bytes: 1,
      width: 8, height: 8, computeMs: 1, totalMs: 2, energyJ: null, createdAt: h.clock.now(),
    });
  });
  const waiting = () => {
    const job = core.states.create({
      id: 'j_waiting', type: 'image', model: 'gen', priority: 2, album: 'default', classes: ['image'], grantId: 'g', idempotencyKey: null,
      input: { prompt: 'from the source', seed: 1, width: 8, height: 8, steps: 1, image: { fromJob: source.id, output: 0 } },
      createdAt: h.clock.now(), deadlineAt: null, status: 'waiting',
    });
    commits.write(() => store.jobs.recordCaps(job.id, caps));
    core.sources.watch(job);
    return job;
  };
  return { h, waiting };
}

/** Two jobs of the lineage queued, then a job waiting for the source released under `max-queued limit`; its record once settled. */
async function releasedUnder(limit: number) {
  const { h, waiting } = setup({ maxQueued: { limit, caveat: `max-queued ${limit}` }, deviceSecondsPerDay: null });
  h.submit();
  h.submit();
  const { id } = waiting();
  await expect.poll(async () => { await h.settle(); return h.status(id); }).not.toBe('waiting');
  return { job: h.job(id)!, queued: h.scheduler.queuedOf('g') };
}

describe('a waiting job released into its queue', () => {
  it('fails with QUEUED_CAP_REACHED, naming the cap, when its lineage\'s queued jobs already fill max-queued', async () => {
    const { job, queued } = await releasedUnder(2);
    expect(job).toMatchObject({ status: 'failed', errorCode: 'QUEUED_CAP_REACHED', errorMessage: expect.stringContaining('"max-queued 2"') });
    expect(queued).toBe(2);
  });

  it('is queued, its reference now the source\'s digest, while the cap leaves room', async () => {
    const { job, queued } = await releasedUnder(3);
    expect(job).toMatchObject({ status: 'queued', input: { image: `sha256:${'b'.repeat(64)}` } });
    expect(queued).toBe(3);
  });
});
