// The job retention at the scale it exists for: a store of finished tensor jobs (every OIP infer is one) beside
// gallery jobs that must stay (each with its blob record) and a thousand blob records nothing names, swept by
// JobRetention as the orchestrator sweeps it, then swept again as every ten minutes once nothing is left to do. Measures the whole sweep, the
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
import { insertArtifact } from '../src/orchestrator/store/sqlite/artifacts.js';
import { recordAttempt } from '../src/orchestrator/store/sqlite/attempts.js';
import { recordBlob } from '../src/orchestrator/store/sqlite/blobs.js';
import { insertJob } from '../src/orchestrator/store/sqlite/jobs.js';
import { SqliteStore } from '../src/orchestrator/store/index.js';
import { systemClock } from '../src/protocol/clock.js';
import { printTable, writeResults } from './lib.js';

const { values } = parseArgs({ options: { jobs: { type: 'string', default: '200000' }, gallery: { type: 'string', default: '10000' }, batch: { type: 'string', default: '500' } } });
const JOBS = Number(values.jobs);
const GALLERY = Number(values.gallery);
const BATCH = Number(values.batch);
const DAY = 86_400_000;
const ORPHANS = 1000;

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
      // Every result has its blob record; a thousand records nothing names (results deleted long ago) wait among them.
      if (i < ORPHANS) recordBlob(db, { digest: `sha256:${'e'.repeat(56)}${i.toString(16).padStart(8, '0')}`, bytes: 1000, mediaType: 'image/png' }, old);
      if (gallery) {
        recordBlob(db, { digest: `sha256:${i.toString(16).padStart(64, '0')}`, bytes: 300_000, mediaType: 'image/png' }, old);
        insertArtifact(db, {
          digest: `sha256:${i.toString(16).padStart(64, '0')}`, jobId: id, type: 'image', model: 'gen', host: 'vm', album: 'default', mediaType: 'image/png',
          bytes: 300_000, width: 512, height: 512, computeMs: 500, totalMs: 700, energyJ: null, createdAt: old,
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

  const backlog = await sweepMeasured(retention);
  // Then the sweep as every ten minutes runs it once the backlog is gone: no job to delete, every blob record looked at.
  const steady = await sweepMeasured(retention);
  const left = await store.jobs.countByStatus();
  await store.close();

  const results = {
    jobs: JOBS, gallery: GALLERY, batch: BATCH, fillMs: Math.round(fillMs), deleted: backlog.swept.jobs, kept: left.succeeded ?? 0,
    orphansFreed: backlog.swept.freed, jobsPerSecond: Math.round(backlog.swept.jobs / (backlog.ms / 1000)),
    backlog: { ms: Math.round(backlog.ms), loopP99Ms: backlog.loopP99Ms, loopMaxMs: backlog.loopMaxMs },
    steady: { ms: Math.round(steady.ms), freed: steady.swept.freed + steady.swept.jobs, loopP99Ms: steady.loopP99Ms, loopMaxMs: steady.loopMaxMs },
  };
  const row = (name: string, measured: typeof backlog, jobsPerSecond: string): string[] => [
    name, String(measured.swept.jobs), String(results.kept), String(measured.swept.freed), `${(measured.ms / 1000).toFixed(2)} s`, jobsPerSecond,
    `${measured.loopP99Ms} ms`, `${measured.loopMaxMs} ms`,
  ];
  printTable(`Job retention: ${JOBS.toLocaleString('en')} finished tensor jobs and ${GALLERY.toLocaleString('en')} gallery jobs, 31 days old, batches of ${BATCH}`,
    ['sweep', 'jobs deleted', 'jobs kept', 'blobs freed', 'took', 'jobs/s', 'event loop held, p99', 'max'],
    [row('the backlog', backlog, String(results.jobsPerSecond)), row('the next (nothing to do)', steady, '-')]);
  if (results.deleted !== JOBS || results.kept !== GALLERY || results.orphansFreed !== ORPHANS || results.steady.freed !== 0) {
    throw new Error(`expected ${JOBS} deleted, ${GALLERY} kept, ${ORPHANS} orphans freed and nothing the second time: ${JSON.stringify(results)}`);
  }
  process.stdout.write(`wrote ${writeResults('retention', results)}\n`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}

/** One sweep: how long it took, what it did, and how long the event loop was held meanwhile. */
async function sweepMeasured(retention: JobRetention) {
  const loop = monitorEventLoopDelay({ resolution: 1 });
  loop.enable();
  const started = performance.now();
  const swept = await retention.sweep();
  const ms = performance.now() - started;
  loop.disable();
  return { swept, ms, loopP99Ms: Math.round(loop.percentile(99) / 1e6), loopMaxMs: Math.round(loop.max / 1e6) };
}
