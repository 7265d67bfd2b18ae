import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DigestLocks } from '../../../src/orchestrator/blobs/digest-locks.js';
import { InputImages } from '../../../src/orchestrator/blobs/input-images.js';
import { LocalBlobStore } from '../../../src/orchestrator/blobs/local-blob-store.js';
import { BlobReclaimer } from '../../../src/orchestrator/blobs/reclaim.js';
import { JobRetention } from '../../../src/orchestrator/jobs/retention.js';
import { SqliteStore, type NewJob } from '../../../src/orchestrator/store/index.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { tempDirsPerTest } from '../../helpers/mesh.js';

/**
 * The job retention on a real folder and an in-memory SQLite (fake clock): finished jobs no result names go after
 * their days, in batches, with the blobs only they named; jobs with results, unfinished jobs and young ones stay;
 * 0 days keeps everything; the periodic sweep runs on the clock.
 */
const newDir = tempDirsPerTest();
const DAY = 86_400_000;

function setup(days: number, batch?: number) {
  const store = new SqliteStore(':memory:');
  const { commits } = store;
  const clock = new FakeClock(Date.parse('2026-12-05T10:00:00Z'));
  const blobs = new LocalBlobStore(join(newDir(), 'blobs'));
  const locks = new DigestLocks();
  const pictures = new InputImages({ store, commits, clock, blobs });
  const reclaimer = new BlobReclaimer({ store, commits, blobs, locks, pictures, modelFile: () => false });
  const retention = new JobRetention({ store, commits, clock, reclaimer, days, batch });
  let n = 0;
  const job = (fields: Partial<NewJob> = {}) => commits.write(() => store.jobs.insertJob({
    id: `j_${++n}`, type: 'image', model: 'gen', priority: 2, album: 'default', classes: ['image'], hosts: null, input: { prompt: 'p' },
    grantId: 'g1', idempotencyKey: null, createdAt: clock.now(), deadlineAt: null, ...fields,
  }));
  const stored = async (text: string) => {
    const { digest, bytes } = await blobs.putBytes(Buffer.from(text));
    commits.write(() => store.blobs.recordBlob({ digest, bytes, mediaType: 'image/png' }, clock.now()));
    return digest;
  };
  return { store, commits, clock, blobs, retention, job, stored };
}

