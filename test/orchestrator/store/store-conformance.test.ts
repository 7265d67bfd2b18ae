import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SqliteStore, type MeshStore, type NewJob } from '../../../src/orchestrator/store/index.js';
import { PostgresStore } from '../../../src/orchestrator/store/postgres/index.js';
import { startPostgres, type RunningPostgres } from '../../helpers/postgres.js';

/**
 * One suite, both stores (the pattern of BullMQ's and graphile-worker's backend tests): every behaviour the
 * orchestrator relies on, against SQLite in a file and PostgreSQL in a throwaway cluster (test/helpers/postgres.ts),
 * each test on a fresh store. A behaviour one store cannot have is said where it differs.
 */
const log = pino({ level: 'silent' });
let postgres: RunningPostgres;
let databases = 0;
const folders: string[] = [];

beforeAll(async () => {
  postgres = await startPostgres();
}, 60_000);
afterAll(async () => {
  await postgres?.stop();
  for (const folder of folders) rmSync(folder, { recursive: true, force: true });
});

interface Backend {
  /** A fresh store. */
  open(): Promise<MeshStore>;
  /** The same store again, as an orchestrator restarted on it would open it. */
  reopen(store: MeshStore): Promise<MeshStore>;
}

const sqlite: Backend = {
  async open() {
    const folder = mkdtempSync(join(tmpdir(), 'gpumesh-conformance-'));
    folders.push(folder);
    return SqliteStore.inFolder(folder);
  },
  async reopen(store) {
    await store.close();
    return new SqliteStore(store.location);
  },
};

const urls = new WeakMap<MeshStore, string>();
const postgresBackend: Backend = {
  async open() {
    const url = await postgres.createDatabase(`conformance_${++databases}`);
    const store = await PostgresStore.open({ url, log });
    urls.set(store, url);
    return store;
  },
  async reopen(store) {
    const url = urls.get(store)!;
    await store.close();
    const again = await PostgresStore.open({ url, log });
    urls.set(again, url);
    return again;
  },
};

let clock = Date.parse('2026-12-05T10:00:00Z');
const tick = (): number => (clock += 1000);

function newJob(fields: Partial<NewJob> = {}): NewJob {
  const id = fields.id ?? `j_${(clock++).toString(36)}`;
  return {
    id, type: 'image', model: 'gen', priority: 2, album: 'default', classes: ['image'], hosts: null,
    input: { prompt: 'A red fox', seed: 1, width: 8, height: 8, steps: 1 }, grantId: 'g1', idempotencyKey: null,
    createdAt: tick(), deadlineAt: null, ...fields,
  };
}

