import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { GrantAuthority } from '../../../src/orchestrator/auth/index.js';
import type { RowWrite } from '../../../src/orchestrator/jobs/index.js';
import { JobReads } from '../../../src/orchestrator/jobs/reads.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { jobView } from '../../../src/orchestrator/jobs/views.js';
import { attempts, jobs as jobStore, SqliteStore, type JobRecord } from '../../../src/orchestrator/store/index.js';
import { JobCoreHarness } from '../../helpers/job-core.js';
import { scriptedPng } from '../../helpers/scripted-agent.js';

/** The job roles (states, dispatch, intake, failover, cancellation, recovery) on a fake clock and an in-memory store. */
let harness: JobCoreHarness;
afterEach(() => harness?.close());

const timings = { loadMs: 0, computeMs: 5, totalMs: 6 };

/** A fresh harness with one host, `laptop`, and one job submitted (its row written as `write` says) and dispatched to it. */
async function oneDispatched(write?: RowWrite) {
  harness = new JobCoreHarness();
  const laptop = harness.host('laptop');
  const job = harness.submit({ write });
  await harness.settle();
  return { laptop, job, run: laptop.of('run')[0] };
}

describe('dispatch and result intake', () => {
  it('sends a queued job to a free host, then takes started, progress and done from that host only', async () => {
    const { laptop, job, run } = await oneDispatched();
    expect(run).toMatchObject({ model: { name: 'gen' }, jobs: [{ id: job.id }], uploadCredential: `upload-${run!.batchId}` });
    expect(harness.status(job.id)).toBe('dispatched');

    const { intake } = harness.core;
    intake.started(laptop.session, run!.batchId, [job.id]);
    intake.progress(laptop.session, run!.batchId, [job.id], 1, 2);
    const png = scriptedPng('png bytes');
    const digest = await harness.upload(job.id, run!.batchId, png);
    intake.done(laptop.session, { type: 'done', jobId: job.id, batchId: run!.batchId, artifacts: [{ digest, mediaType: 'image/png', bytes: png.length }], timings });
    await harness.settle();
    expect(harness.status(job.id)).toBe('succeeded');
    expect(harness.jobEvents(job.id)).toEqual(['queued', 'dispatched', 'running', 'progress', 'succeeded']);
    expect(laptop.of('ack').flatMap((ack) => ack.jobIds)).toEqual([job.id]);
    expect(laptop.session.batches.size).toBe(0);

    // A duplicate is acknowledged and changes nothing.
    intake.done(laptop.session, { type: 'done', jobId: job.id, batchId: run!.batchId, artifacts: [], timings });
    await harness.settle();
    expect(laptop.of('ack')).toHaveLength(2);
    expect(harness.jobEvents(job.id).filter((type) => type === 'succeeded')).toHaveLength(1);
  });

  it('frees a slot when the engine is done with its batch (computed): the next batch leaves while the outputs travel', async () => {
    harness = new JobCoreHarness();
    const laptop = harness.host('laptop');
    const first = harness.submit();
    await harness.settle();
    const second = harness.submit();
    await harness.settle();
    const [run] = laptop.of('run');
    expect(laptop.of('run')).toHaveLength(1);
    expect(laptop.session.freeSlots).toBe(0);

    const { intake } = harness.core;
    intake.computed(laptop.session, 'b_not_here');
    await harness.settle();
    expect(laptop.of('run')).toHaveLength(1);

    intake.computed(laptop.session, run!.batchId);
    await harness.settle();
    const runs = laptop.of('run');
    expect(runs).toHaveLength(2);
    expect(runs[1]!.jobs.map((job) => job.id)).toEqual([second.id]);
    // The first batch is still held (its result has not come) but computes no more; the second takes the one slot.
    expect(laptop.session.batches.size).toBe(2);
    expect(laptop.session.computing).toBe(1);
    expect(laptop.session.freeSlots).toBe(0);
    expect(harness.status(first.id)).toBe('dispatched');
    // Said twice, it frees nothing more.
    intake.computed(laptop.session, run!.batchId);
    const fourth = harness.submit();
    await harness.settle();
    expect(laptop.of('run')).toHaveLength(2);

    const png = scriptedPng('png bytes');
    const digest = await harness.upload(first.id, run!.batchId, png);
    intake.done(laptop.session, { type: 'done', jobId: first.id, batchId: run!.batchId, artifacts: [{ digest, mediaType: 'image/png', bytes: png.length }], timings });
    await harness.settle();
    expect(harness.status(first.id)).toBe('succeeded');
    // The first batch's end gives back no slot it had given back already: the fourth job still waits for the second.
    expect(laptop.session.batches.size).toBe(1);
    expect(harness.status(fourth.id)).toBe('queued');
    intake.computed(laptop.session, runs[1]!.batchId);
    await harness.settle();
    expect(laptop.of('run').at(-1)!.jobs.map((job) => job.id)).toEqual([fourth.id]);
  });

  it('refuses, logs and counts reports from a host that does not hold the job, and tells it to let go', async () => {
    harness = new JobCoreHarness();
    const laptop = harness.host('laptop');
    const rogue = harness.host('rogue', { join: false });
    const running = harness.submit();
    const queued = harness.submit();
    await harness.settle();
    const [run] = laptop.of('run');
    const { intake } = harness.core;
    for (const job of [queued, running]) {
      intake.done(rogue.session, { type: 'done', jobId: job.id, batchId: run!.batchId, artifacts: [], result: 'forged', timings });
      intake.failed(rogue.session, { type: 'failed', jobId: job.id, batchId: run!.batchId, retryable: false, error: { code: 'INVALID_INPUT', message: 'forged' } });
    }
    intake.started(rogue.session, run!.batchId, [running.id]);
    intake.progress(rogue.session, run!.batchId, [running.id], 1, 1);
    // The right batch id from the wrong session, and the right session with a batch it was not given, are both refused.
    intake.done(laptop.session, { type: 'done', jobId: running.id, batchId: 'b_other', artifacts: [], timings });
    await harness.settle();

    expect(harness.status(queued.id)).toBe('queued');
    expect(harness.status(running.id)).toBe('dispatched');
    expect(laptop.of('cancel')).toEqual([]);
    expect(rogue.of('cancel').length).toBe(4);
    expect(rogue.of('ack')).toHaveLength(0);
    const metrics = await harness.metrics.text();
    expect(metrics).toMatch(/gpumesh_link_reports_refused_total\{host="rogue",message="done"\} 2/);
    expect(metrics).toMatch(/gpumesh_link_reports_refused_total\{host="rogue",message="failed"\} 2/);
    expect(metrics).toMatch(/gpumesh_link_reports_refused_total\{host="rogue",message="started"\} 1/);
    expect(metrics).toMatch(/gpumesh_link_reports_refused_total\{host="laptop",message="done"\} 1/);
    expect(harness.seen.filter((scoped) => scoped.kind === 'mesh' && scoped.event.type === 'link:refused')).toHaveLength(7);
  });

  it('a reported output that was never uploaded fails the attempt, and the job is dispatched again', async () => {
    const { laptop, job, run: first } = await oneDispatched();
    harness.core.intake.done(laptop.session, { type: 'done', jobId: job.id, batchId: first!.batchId, artifacts: [{ digest: `sha256:${'1'.repeat(64)}`, mediaType: 'image/png', bytes: 1 }], timings });
    await harness.settle();
    expect(harness.status(job.id)).toBe('queued');
    harness.clock.advance(100);
    await harness.settle();
    expect(laptop.of('run')).toHaveLength(2);
  });
});

