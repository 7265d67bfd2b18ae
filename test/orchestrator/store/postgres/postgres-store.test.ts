import pg from 'pg';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { FencedError, openMeshLease, PostgresStore } from '../../../../src/orchestrator/store/postgres/index.js';
import { migratePostgres } from '../../../../src/orchestrator/store/postgres/migrate.js';
import { PG_MIGRATIONS } from '../../../../src/orchestrator/store/postgres/migrations.js';
import { FakeClock } from '../../../helpers/fake-clock.js';
import { postgresForFile } from '../../../helpers/postgres.js';

/**
 * What only a shared store does, against a real PostgreSQL (a throwaway cluster): migrations taken by two
 * orchestrators at once run once; the lease fences a stale holder's writes in the database; writes made while the
 * database restarts wait and are committed, in order, once it is back.
 */
const log = pino({ level: 'silent' });
const cluster = postgresForFile();
let databases = 0;
const fresh = (): Promise<string> => cluster().createDatabase(`only_${++databases}`);
const grant = (id: string) => ({ id, kind: 'client', note: null, caveats: [] as string[] });

describe('the PostgreSQL store', () => {
  it('two orchestrators starting at once on a fresh database migrate it once (an advisory lock)', async () => {
    const url = await fresh();
    const [a, b] = await Promise.all([PostgresStore.open({ url, log }), PostgresStore.open({ url, log })]);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    expect((await client.query('SELECT version FROM schema_migrations ORDER BY version')).rows).toEqual(PG_MIGRATIONS.map(({ version }) => ({ version })));
    await client.end();
    // Each reserved its own block of job numbers: their jobs never share a number.
    const one = a.commits.write(() => a.jobs.insertJob({ id: 'j_a', type: 'image', model: 'gen', priority: 2, album: 'default', classes: ['image'], input: {}, grantId: 'g', idempotencyKey: null, createdAt: 1, deadlineAt: null }));
    const two = b.commits.write(() => b.jobs.insertJob({ id: 'j_b', type: 'image', model: 'gen', priority: 2, album: 'default', classes: ['image'], input: {}, grantId: 'g', idempotencyKey: null, createdAt: 1, deadlineAt: null }));
    expect(one.seq).not.toBe(two.seq);
    await Promise.all([a.commits.durable(), b.commits.durable()]);
    await Promise.all([a.close(), b.close()]);
  });

  it('7 fills in the jobs of the pipelines stored before, and lets go of those whose jobs are all gone', async () => {
    const url = await fresh();
    const pool = new pg.Pool({ connectionString: url });
    await migratePostgres(pool, new FakeClock(0), PG_MIGRATIONS.filter((m) => m.version <= 6));
    await pool.query(`INSERT INTO jobs (seq, id, type, model, status, priority, album, classes, input, grant_id, created_at, updated_at)
      VALUES (1, 'j_kept', 'image', 'gen', 'queued', 2, 'default', '[]', '{}', 'g', 1, 1)`);
    const insert = 'INSERT INTO pipelines (id, grant_id, created_at, steps) VALUES ($1, $2, $3, $4)';
    await pool.query(insert, ['p_half', 'g', 1, JSON.stringify([{ id: 'a', jobId: 'j_kept' }, { id: 'b', jobId: 'j_deleted' }])]);
    await pool.query(insert, ['p_gone', 'g', 1, JSON.stringify([{ id: 'a', jobId: 'j_gone' }])]);
    expect(await migratePostgres(pool, new FakeClock(0))).toEqual(PG_MIGRATIONS.filter((m) => m.version > 6).map((m) => m.version));
    expect((await pool.query('SELECT job_id, pipeline_id FROM pipeline_jobs')).rows).toEqual([{ job_id: 'j_kept', pipeline_id: 'p_half' }]);
    expect((await pool.query('SELECT id FROM pipelines')).rows).toEqual([{ id: 'p_half' }]);
    await pool.end();
  });

  it('a holder whose lease was taken over cannot write: its transaction is refused by the database, and it is told', async () => {
    const url = await fresh();
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    pool.on('error', () => {}); // an idle connection a later test's restart ends
    // The orchestrators' own time, which only says how long a standby has seen a lease run out (the lease's is the database's).
    const clock = new FakeClock();
    const lease = (id: string, holderUrl: string, ttlMs = 60_000) => openMeshLease({ databaseUrl: url, log, clock, id, url: holderUrl, version: 't', ttlMs });
    const first = await lease('o_first', 'http://nas1:7070'); // migrates
    const waiting = await lease('o_second', 'http://nas2:7070');
    expect(await first.tryAcquire()).toBe(true);
    expect(await waiting.tryAcquire()).toBe(false);
    expect(await waiting.holder()).toMatchObject({ holder: 'o_first', url: 'http://nas1:7070', epoch: 1, expired: false });
    const fenced: FencedError[] = [];
    const store = await PostgresStore.open({ url, log, fence: () => first.fence(), onFenced: (error) => fenced.push(error) });
    store.commits.write(() => store.grants.recordGrant(grant('before'), 1));
    await store.commits.durable();
    // The first holder stops renewing (paused, cut off); its lease runs out and the second takes it over.
    await pool.query("UPDATE mesh_lease SET expires_at = now() - interval '1 second'");
    // Seen run out once is not enough (a database back from a restart has every lease run out); half a lease later it is.
    const second = await lease('o_second', 'http://nas2:7070', 200);
    expect(await second.tryAcquire()).toBe(false);
    clock.advance(99);
    expect(await second.tryAcquire()).toBe(false);
    clock.advance(1);
    expect(await second.tryAcquire()).toBe(true);
    expect(second.fence()).toEqual({ holder: 'o_second', epoch: 2 });
    // The first still believes it holds the lease: its late write is refused by the database.
    store.commits.write(() => store.grants.recordGrant(grant('late'), 2));
    await expect(store.commits.durable()).rejects.toBeInstanceOf(FencedError);
    expect(fenced).toHaveLength(1);
    expect(await first.renew()).toBe(false);
    const ids = (await pool.query<{ id: string }>('SELECT id FROM grants ORDER BY id')).rows.map((row) => row.id);
    expect(ids).toEqual(['before']);
    // A lease that ran out but that nobody took is still its holder's: the epoch decides, not the clock.
    await pool.query("UPDATE mesh_lease SET expires_at = now() - interval '1 second'");
    expect(await second.renew()).toBe(true);
    // A lease let go on purpose (a clean shutdown) is taken at the next look.
    await second.release();
    expect(await waiting.tryAcquire()).toBe(true);
    await store.close().catch(() => {});
    await Promise.all([first.close(), waiting.close(), second.close(), pool.end()]);
  });

  it('writes made while PostgreSQL restarts wait, in order, and are committed once it is back; reads wait with them', async () => {
    const url = await fresh();
    const availability: boolean[] = [];
    const store = await PostgresStore.open({ url, log });
    store.commits.write(() => store.grants.recordGrant(grant('g0'), 0));
    await store.commits.durable();
    const restarting = cluster().restart({ downMs: 1500 });
    await new Promise((resolve) => setTimeout(resolve, 300)); // the server is down now
    for (let i = 1; i <= 5; i++) store.commits.write(() => store.grants.recordGrant(grant(`g${i}`), i));
    const committed = store.commits.durable();
    await new Promise((resolve) => setTimeout(resolve, 500));
    availability.push(store.isOpen());
    await restarting;
    await committed;
    availability.push(store.isOpen());
    expect(availability).toEqual([false, true]);
    expect((await store.grants.listGrants({ limit: 10 })).map((record) => record.id).sort()).toEqual(['g0', 'g1', 'g2', 'g3', 'g4', 'g5']);
    await store.close();
  });
});

describe('coalesced writes', () => {
  it('consecutive one-row INSERTs of one text become one INSERT of their rows, in order; anything else is left alone', async () => {
    const { coalesced } = await import('../../../../src/orchestrator/store/postgres/pg-commits.js');
    const insert = (a: number) => ({ text: 'INSERT INTO t (a, b) VALUES ($1, $2) ON CONFLICT DO NOTHING', values: [a, `b${a}`] });
    const update = { text: 'UPDATE t SET b = $1 WHERE a = $2', values: ['x', 1] };
    const literal = { text: "INSERT INTO t (a, b) VALUES ($1, 'fixed')", values: [9] };
    expect(coalesced([insert(1), insert(2), insert(3), update, insert(4), literal])).toEqual([
      { text: 'INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4), ($5, $6) ON CONFLICT DO NOTHING', values: [1, 'b1', 2, 'b2', 3, 'b3'], oneOff: true },
      update, insert(4), literal,
    ]);
  });
});
