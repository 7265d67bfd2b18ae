import Database from 'better-sqlite3';
import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { artifacts, GroupCommit, migrate, MIGRATIONS, openDb, jobs, UNWAITED_COMMIT_MS, type Db } from '../../../../src/orchestrator/store/index.js';

describe('store migrations', () => {
  it('apply once, in order, and a second run does no harm', () => {
    const db = new Database(':memory:');
    expect(migrate(db)).toEqual(MIGRATIONS.map((m) => m.version));
    jobs.insertJob(db, {
      id: 'j_1', type: 'image', model: 'gen', priority: 2, album: 'default', classes: ['image'], input: { prompt: 'x' },
      grantId: 'g', idempotencyKey: null, createdAt: 1, deadlineAt: null,
    });
    expect(migrate(db)).toEqual([]);
    expect(jobs.getJob(db, 'j_1')?.input).toEqual({ prompt: 'x' });
    expect(jobs.getJob(db, 'j_1')?.prompt).toBe('x');
    const versions = db.prepare('SELECT version FROM schema_migrations').all();
    expect(versions).toHaveLength(MIGRATIONS.length);
  });

  it('19 fills in the jobs of the pipelines stored before, and lets go of those whose jobs are all gone', () => {
    const db = new Database(':memory:');
    migrate(db, MIGRATIONS.filter((m) => m.version <= 18));
    const insert = db.prepare('INSERT INTO pipelines (id, grant_id, created_at, steps) VALUES (?, ?, ?, ?)');
    jobs.insertJob(db, { id: 'j_kept', type: 'image', model: 'gen', priority: 2, album: 'default', classes: ['image'], input: {}, grantId: 'g', idempotencyKey: null, createdAt: 1, deadlineAt: null });
    insert.run('p_half', 'g', 1, JSON.stringify([{ id: 'a', jobId: 'j_kept' }, { id: 'b', jobId: 'j_deleted' }]));
    insert.run('p_gone', 'g', 1, JSON.stringify([{ id: 'a', jobId: 'j_gone' }]));
    expect(migrate(db)).toEqual(MIGRATIONS.filter((m) => m.version > 18).map((m) => m.version));
    expect(db.prepare('SELECT job_id, pipeline_id FROM pipeline_jobs').all()).toEqual([{ job_id: 'j_kept', pipeline_id: 'p_half' }]);
    expect(db.prepare('SELECT id FROM pipelines').all()).toEqual([{ id: 'p_half' }]);
  });

  it('refuses a store from a newer gpumesh', () => {
    const db = new Database(':memory:');
    migrate(db);
    db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, ?, 0)').run('future');
    expect(() => migrate(db)).toThrow(/newer than this gpumesh knows/);
  });

  it('opens in WAL mode, with savepoints journalled in memory (no temporary files)', () => {
    const dir = `/tmp/gpumesh-store-${process.pid}`;
    const db = openDb(`${dir}/store.sqlite`);
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    expect(db.pragma('temp_store', { simple: true })).toBe(2);
    db.close();
  });

  it('is readable by its owner only, with its WAL, even under a permissive umask, and an old world-readable store is fixed', () => {
    const dir = mkdtempSync(join(tmpdir(), 'gpumesh-store-mode-'));
    const previous = process.umask(0o022);
    try {
      const path = join(dir, 'store.sqlite');
      const db = openDb(path);
      jobs.insertJob(db, {
        id: 'j_mode', type: 'image', model: 'gen', priority: 2, album: 'default', classes: ['image'], input: {},
        grantId: 'g', idempotencyKey: null, createdAt: 1, deadlineAt: null,
      });
      for (const file of [path, `${path}-wal`]) expect(statSync(file).mode & 0o777, file).toBe(0o600);
      db.close();
      chmodSync(path, 0o644);
      openDb(path).close();
      expect(statSync(path).mode & 0o777).toBe(0o600);
    } finally {
      process.umask(previous);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('reads a job\'s prompt from its input, in JS and in the gallery\'s query alike: a string prompt, else none', () => {
    const db = new Database(':memory:');
    migrate(db);
    const inputs = { j_text: { prompt: 'a fox in the snow' }, j_number: { prompt: 7 }, j_none: { x: [1, 2] } };
    for (const [id, input] of Object.entries(inputs)) {
      jobs.insertJob(db, {
        id, type: 'image', model: 'gen', priority: 2, album: 'default', classes: ['image'], input, grantId: 'g', idempotencyKey: null, createdAt: 1, deadlineAt: null,
      });
      artifacts.insertArtifact(db, {
        digest: `sha256:${id.padEnd(64, '0').slice(0, 64)}`, jobId: id, type: 'image', model: 'gen', host: 'h', album: 'default', mediaType: 'image/png',
        bytes: 1, width: 1, height: 1, computeMs: 1, totalMs: 1, energyJ: null, createdAt: 1,
      });
    }
    const listed = Object.fromEntries(artifacts.listArtifacts(db, { limit: 10 }).map((artifact) => [artifact.jobId, artifact.prompt]));
    expect(listed).toEqual({ j_text: 'a fox in the snow', j_number: null, j_none: null });
    for (const id of Object.keys(inputs)) expect(jobs.getJob(db, id)?.prompt).toBe(listed[id]);
  });

  it('finishes a job once: a second terminal transition changes nothing', () => {
    const db = new Database(':memory:');
    migrate(db);
    const { seq } = jobs.insertJob(db, {
      id: 'j_2', type: 'image', model: 'gen', priority: 2, album: 'default', classes: ['image'], input: {},
      grantId: 'g', idempotencyKey: null, createdAt: 1, deadlineAt: null,
    });
    expect(jobs.finishJob(db, seq, 'succeeded', 5, { result: { ok: 1 } })).toBe(true);
    expect(jobs.finishJob(db, seq, 'failed', 6, { errorCode: 'X' })).toBe(false);
    const job = jobs.getJob(db, 'j_2')!;
    expect(job.status).toBe('succeeded');
    expect(job.result).toEqual({ ok: 1 });
    expect(job.errorCode).toBeNull();
  });
});

describe('group commit', () => {
  const inserter = (db: Db) => (id: string) => jobs.insertJob(db, {
    id, type: 'image', model: 'gen', priority: 2, album: 'default', classes: ['image'], input: {},
    grantId: 'g', idempotencyKey: null, createdAt: 1, deadlineAt: null,
  });

  it('joins one turn\'s writes into one transaction, undoes only a failed write, and resolves durable() after COMMIT', async () => {
    const db = openDb(`/tmp/gpumesh-group-${process.pid}-${Date.now()}/store.sqlite`);
    const commits = new GroupCommit(db);
    const insert = inserter(db);
    commits.write(() => insert('j_a'));
    expect(() => commits.write(() => { insert('j_b'); throw new Error('boom'); })).toThrow('boom');
    commits.write(() => insert('j_c'));
    expect(db.inTransaction).toBe(true);
    const acked: string[] = [];
    commits.afterCommit(() => acked.push('after'));
    expect(acked).toEqual([]);
    await commits.durable();
    expect(db.inTransaction).toBe(false);
    expect(acked).toEqual(['after']);
    expect(['j_a', 'j_b', 'j_c'].map((id) => jobs.getJob(db, id)?.id ?? null)).toEqual(['j_a', null, 'j_c']);
    commits.afterCommit(() => acked.push('idle'));
    expect(acked).toEqual(['after', 'idle']); // nothing pending: at once
    db.close();
  });

  it('commits writes nobody waits for within UNWAITED_COMMIT_MS, and at the end of the turn once something waits', async () => {
    const db = openDb(`/tmp/gpumesh-group-later-${process.pid}-${Date.now()}/store.sqlite`);
    const commits = new GroupCommit(db);
    const insert = inserter(db);
    const acked: string[] = [];
    commits.writeOne(() => insert('j_unwaited'));
    commits.afterCommit(() => acked.push('unwaited'));
    await new Promise((resolve) => setImmediate(resolve));
    // A turn later it is still open, for more writes to join.
    expect(db.inTransaction).toBe(true);
    const started = performance.now();
    while (db.inTransaction) await new Promise((resolve) => setTimeout(resolve, 1));
    expect(performance.now() - started).toBeLessThan(UNWAITED_COMMIT_MS + 50);
    expect(acked).toEqual(['unwaited']);
    // A write that is waited for commits at the end of its turn, with whatever joined it before.
    commits.writeOne(() => insert('j_first'));
    commits.writeOne(() => insert('j_waited'));
    const waited = commits.durable();
    await new Promise((resolve) => setImmediate(resolve));
    expect(db.inTransaction).toBe(false);
    await waited;
    expect(['j_unwaited', 'j_first', 'j_waited'].map((id) => jobs.getJob(db, id)?.id ?? null)).toEqual(['j_unwaited', 'j_first', 'j_waited']);
    db.close();
  });

  it('a one-statement write needs no savepoint: a statement that fails undoes itself and nothing before it', async () => {
    const db = openDb(`/tmp/gpumesh-group-one-${process.pid}-${Date.now()}/store.sqlite`);
    const commits = new GroupCommit(db);
    const insert = inserter(db);
    commits.writeOne(() => insert('j_one'));
    // The id is unique: the second insert fails as a statement, inside the open transaction.
    expect(() => commits.writeOne(() => insert('j_one'))).toThrow(/UNIQUE/);
    commits.writeOne(() => insert('j_two'));
    await commits.durable();
    expect(['j_one', 'j_two'].map((id) => jobs.getJob(db, id)?.id ?? null)).toEqual(['j_one', 'j_two']);
    db.close();
  });
});