describe('failover', () => {
  it('keeps the attempt a job succeeded with on its row and the one that failed as a row of attempts: both read back from the store', async () => {
    harness = new JobCoreHarness({ policy: { retries: 1 }, retryBackoffMs: 100 });
    const laptop = harness.host('laptop');
    const job = harness.submit();
    await harness.settle();
    harness.core.intake.failed(laptop.session, {
      type: 'failed', jobId: job.id, batchId: laptop.of('run')[0]!.batchId, retryable: true, error: { code: 'ENGINE_CRASHED', message: 'boom' },
    });
    await harness.settle();
    harness.clock.advance(100);
    await harness.settle();
    const second = laptop.of('run')[1]!;
    harness.clock.advance(7);
    // Done without a `started` before it (a quick batch): it started when the result says, its compute time ago.
    harness.core.intake.done(laptop.session, { type: 'done', jobId: job.id, batchId: second.batchId, artifacts: [], result: { y: [1] }, timings });
    await harness.settle();

    const count = (): number => (harness.db.prepare('SELECT COUNT(*) AS n FROM attempts WHERE job_id = ?').get(job.id) as { n: number }).n;
    expect(count()).toBe(1);
    const stored = harness.job(job.id)!; // no longer active: read from the store
    const finishedAt = new Date(harness.clock.now()).toISOString();
    expect((await jobView(harness.store, stored)).attempts).toEqual([
      expect.objectContaining({ n: 1, status: 'failed', host: 'laptop', error: { code: 'ENGINE_CRASHED', message: 'boom' } }),
      {
        n: 2, host: 'laptop', replica: 'laptop/gen', batchId: second.batchId, batchSize: 1, status: 'succeeded',
        dispatchedAt: new Date(harness.clock.now() - 7).toISOString(), startedAt: new Date(harness.clock.now() - timings.computeMs).toISOString(),
        finishedAt, loadMs: 0, computeMs: timings.computeMs, error: null, route: expect.objectContaining({ class: 'image' }),
      },
    ]);
    // A store written before attempts were kept on the row holds the succeeded one in attempts too: it is listed once.
    attempts.recordAttempt(harness.db, {
      jobId: job.id, n: 2, host: 'laptop', batchId: second.batchId, batchSize: 1, status: 'succeeded', dispatchedAt: 1, startedAt: 2, finishedAt: 3, computeMs: 5,
    }, 'gen');
    expect((await jobView(harness.store, stored)).attempts.map((attempt) => attempt.n)).toEqual([1, 2]);
  });

  it('retries a retryable failure after a doubling backoff, and ends with RETRIES_EXHAUSTED', async () => {
    harness = new JobCoreHarness({ policy: { retries: 1 }, retryBackoffMs: 100 });
    const laptop = harness.host('laptop');
    const job = harness.submit();
    await harness.settle();
    const fail = (batchId: string): void => harness.core.intake.failed(laptop.session, {
      type: 'failed', jobId: job.id, batchId, retryable: true, error: { code: 'ENGINE_CRASHED', message: 'boom' },
    });
    fail(laptop.of('run')[0]!.batchId);
    await harness.settle();
    expect(harness.status(job.id)).toBe('queued');
    harness.clock.advance(99);
    await harness.settle();
    expect(laptop.of('run')).toHaveLength(1);
    harness.clock.advance(1);
    await harness.settle();
    expect(laptop.of('run')).toHaveLength(2);
    fail(laptop.of('run')[1]!.batchId);
    await harness.settle();
    const record = harness.job(job.id)!;
    expect(record.status).toBe('failed');
    expect(record.errorCode).toBe('RETRIES_EXHAUSTED');
  });

  it('does not retry an input error, and reads an unknown error code as ENGINE_FAILED', async () => {
    harness = new JobCoreHarness();
    const laptop = harness.host('laptop');
    const bad = harness.submit();
    const odd = harness.submit();
    await harness.settle();
    const [run] = laptop.of('run');
    harness.core.intake.failed(laptop.session, { type: 'failed', jobId: bad.id, batchId: run!.batchId, retryable: false, error: { code: 'INVALID_INPUT', message: 'no' } });
    await harness.settle();
    expect(harness.job(bad.id)).toMatchObject({ status: 'failed', errorCode: 'INVALID_INPUT' });
    const [second] = laptop.of('run').slice(1);
    harness.core.intake.failed(laptop.session, { type: 'failed', jobId: odd.id, batchId: second!.batchId, retryable: false, error: { code: 'WHATEVER', message: 'agent words' } });
    await harness.settle();
    expect(harness.job(odd.id)).toMatchObject({ status: 'failed', errorCode: 'ENGINE_FAILED', errorMessage: 'WHATEVER: agent words' });
  });

  it('a lost host fails its attempts over; a reconnecting session that still holds a job keeps it', async () => {
    harness = new JobCoreHarness({ retryBackoffMs: 10 });
    const first = harness.host('laptop', { concurrency: 2 });
    const kept = harness.submit();
    await harness.settle();
    const lost = harness.submit();
    await harness.settle();
    const [keptRun, lostRun] = first.of('run');
    const second = harness.host('laptop', { concurrency: 2, join: false });
    harness.core.failover.hostLost(first.session, { session: second.session, held: [{ jobId: kept.id, batchId: keptRun!.batchId }] });
    harness.hosts.set(second.session);
    await harness.settle();
    expect(harness.status(lost.id)).toBe('queued');
    expect(harness.core.inFlight.holds(second.session, keptRun!.batchId, kept.id)).toBe(true);
    harness.core.intake.done(second.session, { type: 'done', jobId: kept.id, batchId: keptRun!.batchId, artifacts: [], result: 7, timings });
    await harness.settle();
    expect(harness.job(kept.id)).toMatchObject({ status: 'succeeded', result: 7 });
    harness.clock.advance(10);
    await harness.settle();
    expect(second.of('run').map((run) => run.jobs[0]!.id)).toEqual([lost.id]);
    expect(lostRun!.jobs[0]!.id).toBe(lost.id);
  });
});

