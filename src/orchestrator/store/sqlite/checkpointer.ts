import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type { Db } from './db.js';

/** How often the background connection copies the write-ahead log into the database (ms). */
const CHECKPOINT_INTERVAL_MS = 1_000;

/**
 * WAL checkpoints on a thread of their own. SQLite checkpoints from the
 * committing connection by default, every 1,000 pages of log: the commit that
 * crosses the mark copies the log into the database and fsyncs both, which
 * stalls the event loop for milliseconds — the slowest percentile of every
 * job. Here the orchestrator's connection never checkpoints
 * (`wal_autocheckpoint = 0`) and a second connection, in a worker thread, runs
 * passive checkpoints (they never block the writer) once a second. A file the
 * store cannot share this way (`:memory:`) keeps SQLite's own checkpoints.
 */
export class Checkpointer {
  readonly #worker: Worker;

  private constructor(worker: Worker) {
    this.#worker = worker;
  }

  static start(db: Db, path: string, intervalMs = CHECKPOINT_INTERVAL_MS): Checkpointer | null {
    if (path === ':memory:') return null;
    const sqlite = createRequire(import.meta.url).resolve('better-sqlite3');
    const worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { path, intervalMs, sqlite } });
    worker.unref();
    // Only once the thread runs is the main connection's own checkpointing turned off; if it never starts, SQLite's stays.
    worker.once('online', () => db.pragma('wal_autocheckpoint = 0'));
    worker.on('error', () => db.pragma('wal_autocheckpoint = 1000'));
    return new Checkpointer(worker);
  }

  /** Stop the thread; the caller's connection checkpoints what is left when it closes. */
  async close(): Promise<void> {
    await this.#worker.terminate();
  }
}

// The worker's code: a plain script, so it runs the same from the build and from the sources (tests); better-sqlite3 is
// resolved by the caller, since an evaluated script resolves modules from the working directory.
const WORKER_SOURCE = `
const { workerData } = require('node:worker_threads');
const Database = require(workerData.sqlite);
const db = new Database(workerData.path, { fileMustExist: true });
db.pragma('busy_timeout = 5000');
const checkpoint = db.prepare('PRAGMA wal_checkpoint(PASSIVE)');
setInterval(() => {
  try { checkpoint.run(); } catch { /* busy: the next turn tries again */ }
}, workerData.intervalMs);
`;
