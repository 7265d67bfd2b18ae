// The job retention at the scale it exists for: a store of finished tensor jobs (every OIP infer is one) beside
// gallery jobs that must stay, swept by JobRetention as the orchestrator sweeps it. Measures the whole sweep, the
// jobs deleted per second, and the longest the event loop was held (SQLite's writes and reads are synchronous: a
// batch must not stall the server). Prints a table and writes bench/out/retention.json.
//
//   npm run bench:retention [-- --jobs 200000 --gallery 10000 --batch 500]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { DigestLocks } from '../src/orchestrator/blobs/digest-locks.js';
import { InputImages } from '../src/orchestrator/blobs/input-images.js';
import { LocalBlobStore } from '../src/orchestrator/blobs/local-blob-store.js';
import { BlobReclaimer } from '../src/orchestrator/blobs/reclaim.js';
import { JobRetention } from '../src/orchestrator/jobs/retention.js';
import { insertArtifact } from '../src/orchestrator/store/artifacts.js';
import { recordAttempt } from '../src/orchestrator/store/attempts.js';
import { insertJob } from '../src/orchestrator/store/jobs.js';
import { SqliteStore } from '../src/orchestrator/store/index.js';
import { systemClock } from '../src/protocol/clock.js';
import { printTable, writeResults } from './lib.js';

const { values } = parseArgs({ options: { jobs: { type: 'string', default: '200000' }, gallery: { type: 'string', default: '10000' }, batch: { type: 'string', default: '500' } } });
const JOBS = Number(values.jobs);
const GALLERY = Number(values.gallery);
const BATCH = Number(values.batch);
const DAY = 86_400_000;

const dir = mkdtempSync(join(tmpdir(), 'gpumesh-bench-retention-'));
try {
  const store = SqliteStore.inFolder(dir);
  const { db } = store;
  // Every `every`-th job is a gallery job: spread among the tensor jobs, so a sweep walks past the ones it must keep.
  const every = Math.max(1, Math.floor((JOBS + GALLERY) / Math.max(1, GALLERY)));
  const old = Date.now() - 31 * DAY;
  const filled = performance.now();
  db.transaction(() => {
    for (let i = 0; i < JOBS + GALLERY; i++) {
      const gallery = GALLERY > 0 && i % every === 0 && i / every < GALLERY;
      const id = `j_${String(i).padStart(9, '0')}`;
      const record = insertJob(db, {
        id, type: gallery ? 'image' : 'tensor', model: gallery ? 'gen' : 'simple', priority: 2, album: 'default', classes: ['tensor'],
        input: gallery ? { prompt: `picture ${i}` } : { INPUT0: Array.from({ length: 16 }, () => 1) }, grantId: 'g', idempotencyKey: null, createdAt: old, deadlineAt: null,
      });
      db.prepare("UPDATE jobs SET status = 'succeeded', finished_at = ?, result = '{}' WHERE seq = ?").run(old, record.seq);
      recordAttempt(db, { jobId: id, n: 1, host: 'vm', batchId: `b_${i}`, batchSize: 1, status: 'succeeded', dispatchedAt: old, startedAt: old, finishedAt: old, computeMs: 1 }, gallery ? 'gen' : 'simple');
      if (gallery) {
        insertArtifact(db, {
          digest: `sha256:${i.toString(16).padStart(64, '0')}`, jobId: id, type: 'image', model: 'gen', host: 'vm', album: 'default', mediaType: 'image/png',
          bytes: 300_000, width: 512, height: 512, computeMs: 500, totalMs: 700, createdAt: old,
        });
      }
    }
  })();
  const fillMs = performance.now() - filled;
  const { commits } = store;
  const blobs = new LocalBlobStore(join(dir, 'blobs'));
  const locks = new DigestLocks();
  const pictures = new InputImages({ store, commits, clock: systemClock, blobs });
  const reclaimer = new BlobReclaimer({ store, commits, blobs, locks, pictures, modelFile: () => false });
  const retention = new JobRetention({ store, commits, clock: systemClock, reclaimer, days: 30, batch: BATCH });

  const loop = monitorEventLoopDelay({ resolution: 1 });
  loop.enable();
  const started = performance.now();
  const swept = await retention.sweep();
  const sweepMs = performance.now() - started;
  loop.disable();
  const left = await store.jobs.countByStatus();
  await store.close();

  const results = {
    jobs: JOBS, gallery: GALLERY, batch: BATCH, fillMs: Math.round(fillMs), deleted: swept.jobs, kept: left.succeeded ?? 0, sweepMs: Math.round(sweepMs),
    jobsPerSecond: Math.round(swept.jobs / (sweepMs / 1000)), loopMaxMs: Math.round(loop.max / 1e6), loopP99Ms: Math.round(loop.percentile(99) / 1e6),
  };
  printTable(`Job retention: ${JOBS.toLocaleString('en')} finished tensor jobs and ${GALLERY.toLocaleString('en')} gallery jobs, 31 days old, batches of ${BATCH}`,
    ['deleted', 'kept', 'sweep', 'jobs/s', 'event loop held, max', 'p99'],
    [[results.deleted, results.kept, `${(sweepMs / 1000).toFixed(2)} s`, results.jobsPerSecond, `${results.loopMaxMs} ms`, `${results.loopP99Ms} ms`]]);
  if (results.deleted !== JOBS || results.kept !== GALLERY) throw new Error(`expected ${JOBS} deleted and ${GALLERY} kept, got ${results.deleted} and ${results.kept}`);
  process.stdout.write(`wrote ${writeResults('retention', results)}\n`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