describe('a job its client waits for: written once, when it ends', () => {
  const stored = (id: string): unknown => jobStore.getJob(harness.db, id);

  it('is read from memory while it runs and written whole at its end: insert, dispatch and result in one row', async () => {
    const { laptop, job, run } = await oneDispatched('end');
    expect(harness.status(job.id)).toBe('dispatched');
    expect(stored(job.id)).toBeNull();
    expect(await harness.core.states.get(job.id)).toBe(job);
    expect([...harness.core.states.unwritten()]).toEqual([job]);
    harness.clock.advance(7);
    harness.core.intake.done(laptop.session, { type: 'done', jobId: job.id, batchId: run!.batchId, artifacts: [], result: { y: [1] }, timings });
    // Its end is written after the turn it ended in: found meanwhile, by id, in a list and in the counts.
    expect(harness.status(job.id)).toBeUndefined();
    expect(await harness.core.states.get(job.id)).toMatchObject({ id: job.id, status: 'succeeded' });
    const reads = new JobReads({ store: harness.store, clock: harness.clock, states: harness.core.states });
    const grant = new GrantAuthority(randomBytes(32), 'http://test');
    const client = grant.verify(grant.mint('client', ['types image']).token, harness.clock.now());
    expect((await reads.list(client, { limit: 10 })).jobs).toEqual([expect.objectContaining({ id: job.id, status: 'succeeded', result: { y: [1] } })]);
    expect((await reads.list(client, { limit: 10, statuses: ['queued'] })).jobs).toEqual([]);
    expect(await reads.counts()).toMatchObject({ succeeded: 1 });
    await harness.settle();
    expect([...harness.core.states.unwritten()]).toEqual([]);
    expect(stored(job.id)).toMatchObject({
      seq: job.seq, status: 'succeeded', attempts: 1, batchId: run!.batchId, batchSize: 1, leaseHost: null, attemptHost: 'laptop', computeMs: timings.computeMs,
      dispatchedAt: harness.clock.now() - 7, startedAt: harness.clock.now() - timings.computeMs, finishedAt: harness.clock.now(), result: { y: [1] },
      route: expect.stringContaining('image'), input: job.input,
    });
    expect(harness.jobEvents(job.id)).toEqual(['queued', 'dispatched', 'running', 'succeeded']);
    expect(laptop.of('ack').flatMap((ack) => ack.jobIds)).toEqual([job.id]);
  });

  it('is written at shutdown if it ended in the turn the orchestrator closes in', async () => {
    const { laptop, job } = await oneDispatched('end');
    harness.core.intake.done(laptop.session, { type: 'done', jobId: job.id, batchId: laptop.of('run')[0]!.batchId, artifacts: [], result: 3, timings });
    expect(stored(job.id)).toBeNull();
    // As Orchestrator.close does: the job roles close before the store's last commit.
    harness.core.close();
    harness.commits.flush();
    expect(stored(job.id)).toMatchObject({ seq: job.seq, status: 'succeeded', result: 3, attemptHost: 'laptop' });
    expect([...harness.core.states.unwritten()]).toEqual([]);
    // The end of the turn finds nothing left to write (a second insert would be refused).
    await harness.settle();
    expect(harness.db.prepare('SELECT count(*) AS n FROM jobs WHERE id = ?').get(job.id)).toEqual({ n: 1 });
  });

  it('a row refused after the turn is logged and let go: the process goes on, the job is not listed for ever', async () => {
    const { laptop, job } = await oneDispatched('end');
    // Another row takes the job's number meanwhile (what a second orchestrator on a shared store must never do).
    harness.db.prepare('INSERT INTO jobs (seq, id, type, model, status, priority, album, classes, input, grant_id, created_at, updated_at) '
      + "VALUES (?, 'j_other', 'image', 'gen', 'queued', 2, 'default', '[]', '{}', 'g', 0, 0)").run(job.seq);
    harness.core.intake.done(laptop.session, { type: 'done', jobId: job.id, batchId: laptop.of('run')[0]!.batchId, artifacts: [], result: 3, timings });
    await harness.settle();
    expect(stored(job.id)).toBeNull();
    expect([...harness.core.states.unwritten()]).toEqual([]);
    expect(await harness.core.states.get(job.id)).toBeNull();
    // Later jobs are written as before.
    const next = harness.submit();
    await harness.settle();
    expect(stored(next.id)).toMatchObject({ status: 'dispatched' });
  });

  it('keeps the number it was admitted with: jobs admitted after it and written before it take others', async () => {
    harness = new JobCoreHarness();
    const laptop = harness.host('laptop', { concurrency: 2 });
    const waited = harness.submit({ write: 'end' });
    const other = harness.submit();
    await harness.settle();
    expect(other.seq).toBeGreaterThan(waited.seq);
    const run = laptop.of('run').find((message) => message.jobs[0]!.id === waited.id)!;
    harness.core.intake.done(laptop.session, { type: 'done', jobId: waited.id, batchId: run.batchId, artifacts: [], result: 1, timings });
    await harness.settle();
    expect(stored(waited.id)).toMatchObject({ seq: waited.seq, status: 'succeeded' });
    expect(stored(other.id)).toMatchObject({ seq: other.seq, status: 'dispatched' });
  });

  it('is written as it stands when its attempt fails, before the attempt: its retry is any job\'s', async () => {
    harness = new JobCoreHarness({ policy: { retries: 1 }, retryBackoffMs: 100 });
    const laptop = harness.host('laptop');
    const job = harness.submit({ write: 'end' });
    await harness.settle();
    harness.core.intake.failed(laptop.session, {
      type: 'failed', jobId: job.id, batchId: laptop.of('run')[0]!.batchId, retryable: true, error: { code: 'ENGINE_CRASHED', message: 'boom' },
    });
    await harness.settle();
    expect(stored(job.id)).toMatchObject({ status: 'queued', attempts: 1 });
    expect(harness.db.prepare('SELECT status, error_code FROM attempts WHERE job_id = ?').all(job.id)).toEqual([{ status: 'failed', error_code: 'ENGINE_CRASHED' }]);
    harness.clock.advance(100);
    await harness.settle();
    expect(stored(job.id)).toMatchObject({ status: 'dispatched', attempts: 2 });
  });

  it('is written when nobody waits any more (persist), and a cancel or a deadline ends it in one row', async () => {
    harness = new JobCoreHarness();
    const laptop = harness.host('laptop');
    const running = harness.submit({ write: 'end' });
    const queued = harness.submit({ write: 'end', deadlineAt: harness.clock.now() + 50 });
    await harness.settle();
    await harness.core.states.persist(running);
    expect(stored(running.id)).toMatchObject({ status: 'dispatched', attempts: 1, leaseHost: 'laptop' });
    await harness.core.states.persist(running); // once only
    harness.clock.advance(50);
    await harness.settle();
    expect(stored(queued.id)).toMatchObject({ status: 'expired', attempts: 0, finishedAt: harness.clock.now() });
    harness.core.cancellation.cancel(running.id);
    await harness.settle();
    expect(stored(running.id)).toMatchObject({ status: 'cancelled' });
    expect(laptop.of('cancel').map((message) => message.jobId)).toEqual([running.id]);
  });
});