describe('JobRetention', () => {
  it('deletes finished jobs no result names once their days are up, with the blobs only they named; keeps the rest', async () => {
    const { store, commits, clock, blobs, retention, job, stored } = setup(30, 2);
    const halfDone = await stored('an output of an attempt that failed');
    const picture = await stored('a picture two jobs started from');
    const published = await stored('a result in the gallery');
    const failed = job();
    const tensor = job({ type: 'tensor', model: 'mlp' });
    const withResult = job();
    const later = job();
    const queued = job();
    commits.write(() => {
      store.jobs.finishJob(failed.seq, 'failed', clock.now(), { errorCode: 'ENGINE_FAILED', errorMessage: 'x' });
      store.jobs.finishJob(tensor.seq, 'succeeded', clock.now(), { result: { y: [1] } });
      store.jobs.finishJob(withResult.seq, 'succeeded', clock.now(), { result: null });
      store.artifacts.insertArtifact({
        digest: published, jobId: withResult.id, type: 'image', model: 'gen', host: 'h', album: 'default', mediaType: 'image/png', bytes: 1,
        width: 8, height: 8, computeMs: 1, totalMs: 2, energyJ: null, createdAt: clock.now(),
      });
      store.blobs.recordUpload(failed.id, halfDone, clock.now());
      store.inputImages.recordJobInput(picture, failed.id);
      store.inputImages.recordJobInput(picture, queued.id);
    });
    clock.advance(10 * DAY);
    commits.write(() => store.jobs.finishJob(later.seq, 'cancelled', clock.now()));

    clock.advance(20 * DAY + 1); // 30 days after the first three finished, 20 after `later`
    expect(await retention.sweep()).toEqual({ jobs: 2, freed: 1, freedBytes: 'an output of an attempt that failed'.length });
    expect(await store.jobs.getJob(failed.id)).toBeNull();
    expect(await store.jobs.getJob(tensor.id)).toBeNull();
    for (const kept of [withResult, later, queued]) expect(await store.jobs.getJob(kept.id), kept.id).not.toBeNull();
    expect(await blobs.has(halfDone)).toBe(false);
    // The queued job still names the picture; the published result is the gallery's.
    expect(await blobs.has(picture)).toBe(true);
    expect(await blobs.has(published)).toBe(true);

    clock.advance(10 * DAY);
    expect(await retention.sweep()).toEqual({ jobs: 1, freed: 0, freedBytes: 0 });
    expect(await store.jobs.getJob(later.id)).toBeNull();
  });

  it('deletes a pipeline with the last of its jobs, and its callback\'s arming with it; one with a job kept stays', async () => {
    const { store, commits, clock, retention, job, stored } = setup(30);
    const [picture, clip, other, kept] = [job(), job(), job(), job()];
    const published = await stored('a picture in the gallery');
    const pipeline = (id: string, jobs: { id: string }[]) => ({ id, grantId: 'g1', createdAt: clock.now(), steps: jobs.map((record, index) => ({ id: `s${index}`, jobId: record.id })) });
    commits.write(() => {
      store.pipelines.insertPipeline(pipeline('p_gone', [picture, clip]));
      store.pipelines.insertPipeline(pipeline('p_kept', [other, kept]));
      store.webhooks.armPipeline('p_gone', 'https://hooks.example.com/p', clock.now());
      store.jobs.finishJob(picture.seq, 'failed', clock.now(), { errorCode: 'ENGINE_FAILED', errorMessage: 'x' });
      store.jobs.finishJob(other.seq, 'failed', clock.now(), { errorCode: 'ENGINE_FAILED', errorMessage: 'x' });
      store.jobs.finishJob(kept.seq, 'succeeded', clock.now(), { result: null });
      store.artifacts.insertArtifact({
        digest: published, jobId: kept.id, type: 'image', model: 'gen', host: 'h', album: 'default', mediaType: 'image/png', bytes: 1,
        width: 8, height: 8, computeMs: 1, totalMs: 2, energyJ: null, createdAt: clock.now(),
      });
    });
    clock.advance(10 * DAY);
    commits.write(() => store.jobs.finishJob(clip.seq, 'failed', clock.now(), { errorCode: 'SOURCE_FAILED', errorMessage: 'x' }));

    clock.advance(20 * DAY + 1);
    // The picture's days are up, the clip's are not: the pipeline keeps its name for the clip.
    expect((await retention.sweep()).jobs).toBe(2);
    expect(await store.pipelines.getPipeline('p_gone')).not.toBeNull();
    expect(await store.webhooks.armedPipelines()).toEqual([{ pipelineId: 'p_gone', url: 'https://hooks.example.com/p' }]);
    clock.advance(10 * DAY);
    expect((await retention.sweep()).jobs).toBe(1);
    expect(await store.pipelines.getPipeline('p_gone')).toBeNull();
    expect(await store.webhooks.armedPipelines()).toEqual([]);
    // A step whose result is published keeps its pipeline, however old.
    expect(await store.pipelines.getPipeline('p_kept')).not.toBeNull();
  });

  it('takes as many batches as there are jobs to delete', async () => {
    const { store, commits, clock, retention, job } = setup(1, 3);
    const finished = Array.from({ length: 7 }, () => job());
    commits.write(() => { for (const record of finished) store.jobs.finishJob(record.seq, 'expired', clock.now()); });
    clock.advance(DAY + 1);
    expect((await retention.sweep()).jobs).toBe(7);
    expect(await store.jobs.countByStatus()).toEqual({});
  });

  it('0 days keeps every job (and what its rows name); blobs nothing names go all the same', async () => {
    const { store, commits, clock, blobs, retention, job, stored } = setup(0);
    const old = job();
    const halfDone = await stored('an output of an attempt that failed');
    const orphan = await stored('an inline result deleted before deleting gave bytes back');
    commits.write(() => {
      store.jobs.finishJob(old.seq, 'failed', clock.now(), { errorCode: 'ENGINE_FAILED', errorMessage: 'x' });
      store.blobs.recordUpload(old.id, halfDone, clock.now());
    });
    clock.advance(3650 * DAY);
    expect(await retention.sweep()).toEqual({ jobs: 0, freed: 1, freedBytes: 'an inline result deleted before deleting gave bytes back'.length });
    expect(await store.jobs.getJob(old.id)).not.toBeNull();
    expect(await blobs.has(halfDone)).toBe(true);
    expect(await blobs.has(orphan)).toBe(false);
    expect(await store.blobs.getBlob(orphan)).toBeNull();
  });

  it('sweeps on its clock until closed, telling what each sweep did', async () => {
    const { store, commits, clock, retention, job } = setup(1);
    const old = job();
    commits.write(() => store.jobs.finishJob(old.seq, 'failed', clock.now(), { errorCode: 'ENGINE_FAILED', errorMessage: 'x' }));
    clock.advance(DAY);
    const told: number[] = [];
    retention.sweepEvery(600_000, (result) => told.push(result?.jobs ?? -1));
    clock.advance(600_000);
    await expect.poll(() => told).toEqual([1]);
    clock.advance(600_000);
    await expect.poll(() => told).toEqual([1, 0]);
    retention.close();
    clock.advance(600_000);
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(told).toEqual([1, 0]);
    expect(await store.jobs.getJob(old.id)).toBeNull();
  });
});
