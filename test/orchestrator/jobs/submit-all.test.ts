import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import type { SubmitJobBody } from '../../../src/protocol/index.js';
import { GrantAuthority } from '../../../src/orchestrator/auth/index.js';
import type { CarriedPictures } from '../../../src/orchestrator/blobs/client-blobs.js';
import { InputImages } from '../../../src/orchestrator/blobs/input-images.js';
import { LocalBlobStore } from '../../../src/orchestrator/blobs/local-blob-store.js';
import { resolveConfig } from '../../../src/orchestrator/config/config.js';
import { BlobVisibility } from '../../../src/orchestrator/jobs/blob-visibility.js';
import { JobAdmission } from '../../../src/orchestrator/jobs/admission.js';
import type { ModelRegistry } from '../../../src/orchestrator/registry/index.js';
import { Admission } from '../../../src/orchestrator/scheduler/index.js';
import { stmt } from '../../../src/orchestrator/store/sqlite/db.js';
import { JobCoreHarness } from '../../helpers/job-core.js';
import { meshRejection } from '../../helpers/errors.js';
import { tempDirsPerTest } from '../../helpers/mesh.js';

/**
 * `JobAdmission.submitAll` (an OpenAI request's `n` jobs) on the job roles' harness (fake clock, in-memory store): every
 * check runs for all the jobs before any is written, so a refused request leaves no job; pictures the request carries
 * are stored only after those checks, recorded with the jobs, and given back when a concurrent request fills the queue
 * while they were being stored.
 */
const harnesses: JobCoreHarness[] = [];
const newDir = tempDirsPerTest();
afterEach(() => {
  for (const harness of harnesses.splice(0)) harness.close();
});

function setup(maxQueueSize: number) {
  const harness = new JobCoreHarness({ policy: { maxQueueSize } });
  harnesses.push(harness);
  const dir = newDir();
  const { store, commits, clock, scheduler, core } = harness;
  const config = resolveConfig({}, dir);
  const registry = { resolve: () => harness.models.get('gen')! } as unknown as ModelRegistry;
  const pictures = new InputImages({ store, commits, clock, blobs: new LocalBlobStore(dir) });
  const service = new JobAdmission({
    store, commits, clock, config, registry, scheduler, admission: new Admission(clock), states: core.states, dispatcher: core.dispatcher,
    cancellation: core.cancellation, sources: core.sources, metrics: harness.metrics, pictures, blobs: new BlobVisibility({ store, registry }),
  });
  const authority = new GrantAuthority(randomBytes(32), 'http://test');
  const grant = authority.verify(authority.mint('client', ['types image']).token, clock.now());
  return { harness, service, grant };
}

const bodies = (n: number): SubmitJobBody[] => Array.from({ length: n }, (_, index) => ({ type: 'image', input: { prompt: 'x', seed: index, width: 8, height: 8, steps: 1 } }));

/** A request's carried pictures that only note what happened to them; `meanwhile` runs while they are "stored". */
function carried(meanwhile: () => void = () => {}): { carried: CarriedPictures; calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    carried: {
      digests: [],
      store: async () => {
        calls.push('stored');
        meanwhile();
        return { admitted: () => calls.push('admitted'), refused: async () => { calls.push('refused'); } };
      },
    },
  };
}

describe('JobAdmission.submitAll', () => {
  it('refuses n jobs that do not all fit the queue before writing any, and stores none of their pictures', async () => {
    const { harness, service, grant } = setup(2);
    const request = carried();
    const refused = await meshRejection(service.submitAll(grant, bodies(3), () => {}, request.carried));
    expect(refused.code).toBe('QUEUE_FULL');
    expect(request.calls).toEqual([]);
    await harness.settle();
    expect(harness.db.prepare('SELECT COUNT(*) AS n FROM jobs').get()).toEqual({ n: 0 });
  });

  it('admits them with their pictures stored first and recorded with them', async () => {
    const { harness, service, grant } = setup(2);
    const request = carried();
    const jobs = await service.submitAll(grant, bodies(2), () => {}, request.carried);
    expect(jobs).toHaveLength(2);
    expect(request.calls).toEqual(['stored', 'admitted']);
    expect(jobs.map((job) => harness.status(job.id))).toEqual(['queued', 'queued']);
  });

  it('a queue filled by another request while the pictures were stored: those admitted are cancelled, and the pictures given back', async () => {
    const { harness, service, grant } = setup(2);
    const request = carried(() => harness.submit());
    const refused = await meshRejection(service.submitAll(grant, bodies(2), () => {}, request.carried));
    expect(refused.code).toBe('QUEUE_FULL');
    expect(request.calls).toEqual(['stored', 'refused']);
    await harness.settle();
    const statuses = harness.db.prepare('SELECT status FROM jobs WHERE grant_id = ?').all(grant.id) as { status: string }[];
    expect(statuses.map((row) => row.status)).toEqual(['cancelled']);
  });

  it('a commit refused (a full disk) takes back every job it held — written in its admission or after its turn: none stays queued, none has a row', async () => {
    const { harness, service, grant } = setup(4);
    // The next COMMIT fails as a full disk fails it; the group commit rolls the transaction back.
    const commit = stmt(harness.db, 'COMMIT');
    const run = commit.run.bind(commit);
    commit.run = (() => {
      commit.run = run;
      throw Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
    }) as typeof commit.run;
    // One job with an idempotency key (written in its admission), one without (written after its turn).
    const refused = service.submitAll(grant, [{ ...bodies(1)[0]!, idempotencyKey: 'full-disk' }, bodies(2)[1]!], () => {});
    await expect(refused).rejects.toMatchObject({ code: 'SQLITE_FULL' });
    await harness.settle();
    expect(harness.db.prepare('SELECT COUNT(*) AS n FROM jobs').get()).toEqual({ n: 0 });
    expect(harness.scheduler.totalDepth).toBe(0);
    expect([...harness.core.states.unwritten()]).toEqual([]);
    expect(harness.core.states.activeOn('gen')).toBe(0);
    // The disk has room again: the next request is taken and written.
    const [taken] = await service.submitAll(grant, bodies(1), () => {});
    await harness.settle();
    expect(harness.db.prepare('SELECT id FROM jobs').all()).toEqual([{ id: taken!.id }]);
  });
});