describe('a submitted job: its row after its turn, its end after the turn it ended in', () => {
  const stored = (id: string): unknown => jobStore.getJob(harness.db, id);
  const statements = (): number => harness.db.prepare("SELECT count(*) AS n FROM jobs").get() as never;

  it('is written after the turn it was admitted in, as it stands: its dispatch to a free host in the insert, no update', async () => {
    harness = new JobCoreHarness();
    const laptop = harness.host('laptop');
    const job = harness.submit({ write: 'turn' });
    const committed = harness.core.states.stored(job);
    // In its turn: dispatched from memory, no row yet, listed from memory.
    await Promise.resolve();
    expect(laptop.of('run').map((run) => run.jobs[0]!.id)).toEqual([job.id]);
    expect(stored(job.id)).toBeNull();
    expect([...harness.core.states.unwritten()]).toEqual([job]);
    let done = false;
    void committed.then(() => { done = true; });
    await new Promise((resolve) => setImmediate(resolve));
    // After the turn: one row, already dispatched, in the transaction its admission waits for.
    expect(stored(job.id)).toMatchObject({ seq: job.seq, status: 'dispatched', attempts: 1, leaseHost: 'laptop', batchId: laptop.of('run')[0]!.batchId });
    expect([...harness.core.states.unwritten()]).toEqual([]);
    await harness.settle();
    await committed;
    expect(done).toBe(true);
    expect(statements()).toEqual({ n: 1 });
  });

  it('a row refused after the turn is its admission\'s error: the job is taken back, ended without a row', async () => {
    harness = new JobCoreHarness();
    harness.host('laptop');
    const job = harness.submit({ write: 'turn' });
    // Another row takes the job's number meanwhile (what a second orchestrator on a shared store must never do).
    harness.db.prepare('INSERT INTO jobs (seq, id, type, model, status, priority, album, classes, input, grant_id, created_at, updated_at) '
      + "VALUES (?, 'j_other', 'image', 'gen', 'queued', 2, 'default', '[]', '{}', 'g', 0, 0)").run(job.seq);
    await expect(harness.core.states.stored(job)).rejects.toThrow(/UNIQUE/);
    // What JobAdmission does with the refusal: the job is cancelled wherever it is, and nothing is written for it.
    expect(harness.core.cancellation.cancel(job.id)).toBe(true);
    await harness.settle();
    expect(stored(job.id)).toBeNull();
    expect(await harness.core.states.get(job.id)).toBeNull();
    expect([...harness.core.states.unwritten()]).toEqual([]);
    expect(harness.jobEvents(job.id)).toEqual(['queued', 'dispatched', 'cancelled']);
  });

  it('a written job\'s end waits for the end of its turn: found meanwhile by id, in a list and in the counts; acknowledged after its write', async () => {
    const { laptop, job, run } = await oneDispatched();
    harness.clock.advance(3);
    harness.core.intake.done(laptop.session, { type: 'done', jobId: job.id, batchId: run!.batchId, artifacts: [], result: { y: [2] }, timings });
    // The event has gone; the row is still the dispatched one, and the agent is not acknowledged yet.
    expect(harness.jobEvents(job.id)).toEqual(['queued', 'dispatched', 'running', 'succeeded']);
    expect(stored(job.id)).toMatchObject({ status: 'dispatched' });
    expect(await harness.core.states.get(job.id)).toMatchObject({ id: job.id, status: 'succeeded' });
    expect(laptop.of('ack')).toEqual([]);
    // A read of the table writes the ends first.
    const reads = new JobReads({ store: harness.store, clock: harness.clock, states: harness.core.states });
    const grant = new GrantAuthority(randomBytes(32), 'http://test');
    const client = grant.verify(grant.mint('client', ['types image']).token, harness.clock.now());
    expect((await reads.list(client, { limit: 10 })).jobs).toEqual([expect.objectContaining({ id: job.id, status: 'succeeded', result: { y: [2] } })]);
    expect(await reads.counts()).toEqual({ succeeded: 1 });
    expect(stored(job.id)).toMatchObject({ status: 'succeeded', result: { y: [2] }, attemptHost: 'laptop', finishedAt: harness.clock.now() });
    await harness.settle();
    expect(laptop.of('ack').flatMap((ack) => ack.jobIds)).toEqual([job.id]);
  });

  it('an end written after the turn is acknowledged once that write is committed', async () => {
    const { laptop, job } = await oneDispatched();
    harness.core.intake.done(laptop.session, { type: 'done', jobId: job.id, batchId: laptop.of('run')[0]!.batchId, artifacts: [], result: 1, timings });
    await new Promise((resolve) => setImmediate(resolve));
    // Written, in a transaction not yet committed: the acknowledgement waits for the commit.
    expect(stored(job.id)).toMatchObject({ status: 'succeeded' });
    expect(laptop.of('ack')).toEqual([]);
    harness.commits.flush();
    await Promise.resolve();
    expect(laptop.of('ack').flatMap((ack) => ack.jobIds)).toEqual([job.id]);
  });
});