describe.each([['SQLite', sqlite], ['PostgreSQL', postgresBackend]] as const)('the store conformance suite: %s', (_name, backend) => {
  it('stores a job as queued, reads it back and lists jobs newest first by state, type, model (every version), album and page', async () => {
    const store = await backend.open();
    const { commits, jobs } = store;
    const a = commits.write(() => jobs.insertJob(newJob({ album: 'cats' })));
    const b = commits.write(() => jobs.insertJob(newJob({ model: 'ocr@2', type: 'ocr', input: { image: 'sha256:x' } })));
    const c = commits.write(() => jobs.insertJob(newJob()));
    expect(b.seq).toBeGreaterThan(a.seq);
    expect(c.seq).toBeGreaterThan(b.seq);
    expect(a).toMatchObject({ status: 'queued', attempts: 0, prompt: 'A red fox' });
    // A read sees the writes made before it, committed or not yet.
    expect(await jobs.getJob(a.id)).toEqual(a);
    await commits.durable();
    expect(await jobs.getJob('j_nobody')).toBeNull();
    expect((await jobs.listJobs({ limit: 10 })).map((job) => job.id)).toEqual([c.id, b.id, a.id]);
    expect((await jobs.listJobs({ limit: 10, albums: ['cats'] })).map((job) => job.id)).toEqual([a.id]);
    expect((await jobs.listJobs({ limit: 10, types: ['ocr'] })).map((job) => job.id)).toEqual([b.id]);
    expect((await jobs.listJobs({ limit: 10, models: ['ocr'] })).map((job) => job.id)).toEqual([b.id]);
    expect((await jobs.listJobs({ limit: 10, models: [] })).map((job) => job.id)).toEqual([]);
    expect((await jobs.listJobs({ limit: 1, beforeSeq: c.seq })).map((job) => job.id)).toEqual([b.id]);
    expect(await jobs.countByStatus()).toEqual({ queued: 3 });
    expect((await jobs.jobsInStates(['queued'])).map((job) => job.id)).toEqual([a.id, b.id, c.id]);
    await store.close();
  });

  it('moves a job queued → dispatched → running → succeeded, keeping the attempt on the row; a terminal job is left alone', async () => {
    const store = await backend.open();
    const { commits, jobs } = store;
    const job = commits.write(() => jobs.insertJob(newJob()));
    const now = tick();
    commits.write(() => jobs.markDispatched([job.seq], 'b1', 'laptop', now, '["laptop"]'));
    expect(await jobs.getJob(job.id)).toMatchObject({ status: 'dispatched', attempts: 1, batchId: 'b1', batchSize: 1, leaseHost: 'laptop', dispatchedAt: now, route: '["laptop"]' });
    commits.write(() => jobs.markRunning([job.seq], now + 5));
    expect(await jobs.getJob(job.id)).toMatchObject({ status: 'running', startedAt: now + 5 });
    commits.write(() => jobs.finishJob(job.seq, 'succeeded', now + 9, { result: { y: [1, 2] }, attempt: { host: 'laptop', startedAt: now + 5, loadMs: 0, computeMs: 3.5 } }));
    // The conditional update: a late failure of a finished job changes nothing.
    commits.write(() => jobs.finishJob(job.seq, 'failed', now + 20, { errorCode: 'AGENT_LOST', errorMessage: 'late' }));
    // And a dispatch of a job that is not queued moves nothing.
    commits.write(() => jobs.markDispatched([job.seq], 'b2', 'desktop', now + 21));
    await commits.durable();
    expect(await jobs.getJob(job.id)).toMatchObject({
      status: 'succeeded', finishedAt: now + 9, result: { y: [1, 2] }, errorCode: null, attemptHost: 'laptop', computeMs: 3.5, leaseHost: null, batchId: 'b1', attempts: 1,
    });
    await store.close();
  });

  it('dispatches and starts a batch of any size in one go, leaving alone a job of it that is no longer queued', async () => {
    const store = await backend.open();
    const { commits, jobs } = store;
    const batch = Array.from({ length: 5 }, () => commits.write(() => jobs.insertJob(newJob())));
    const gone = batch[3]!;
    const now = tick();
    commits.write(() => jobs.finishJob(gone.seq, 'cancelled', now, { errorCode: 'CANCELLED', errorMessage: 'by its client' }));
    const moved = commits.write(() => jobs.markDispatched(batch.map((job) => job.seq), 'b5', 'laptop', now + 1, 'r'));
    // A store that writes behind cannot tell (its answer is every job asked about); SQLite's reads its rows back.
    expect(moved.has(batch[0]!.seq) && moved.has(batch[4]!.seq)).toBe(true);
    if (store instanceof SqliteStore) expect([...moved].sort((a, b) => a - b)).toEqual(batch.filter((job) => job !== gone).map((job) => job.seq));
    commits.write(() => jobs.markRunning(batch.map((job) => job.seq), now + 2));
    await commits.durable();
    for (const job of batch) {
      expect(await jobs.getJob(job.id)).toMatchObject(job === gone
        ? { status: 'cancelled', attempts: 0, batchId: null }
        : { status: 'running', attempts: 1, batchId: 'b5', batchSize: 5, leaseHost: 'laptop', dispatchedAt: now + 1, startedAt: now + 2, route: 'r' });
    }
    await store.close();
  });

  it('stores a job waiting for its sources, releases it queued with its input resolved once, or ends it; keeps pipelines', async () => {
    const store = await backend.open();
    const { commits, jobs, pipelines } = store;
    const source = commits.write(() => jobs.insertJob(newJob()));
    const reference = { prompt: 'p', image: { fromJob: source.id, output: 0 } };
    const waiting = commits.write(() => jobs.insertJob(newJob({ status: 'waiting', input: reference })));
    const failing = commits.write(() => jobs.insertJob(newJob({ status: 'waiting', input: reference })));
    expect(waiting.status).toBe('waiting');
    await commits.durable();
    expect((await jobs.jobsInStates(['waiting'])).map((job) => job.id)).toEqual([waiting.id, failing.id]);
    const now = tick();
    commits.write(() => jobs.releaseJob(waiting.seq, { prompt: 'p', image: 'sha256:out' }, now));
    // Released once: a second release, or a dispatch of a job still waiting, moves nothing.
    commits.write(() => jobs.releaseJob(waiting.seq, { prompt: 'p', image: 'sha256:other' }, now + 1));
    commits.write(() => jobs.markDispatched([failing.seq], 'b1', 'laptop', now));
    commits.write(() => jobs.finishJob(failing.seq, 'failed', now + 2, { errorCode: 'SOURCE_FAILED', errorMessage: 'Source job …' }));
    const pipeline = { id: 'p_1', grantId: 'g', createdAt: now, steps: [{ id: 'picture', jobId: source.id }, { id: 'clip', jobId: waiting.id }] };
    commits.write(() => pipelines.insertPipeline(pipeline));
    await commits.durable();
    expect(await jobs.getJob(waiting.id)).toMatchObject({ status: 'queued', input: { prompt: 'p', image: 'sha256:out' }, updatedAt: now });
    expect(await jobs.getJob(failing.id)).toMatchObject({ status: 'failed', errorCode: 'SOURCE_FAILED', attempts: 0, finishedAt: now + 2 });
    expect(await pipelines.getPipeline('p_1')).toEqual(pipeline);
    expect(await pipelines.getPipeline('p_2')).toBeNull();
    await store.close();
  });

  it('forgets a pipeline with the last of its jobs, with its callback\'s arming; keeps the caps of a waiting job until it goes', async () => {
    const store = await backend.open();
    const { commits, jobs, pipelines, webhooks } = store;
    const [a, b, c] = [newJob(), newJob(), newJob()].map((job) => commits.write(() => jobs.insertJob(job)));
    const now = tick();
    const caps = { maxQueued: { limit: 3, caveat: 'max-queued 3' }, deviceSecondsPerDay: null };
    commits.write(() => {
      pipelines.insertPipeline({ id: 'p_ab', grantId: 'g', createdAt: now, steps: [{ id: 'a', jobId: a!.id }, { id: 'b', jobId: b!.id }] });
      pipelines.insertPipeline({ id: 'p_c', grantId: 'g', createdAt: now, steps: [{ id: 'c', jobId: c!.id }] });
      webhooks.armPipeline('p_ab', 'https://hooks.example.com/ab', now);
      webhooks.armPipeline('p_c', 'https://hooks.example.com/c', now + 1);
      jobs.recordCaps(b!.id, caps);
    });
    expect(await webhooks.armedPipelines()).toEqual([{ pipelineId: 'p_ab', url: 'https://hooks.example.com/ab' }, { pipelineId: 'p_c', url: 'https://hooks.example.com/c' }]);
    commits.write(() => webhooks.disarmPipeline('p_c'));
    expect(await jobs.capsOf(b!.id)).toEqual(caps);
    expect(await jobs.capsOf(a!.id)).toBeNull();
    // One of p_ab's jobs goes: it stays; the other goes in a later write: it goes, with its arming.
    commits.write(() => { jobs.deleteJobs([a!.id]); pipelines.forgetJobs([a!.id]); });
    expect(await pipelines.getPipeline('p_ab')).not.toBeNull();
    commits.write(() => { jobs.deleteJobs([b!.id, c!.id]); pipelines.forgetJobs([b!.id, c!.id]); });
    expect(await pipelines.getPipeline('p_ab')).toBeNull();
    expect(await pipelines.getPipeline('p_c')).toBeNull();
    expect(await webhooks.armedPipelines()).toEqual([]);
    expect(await jobs.capsOf(b!.id)).toBeNull();
    // Jobs in no pipeline, or none at all: nothing to do.
    commits.write(() => pipelines.forgetJobs(['j_none']));
    commits.write(() => pipelines.forgetJobs([]));
    await store.close();
  });

  it('reserves a job\'s number without writing it, and writes its row later as it stands or finished, in one insert', async () => {
    const store = await backend.open();
    const { commits, jobs } = store;
    const waited = jobs.reserveJob(newJob({ type: 'tensor', model: 'simple', input: { inputs: { a: [1] } } }));
    const failed = jobs.reserveJob(newJob());
    const inFlight = jobs.reserveJob(newJob());
    const after = commits.write(() => jobs.insertJob(newJob()));
    expect([waited.seq, failed.seq, inFlight.seq, after.seq]).toEqual([waited.seq, waited.seq + 1, waited.seq + 2, waited.seq + 3]);
    expect(await jobs.getJob(waited.id)).toBeNull();
    const now = tick();
    Object.assign(waited, { status: 'running', attempts: 1, batchId: 'b1', batchSize: 1, leaseHost: 'laptop', dispatchedAt: now, startedAt: now + 1, route: 'r' });
    commits.write(() => jobs.insertRecord(waited, {
      status: 'succeeded', now: now + 4, outcome: { result: { y: [2] }, attempt: { host: 'laptop', startedAt: now + 1, loadMs: 0, computeMs: 2.5 } },
    }));
    commits.write(() => jobs.insertRecord(failed, { status: 'cancelled', now: now + 5, outcome: { errorCode: 'CANCELLED', errorMessage: 'by its client' } }));
    Object.assign(inFlight, { status: 'dispatched', attempts: 1, batchId: 'b2', batchSize: 1, leaseHost: 'desktop', dispatchedAt: now, updatedAt: now });
    commits.write(() => jobs.insertRecord(inFlight));
    // An input as its client sent it (NewJob.inputJson), in an insert and in a row written later: stored as sent.
    const sentText = '{ "x" : [ 1.50, 2e0 ] }';
    const sent = commits.write(() => jobs.insertJob(newJob({ type: 'tensor', model: 'mlp', input: { x: [1.5, 2] }, inputJson: sentText })));
    const sentLater = jobs.reserveJob(newJob({ type: 'tensor', model: 'mlp', input: { x: [1.5, 2] } }));
    commits.write(() => jobs.insertRecord(sentLater, undefined, sentText));
    await commits.durable();
    for (const job of [sent, sentLater]) expect((await jobs.getJob(job.id))?.input).toEqual({ x: [1.5, 2] });
    expect(await jobs.getJob(waited.id)).toEqual({
      ...waited, status: 'succeeded', updatedAt: now + 4, finishedAt: now + 4, leaseHost: null, result: { y: [2] }, attemptHost: 'laptop', loadMs: 0, computeMs: 2.5,
    });
    expect(await jobs.getJob(failed.id)).toMatchObject({ status: 'cancelled', attempts: 0, finishedAt: now + 5, errorCode: 'CANCELLED', errorMessage: 'by its client' });
    // Written as it stood, it goes on as any job: dispatched, then finished by the conditional update.
    expect(await jobs.getJob(inFlight.id)).toMatchObject({ status: 'dispatched', leaseHost: 'desktop', batchId: 'b2', attempts: 1 });
    commits.write(() => jobs.finishJob(inFlight.seq, 'failed', now + 6, { errorCode: 'AGENT_LOST', errorMessage: 'gone' }));
    await commits.durable();
    expect(await jobs.getJob(inFlight.id)).toMatchObject({ status: 'failed', errorCode: 'AGENT_LOST' });
    expect((await jobs.listJobs({ limit: 10 })).map((job) => job.id)).toEqual([sentLater.id, sent.id, after.id, inFlight.id, failed.id, waited.id]);
    // Numbers go on from the largest written, after a restart too.
    const again = await backend.reopen(store);
    expect(again.commits.write(() => again.jobs.insertJob(newJob())).seq).toBeGreaterThan(after.seq);
    await again.close();
  });

  it('puts a dispatched job back in its queue once; ended attempts are kept once each, oldest first', async () => {
    const store = await backend.open();
    const { commits, jobs, attempts } = store;
    const job = commits.write(() => jobs.insertJob(newJob()));
    const now = tick();
    commits.write(() => jobs.markDispatched([job.seq], 'b1', 'laptop', now));
    commits.write(() => {
      attempts.recordAttempt({ jobId: job.id, n: 1, host: 'laptop', batchId: 'b1', batchSize: 1, status: 'lost', dispatchedAt: now, startedAt: null, finishedAt: now + 1, errorCode: 'AGENT_LOST', errorMessage: 'gone' }, 'gen');
      // The same attempt reported twice is kept once.
      attempts.recordAttempt({ jobId: job.id, n: 1, host: 'laptop', batchId: 'b1', batchSize: 1, status: 'failed', dispatchedAt: now, startedAt: null, finishedAt: now + 2 }, 'gen');
      jobs.requeueJob(job.seq, now + 1);
    });
    commits.write(() => jobs.requeueJob(job.seq, now + 2)); // no longer dispatched: nothing
    await commits.durable();
    expect(await jobs.getJob(job.id)).toMatchObject({ status: 'queued', leaseHost: null, updatedAt: now + 1, attempts: 1 });
    const listed = await attempts.listAttempts(job.id);
    expect(listed).toEqual([expect.objectContaining({ n: 1, host: 'laptop', replica: 'laptop/gen', status: 'lost', error: { code: 'AGENT_LOST', message: 'gone' } })]);
    await store.close();
  });

  it('finds the job an idempotency key names within its window, and frees the key', async () => {
    const store = await backend.open();
    const { commits, jobs } = store;
    const job = commits.write(() => jobs.insertJob(newJob({ idempotencyKey: 'k1', requestHash: 'sha256:h' })));
    await commits.durable();
    expect(await jobs.idempotencyEntry('g1', 'k1', job.createdAt - 1)).toEqual({ id: job.id, requestHash: 'sha256:h' });
    expect(await jobs.idempotencyEntry('g1', 'k1', job.createdAt + 1)).toBeNull();
    expect(await jobs.idempotencyEntry('g2', 'k1', 0)).toBeNull();
    expect((await jobs.getJobByIdempotencyKey('g1', 'k1', 0))?.id).toBe(job.id);
    const second = commits.write(() => {
      jobs.releaseIdempotencyKey(job.id);
      return jobs.insertJob(newJob({ idempotencyKey: 'k1' }));
    });
    await commits.durable();
    expect((await jobs.getJobByIdempotencyKey('g1', 'k1', 0))?.id).toBe(second.id);
    await store.close();
  });

  it('publishes artifacts with their job\'s prompt; lists, searches, scopes and deletes them', async () => {
    const store = await backend.open();
    const { commits, jobs, artifacts } = store;
    const fox = commits.write(() => jobs.insertJob(newJob({ album: 'cats', input: { prompt: 'A RED fox_1' } })));
    const owl = commits.write(() => jobs.insertJob(newJob({ album: 'birds', model: 'gen@2', input: { prompt: 'an owl' } })));
    const tensor = commits.write(() => jobs.insertJob(newJob({ type: 'tensor', model: 'mlp', input: { x: [1] } })));
    const artifact = (job: typeof fox, digest: string) => ({
      digest, jobId: job.id, type: job.type, model: job.model, host: 'laptop', album: job.album, mediaType: 'image/png', bytes: 10, width: 8, height: 8,
      computeMs: 1, totalMs: 2, energyJ: null, createdAt: tick(),
    });
    commits.write(() => {
      artifacts.insertArtifact(artifact(fox, 'sha256:a'));
      artifacts.insertArtifact(artifact(fox, 'sha256:a')); // the same result twice is one
      // The energy a result took, where its GPU reported power.
      artifacts.insertArtifact({ ...artifact(owl, 'sha256:b'), energyJ: 7.25 });
      artifacts.insertArtifact(artifact(tensor, 'sha256:c'));
    });
    expect((await artifacts.artifactsOfJob(fox.id)).map((a) => [a.digest, a.prompt])).toEqual([['sha256:a', 'A RED fox_1']]);
    expect((await artifacts.artifactsOfJob(owl.id)).map((a) => a.energyJ)).toEqual([7.25]);
    expect((await artifacts.artifactsOfJob(fox.id)).map((a) => a.energyJ)).toEqual([null]);
    expect((await artifacts.listArtifacts({ limit: 10 })).map((a) => a.digest)).toEqual(['sha256:c', 'sha256:b', 'sha256:a']);
    expect((await artifacts.listArtifacts({ limit: 10, albums: ['birds'] })).map((a) => a.digest)).toEqual(['sha256:b']);
    expect((await artifacts.listArtifacts({ limit: 10, models: ['gen'] })).map((a) => a.digest)).toEqual(['sha256:b', 'sha256:a']);
    // Search: any case of ASCII letters; %, _ and \ are literal.
    expect((await artifacts.listArtifacts({ limit: 10, prompt: 'red FOX_' })).map((a) => a.digest)).toEqual(['sha256:a']);
    expect((await artifacts.listArtifacts({ limit: 10, prompt: 'red%fox' })).map((a) => a.digest)).toEqual([]);
    const newest = (await artifacts.listArtifacts({ limit: 1 }))[0]!;
    expect((await artifacts.listArtifacts({ limit: 10, beforeSeq: newest.seq })).map((a) => a.digest)).toEqual(['sha256:b', 'sha256:a']);
    expect(await artifacts.digestPublishedIn('sha256:a', { albums: ['cats'], types: null, models: null })).toBe(true);
    expect(await artifacts.digestPublishedIn('sha256:a', { albums: ['birds'], types: null, models: null })).toBe(false);
    expect(await artifacts.digestPublishedIn('sha256:b', { albums: null, types: ['image'], models: ['gen'] })).toBe(true);
    expect(await artifacts.digestPublishedIn('sha256:b', { albums: [], types: null, models: null })).toBe(false);
    expect(await artifacts.albumsWithArtifacts()).toEqual(['birds', 'cats', 'default']);
    commits.write(() => artifacts.deleteArtifactsOfJob(fox.id));
    expect(await artifacts.digestPublished('sha256:a')).toBe(false);
    expect(await artifacts.digestPublished('sha256:b')).toBe(true);
    await store.close();
  });

  it('records blobs, uploads, client blobs, picture verdicts and which running jobs name a picture', async () => {
    const store = await backend.open();
    const { commits, jobs, blobs, clientBlobs, inputImages } = store;
    const job = commits.write(() => jobs.insertJob(newJob({ input: { prompt: 'p', image: 'sha256:pic' } })));
    commits.write(() => {
      blobs.recordBlob({ digest: 'sha256:pic', bytes: 5_000_000_000, mediaType: 'image/png' }, tick());
      blobs.recordBlob({ digest: 'sha256:pic', bytes: 1, mediaType: 'text/html' }, tick()); // the first type stays
      blobs.recordUpload(job.id, 'sha256:out', tick());
      clientBlobs.recordClientBlob('sha256:pic', 'g1', tick());
      inputImages.recordVerdict('sha256:pic', { ok: true, format: 'png', width: 64, height: 32 }, tick());
      inputImages.recordVerdict('sha256:bomb', { ok: false, refusal: 'too many pixels' }, tick());
      inputImages.recordJobInput('sha256:pic', job.id);
    });
    expect(await blobs.getBlob('sha256:pic')).toEqual({ digest: 'sha256:pic', bytes: 5_000_000_000, mediaType: 'image/png' });
    expect(await blobs.getBlob('sha256:none')).toBeNull();
    expect(await blobs.wasUploadedFor(job.id, 'sha256:out')).toBe(true);
    expect(await blobs.wasUploadedFor('j_other', 'sha256:out')).toBe(false);
    expect(await clientBlobs.storedBy('sha256:pic', 'g1')).toBe(true);
    expect(await clientBlobs.storedBy('sha256:pic', 'g2')).toBe(false);
    expect(await inputImages.verdictOf('sha256:pic')).toEqual({ ok: true, format: 'png', width: 64, height: 32 });
    expect(await inputImages.verdictOf('sha256:bomb')).toEqual({ ok: false, refusal: 'too many pixels' });
    expect(await inputImages.verdictOf('sha256:none')).toBeUndefined();
    // Only while the job is dispatched to (or running on) a host may that host read the picture.
    expect(await inputImages.inputOfJobOn('sha256:pic', null)).toBe(false);
    commits.write(() => jobs.markDispatched([job.seq], 'b1', 'laptop', tick()));
    expect(await inputImages.inputOfJobOn('sha256:pic', ['laptop'])).toBe(true);
    expect(await inputImages.inputOfJobOn('sha256:pic', ['desktop'])).toBe(false);
    await store.close();
  });

  it('tells whether any row names a blob (a result, an upload for a job, a client file, a job input); forgets uploads, client files and blob records', async () => {
    const store = await backend.open();
    const { commits, jobs, blobs, clientBlobs, inputImages, artifacts } = store;
    const job = commits.write(() => jobs.insertJob(newJob()));
    const artifact = (digest: string) => ({
      digest, jobId: job.id, type: 'image', model: 'gen', host: 'h', album: 'default', mediaType: 'image/png', bytes: 1, width: 8, height: 8, computeMs: 1, totalMs: 2, energyJ: null, createdAt: tick(),
    });
    commits.write(() => {
      for (const digest of ['sha256:result', 'sha256:upload', 'sha256:client', 'sha256:input', 'sha256:none']) blobs.recordBlob({ digest, bytes: 1, mediaType: 'image/png' }, tick());
      artifacts.insertArtifact(artifact('sha256:result'));
      blobs.recordUpload(job.id, 'sha256:upload', tick());
      blobs.recordUpload(job.id, 'sha256:result', tick());
      clientBlobs.recordClientBlob('sha256:client', 'g1', tick());
      inputImages.recordJobInput('sha256:input', job.id);
    });
    expect(await blobs.blobTotals()).toEqual({ count: 5, bytes: 5 });
    const named = async () => Object.fromEntries(await Promise.all(['result', 'upload', 'client', 'input', 'none'].map(async (name) => [name, await blobs.blobNamed(`sha256:${name}`)])));
    expect(await named()).toEqual({ result: true, upload: true, client: true, input: true, none: false });
    // The job's results deleted and its uploads of them forgotten: nothing names the result any more.
    commits.write(() => {
      artifacts.deleteArtifactsOfJob(job.id);
      blobs.forgetUploads(job.id, ['sha256:result']);
    });
    expect(await named()).toEqual({ result: false, upload: true, client: true, input: true, none: false });
    expect(await blobs.wasUploadedFor(job.id, 'sha256:upload')).toBe(true);
    commits.write(() => blobs.forgetUploads(job.id, []));
    // The client's lineage lets its file go: its record goes, another lineage's of the same bytes stays.
    commits.write(() => clientBlobs.recordClientBlob('sha256:client', 'g2', tick()));
    commits.write(() => clientBlobs.forgetClientBlob('sha256:client', 'g1'));
    expect(await clientBlobs.storedBy('sha256:client', 'g1')).toBe(false);
    expect(await blobs.blobNamed('sha256:client')).toBe(true);
    commits.write(() => clientBlobs.forgetClientBlob('sha256:client', 'g2'));
    expect(await blobs.blobNamed('sha256:client')).toBe(false);
    commits.write(() => {
      inputImages.recordVerdict('sha256:result', { ok: true, format: 'png', width: 8, height: 8 }, tick());
      inputImages.forgetVerdict('sha256:result');
      blobs.deleteBlob('sha256:result');
    });
    expect(await inputImages.verdictOf('sha256:result')).toBeUndefined();
    // A page at a time in digest order, with those no row names: `none` (never named) and `client` (its rows gone).
    const first = await blobs.unnamedBlobs(null, 2);
    expect(first).toEqual({ unnamed: ['sha256:client'], last: 'sha256:input' });
    const second = await blobs.unnamedBlobs(first.last, 2);
    expect(second).toEqual({ unnamed: ['sha256:none'], last: 'sha256:upload' });
    expect(await blobs.unnamedBlobs(second.last, 2)).toEqual({ unnamed: [], last: null });
    expect(await blobs.getBlob('sha256:result')).toBeNull();
    expect(await blobs.getBlob('sha256:upload')).not.toBeNull();
    await store.close();
  });

  it('finds finished jobs past a time that no result names, oldest first, with what only their rows name; deletes them with their rows', async () => {
    const store = await backend.open();
    const { commits, jobs, blobs, inputImages, artifacts, attempts } = store;
    const insert = () => commits.write(() => jobs.insertJob(newJob()));
    const [failed, published, succeeded, recent, queued] = [insert(), insert(), insert(), insert(), insert()];
    const finishedAt = tick();
    commits.write(() => {
      jobs.finishJob(failed.seq, 'failed', finishedAt, { errorCode: 'ENGINE_FAILED', errorMessage: 'x' });
      jobs.finishJob(published.seq, 'succeeded', finishedAt, { result: null });
      jobs.finishJob(succeeded.seq, 'succeeded', finishedAt, { result: { y: [1] } });
      jobs.finishJob(recent.seq, 'cancelled', finishedAt + 10_000);
      artifacts.insertArtifact({
        digest: 'sha256:published', jobId: published.id, type: 'image', model: 'gen', host: 'h', album: 'default', mediaType: 'image/png', bytes: 1,
        width: 8, height: 8, computeMs: 1, totalMs: 2, energyJ: null, createdAt: finishedAt,
      });
      blobs.recordUpload(failed.id, 'sha256:half-done', finishedAt);
      inputImages.recordJobInput('sha256:picture', failed.id);
      inputImages.recordJobInput('sha256:picture', succeeded.id);
      attempts.recordAttempt({
        jobId: failed.id, n: 1, host: 'h', batchId: 'b', batchSize: 1, status: 'failed', dispatchedAt: finishedAt - 5, startedAt: null, finishedAt,
        loadMs: null, route: null, errorCode: 'ENGINE_FAILED', errorMessage: 'x',
      }, 'gen');
    });
    const found = await jobs.prunableJobs(finishedAt + 1, 10);
    expect(found.ids).toEqual([failed.id, succeeded.id]);
    expect(found.digests.sort()).toEqual(['sha256:half-done', 'sha256:picture']);
    expect((await jobs.prunableJobs(finishedAt + 1, 1)).ids).toEqual([failed.id]);
    commits.write(() => jobs.deleteJobs(found.ids));
    expect(await jobs.getJob(failed.id)).toBeNull();
    expect(await jobs.getJob(succeeded.id)).toBeNull();
    expect(await attempts.listAttempts(failed.id)).toEqual([]);
    expect(await blobs.blobNamed('sha256:half-done')).toBe(false);
    expect(await blobs.blobNamed('sha256:picture')).toBe(false);
    for (const kept of [published, recent, queued]) expect(await jobs.getJob(kept.id)).not.toBeNull();
    expect((await jobs.prunableJobs(finishedAt + 1, 10)).ids).toEqual([]);
    await store.close();
  });

  it('records grants and revocations, pages grants newest first; audit entries listed by filter and pruned', async () => {
    const store = await backend.open();
    const { commits, grants, audit } = store;
    const created = tick();
    commits.write(() => {
      for (const id of ['a', 'b', 'c']) grants.recordGrant({ id, kind: 'client', note: id === 'b' ? 'the laptop' : null, caveats: ['action jobs:submit'] }, created);
    });
    commits.write(() => grants.revokeGrant('b', created + 5));
    commits.write(() => grants.revokeGrant('b', created + 9)); // revoked once
    expect(await grants.getGrant('b')).toEqual({ id: 'b', kind: 'client', note: 'the laptop', caveats: ['action jobs:submit'], createdAt: created, revokedAt: created + 5 });
    expect(await grants.revokedGrantIds()).toEqual(['b']);
    const first = await grants.listGrants({ limit: 2 });
    expect(first.map((grant) => grant.id)).toEqual(['c', 'b']);
    expect((await grants.listGrants({ limit: 2, before: { createdAt: created, id: 'b' } })).map((grant) => grant.id)).toEqual(['a']);
    const entry = (event: string, at: number) => ({ at, event, grantId: 'b', actor: 'admin', route: 'POST /v1/grants', client: '127.0.0.1', status: 201, code: null, detail: null });
    commits.write(() => {
      for (let i = 0; i < 5; i++) audit.insertAudit(entry(i % 2 === 0 ? 'grant:minted' : 'request:refused', created + i));
    });
    expect((await audit.listAudit({ limit: 10, event: 'grant:minted' })).map((row) => row.at)).toEqual([created + 4, created + 2, created]);
    const page = await audit.listAudit({ limit: 2 });
    expect((await audit.listAudit({ limit: 10, beforeSeq: page.at(-1)!.seq })).map((row) => row.at)).toEqual([created + 2, created + 1, created]);
    expect((await audit.listAudit({ limit: 10, since: created + 3 })).length).toBe(2);
    commits.write(() => audit.pruneAudit(created + 1, 2));
    expect((await audit.listAudit({ limit: 10 })).map((row) => row.at)).toEqual([created + 4, created + 3]);
    await store.close();
  });

  it('keeps models, their routes and staged uploads', async () => {
    const store = await backend.open();
    const { commits, models, stagedUploads } = store;
    const manifest = { name: 'ocr@1', version: '1', engine: 'onnx', digest: 'sha256:i', bytes: 3, memoryMB: 10, jobTypes: ['ocr'], params: {} };
    commits.write(() => {
      models.insertModel('ocr', { manifest, policy: { retries: 1 }, createdAt: tick() });
      models.insertModel('ocr', { manifest: { ...manifest, name: 'ocr@2', version: '2' }, policy: null, createdAt: tick() });
      models.setModelRoute({ name: 'ocr', pinned: '1', split: null });
      models.setModelRoute({ name: 'ocr', pinned: null, split: { 1: 90, 2: 10 } });
      stagedUploads.insertStagedUpload({ id: 'u_1', grantId: 'g1', total: null, createdAt: 1000 });
      stagedUploads.insertStagedUpload({ id: 'u_2', grantId: 'g1', total: 7_000_000_000, createdAt: 5000 });
      stagedUploads.insertStagedUpload({ id: 'u_3', grantId: 'g2', total: null, createdAt: 5000 });
    });
    // A lineage's open uploads, counted for its cap: its own only.
    expect(await stagedUploads.countStagedUploads('g1')).toBe(2);
    expect(await stagedUploads.countStagedUploads('g2')).toBe(1);
    expect(await stagedUploads.countStagedUploads('g3')).toBe(0);
    expect((await models.listModels()).map(({ model, record }) => [model, record.manifest.version, record.policy])).toEqual([['ocr', '1', { retries: 1 }], ['ocr', '2', null]]);
    expect(await models.listModelRoutes()).toEqual([{ name: 'ocr', pinned: null, split: { 1: 90, 2: 10 } }]);
    commits.write(() => {
      models.deleteModel('ocr', '1');
      models.deleteModelRoute('ocr');
      stagedUploads.deleteStagedUpload('u_1');
    });
    expect((await models.listModels()).map(({ record }) => record.manifest.version)).toEqual(['2']);
    expect(await models.listModelRoutes()).toEqual([]);
    expect(await stagedUploads.getStagedUpload('u_2')).toEqual({ id: 'u_2', grantId: 'g1', total: 7_000_000_000, createdAt: 5000 });
    expect(await stagedUploads.getStagedUpload('u_1')).toBeNull();
    expect(await stagedUploads.countStagedUploads('g1')).toBe(1);
    expect((await stagedUploads.stagedUploadsBefore(6000)).map((upload) => upload.id).sort()).toEqual(['u_2', 'u_3']);
    await store.close();
  });

  it('arms jobs\' callbacks and keeps their deliveries: pending ones oldest first, tries recorded, ended ones pruned', async () => {
    const store = await backend.open();
    const { commits, webhooks } = store;
    const delivery = (id: string, subjectId: string, createdAt: number) => ({
      id, subjectKind: 'job', subjectId, eventType: 'job.succeeded', url: 'https://hooks.example.com/a?t=1', body: '{"type":"job.succeeded"}',
      status: 'pending' as const, attempts: 0, lastStatus: null, lastError: null, nextAt: createdAt, createdAt, triedAt: null, finishedAt: null,
    });
    commits.write(() => {
      webhooks.armJob('j_1', 'https://hooks.example.com/a', 1000);
      webhooks.armJob('j_2', 'https://hooks.example.com/b', 2000);
      webhooks.insertDelivery(delivery('wh_2', 'j_0', 3000));
      webhooks.insertDelivery(delivery('wh_1', 'j_1', 2500));
      webhooks.disarmJob('j_1');
    });
    expect(await webhooks.armedJobs()).toEqual([{ jobId: 'j_2', url: 'https://hooks.example.com/b' }]);
    expect((await webhooks.pendingDeliveries()).map((record) => record.id)).toEqual(['wh_1', 'wh_2']);
    commits.write(() => {
      webhooks.updateDelivery('wh_1', { status: 'pending', attempts: 1, lastStatus: 500, lastError: 'answered 500', nextAt: 4000, triedAt: 3500, finishedAt: null });
      webhooks.updateDelivery('wh_2', { status: 'delivered', attempts: 2, lastStatus: 200, lastError: null, nextAt: null, triedAt: 3600, finishedAt: 3600 });
    });
    expect(await webhooks.deliveriesOf('j_1')).toEqual([{ ...delivery('wh_1', 'j_1', 2500), attempts: 1, lastStatus: 500, lastError: 'answered 500', nextAt: 4000, triedAt: 3500 }]);
    expect((await webhooks.pendingDeliveries()).map((record) => record.id)).toEqual(['wh_1']);
    commits.write(() => webhooks.pruneDeliveries(3601));
    expect(await webhooks.deliveriesOf('j_0')).toEqual([]);
    expect((await webhooks.deliveriesOf('j_1')).map((record) => record.id)).toEqual(['wh_1']);
    await store.close();
  });

  it('a write that throws leaves nothing; a write the database refuses costs only itself', async () => {
    const store = await backend.open();
    const { commits, grants } = store;
    expect(() => commits.write(() => {
      grants.recordGrant({ id: 'half', kind: 'client', note: null, caveats: [] }, tick());
      throw new Error('changed its mind');
    })).toThrow('changed its mind');
    commits.write(() => grants.recordGrant({ id: 'kept', kind: 'client', note: null, caveats: [] }, tick()));
    // A second grant with a taken id: SQLite refuses it as it is written, PostgreSQL when the turn commits.
    try {
      commits.write(() => grants.recordGrant({ id: 'kept', kind: 'agent', note: null, caveats: [] }, tick()));
    } catch (error) {
      expect(store.kind).toBe('sqlite');
      expect((error as Error).message).toMatch(/UNIQUE/);
    }
    commits.write(() => grants.recordGrant({ id: 'after', kind: 'client', note: null, caveats: [] }, tick()));
    await commits.durable();
    expect(await grants.getGrant('half')).toBeNull();
    expect(await grants.getGrant('kept')).toMatchObject({ kind: 'client' });
    expect(await grants.getGrant('after')).not.toBeNull();
    await store.close();
  });

  it('after a restart, everything committed is there and new jobs sort after the old ones', async () => {
    let store = await backend.open();
    const job = store.commits.write(() => store.jobs.insertJob(newJob()));
    store.commits.write(() => store.jobs.markDispatched([job.seq], 'b1', 'laptop', tick()));
    store.commits.write(() => store.grants.recordGrant({ id: 'g', kind: 'admin', note: null, caveats: [] }, tick()));
    await store.commits.durable();
    store = await backend.reopen(store);
    expect(await store.jobs.jobsInStates(['dispatched'])).toEqual([expect.objectContaining({ id: job.id, leaseHost: 'laptop', batchId: 'b1' })]);
    expect(await store.grants.getGrant('g')).not.toBeNull();
    const next = store.commits.write(() => store.jobs.insertJob(newJob()));
    expect(next.seq).toBeGreaterThan(job.seq);
    await store.close();
  });
});