describe('deadlines and cancellation', () => {
  it('expires a queued job at its deadline while the only host is busy', async () => {
    harness = new JobCoreHarness();
    const laptop = harness.host('laptop');
    harness.submit();
    const waiting = harness.submit({ deadlineAt: harness.clock.now() + 1_000 });
    await harness.settle();
    expect(laptop.of('run')).toHaveLength(1);
    harness.clock.advance(1_000);
    await harness.settle();
    expect(harness.job(waiting.id)).toMatchObject({ status: 'expired', errorCode: 'DEADLINE_EXCEEDED' });
    expect(harness.scheduler.totalDepth).toBe(0);
  });

  it('a deadline timer that fires a millisecond early (as Node\'s may) waits out the rest: a job never expires before its deadline', async () => {
    harness = new JobCoreHarness({ clock: new FakeClock(1_000_000, { timersFireEarlyMs: 1 }) });
    harness.host('laptop');
    harness.submit();
    const waiting = harness.submit({ deadlineAt: harness.clock.now() + 300 });
    await harness.settle();
    harness.clock.advance(299);
    await harness.settle();
    expect(harness.job(waiting.id)?.status).toBe('queued');
    harness.clock.advance(1);
    await harness.settle();
    expect(harness.job(waiting.id)).toMatchObject({ status: 'expired', finishedAt: 1_000_300 });
  });

  it('cancelling a running job tells its host and frees the slot', async () => {
    harness = new JobCoreHarness();
    const laptop = harness.host('laptop');
    const running = harness.submit();
    const next = harness.submit();
    await harness.settle();
    expect(harness.core.cancellation.cancel(running.id)).toBe(true);
    expect(harness.core.cancellation.cancel(running.id)).toBe(false);
    await harness.settle();
    expect(laptop.of('cancel').map((cancel) => cancel.jobId)).toEqual([running.id]);
    expect(laptop.of('run').map((run) => run.jobs[0]!.id)).toEqual([running.id, next.id]);
  });
});

describe('recovery after a restart', () => {
  it('requeues queued jobs at once; dispatched ones wait for their host to claim them, else are requeued', async () => {
    const store = new SqliteStore(':memory:');
    const before = new JobCoreHarness({ store });
    const laptop = before.host('laptop', { concurrency: 2 });
    const claimed = before.submit();
    await before.settle();
    const orphan = before.submit();
    await before.settle();
    const queued = before.submit();
    await before.settle();
    const [claimedRun] = laptop.of('run');
    before.close();

    harness = new JobCoreHarness({ store, reconnectGraceMs: 5_000 });
    expect(await harness.core.recovery.recover()).toEqual({ queued: 1, orphaned: 2, waiting: 0 });
    const back = harness.host('laptop', { concurrency: 2, join: false });
    harness.core.recovery.claim(back.session, [{ jobId: claimed.id, batchId: claimedRun!.batchId }]);
    harness.hosts.set(back.session);
    await harness.settle();
    expect(back.of('run').map((run) => run.jobs[0]!.id)).toEqual([queued.id]);
    harness.core.intake.done(back.session, { type: 'done', jobId: claimed.id, batchId: claimedRun!.batchId, artifacts: [], timings });
    await harness.settle();
    expect(harness.status(claimed.id)).toBe('succeeded');
    expect(harness.status(orphan.id)).toBe('dispatched');
    harness.clock.advance(5_000);
    await harness.settle();
    expect(harness.status(orphan.id)).toBe('dispatched');
    expect(back.of('run').map((run) => run.jobs[0]!.id)).toEqual([queued.id, orphan.id]);
  });
});

describe('dynamic batching through the dispatcher', () => {
  it('holds a partial batch for maxQueueDelayMs on the fake clock, then sends it', async () => {
    harness = new JobCoreHarness({ policy: { batching: { maxBatchSize: 4, preferredBatchSizes: [4], maxQueueDelayMs: 50 } } });
    const laptop = harness.host('laptop');
    harness.submit();
    harness.submit();
    await harness.settle();
    expect(laptop.of('run')).toHaveLength(0);
    harness.clock.advance(50);
    await harness.settle();
    expect(laptop.of('run').map((run) => run.jobs.length)).toEqual([2]);
  });
});

describe('jobs that wait for their sources', () => {
  /** A job that takes `source`'s first output, stored waiting (what admission does for a source not finished). */
  const dependent = (on: JobCoreHarness, source: string, id: string): JobRecord => {
    const job = on.core.states.create({
      id, type: 'image', model: 'gen', priority: 2, album: 'default', classes: ['image'], hosts: null, status: 'waiting',
      input: { prompt: 'after', seed: 1, width: 8, height: 8, steps: 1, image: { fromJob: source, output: 0 }, strength: 0.6 },
      grantId: 'g', idempotencyKey: null, createdAt: on.clock.now(), deadlineAt: null,
    });
    on.core.sources.watch(job);
    return job;
  };

  it('a source that fails fails its dependent at once, and the dependent\'s own dependent after it, naming each source', async () => {
    harness = new JobCoreHarness();
    const source = harness.submit();
    const middle = dependent(harness, source.id, 'j_middle');
    const last = dependent(harness, middle.id, 'j_last');
    expect(harness.status(middle.id)).toBe('waiting');
    harness.core.cancellation.cancel(source.id);
    await harness.settle();
    expect(harness.job(middle.id)).toMatchObject({ status: 'failed', errorCode: 'SOURCE_FAILED', attempts: 0 });
    expect(harness.job(middle.id)!.errorMessage).toContain(`Source job ${source.id} ended cancelled`);
    expect(harness.job(last.id)).toMatchObject({ status: 'failed', errorCode: 'SOURCE_FAILED' });
    expect(harness.job(last.id)!.errorMessage).toContain(`Source job ${middle.id} ended failed (SOURCE_FAILED`);
  });

  it('a waiting job survives a restart and is settled when its source ends', async () => {
    const store = new SqliteStore(':memory:');
    const before = new JobCoreHarness({ store });
    const source = before.submit();
    const waiting = dependent(before, source.id, 'j_waits');
    await before.settle();
    before.close();

    harness = new JobCoreHarness({ store });
    expect(await harness.core.recovery.recover()).toEqual({ queued: 1, orphaned: 0, waiting: 1 });
    expect(harness.status(waiting.id)).toBe('waiting');
    harness.core.cancellation.expire(source.id);
    await harness.settle();
    expect(harness.job(waiting.id)).toMatchObject({ status: 'failed', errorCode: 'SOURCE_FAILED' });
  });

  it('a waiting job can be cancelled, and its deadline holds', async () => {
    harness = new JobCoreHarness();
    const source = harness.submit();
    const waiting = dependent(harness, source.id, 'j_cancel');
    expect(harness.core.cancellation.cancel(waiting.id)).toBe(true);
    expect(harness.status(waiting.id)).toBe('cancelled');
    expect(harness.status(source.id)).toBe('queued');
  });
});
