import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { AuditLog } from '../../../src/orchestrator/auth/audit.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { grants, jobs, migrate, MIGRATIONS, openDb, SqliteStore } from '../../../src/orchestrator/store/index.js';

const DAY = 86_400_000;

function setup(retention = { days: 30, maxRows: 1000 }) {
  const store = new SqliteStore(':memory:');
  const { db, commits } = store;
  const clock = new FakeClock(Date.parse('2026-12-02T10:00:00Z'));
  const log = new AuditLog({ store, commits, clock, retention, pruneEveryMs: 60_000 });
  return { db, commits, clock, log };
}

describe('the audit log (fake clock, in-memory store)', () => {
  it('writes through the group commit and reads newest first, page by page', async () => {
    const { db, commits, log, clock } = setup();
    for (let i = 0; i < 5; i++) {
      log.record({ event: 'request:refused', grantId: `g${i}`, route: 'GET /v1/jobs', client: '127.0.0.1', status: 401, code: 'GRANT_EXPIRED' });
      clock.advance(1000);
    }
    // Nothing reaches SQLite outside the open group transaction until it commits.
    expect(db.inTransaction).toBe(true);
    await commits.durable();
    expect(db.inTransaction).toBe(false);
    const first = await log.list({ limit: 3 });
    expect(first.entries.map((entry) => entry.grantId)).toEqual(['g4', 'g3', 'g2']);
    expect(first.entries[0]).toMatchObject({ event: 'request:refused', route: 'GET /v1/jobs', status: 401, code: 'GRANT_EXPIRED', at: '2026-12-02T10:00:04.000Z' });
    const second = await log.list({ limit: 3, cursor: first.nextCursor! });
    expect(second.entries.map((entry) => entry.grantId)).toEqual(['g1', 'g0']);
    expect(second.nextCursor).toBeNull();
    log.close();
  });

  it('prunes entries older than the retention on a timer', async () => {
    const { commits, log, clock } = setup({ days: 2, maxRows: 1000 });
    log.record({ event: 'grant:minted', grantId: 'old' });
    clock.advance(DAY);
    log.record({ event: 'grant:minted', grantId: 'newer' });
    await commits.durable();
    clock.advance(DAY + 60_000); // 'old' is now two days and a minute old; the next timer tick prunes it
    await commits.durable();
    expect((await log.list({ limit: 10 })).entries.map((entry) => entry.grantId)).toEqual(['newer']);
    log.close();
  });

  it('keeps at most maxRows, pruning as it writes so a flood of refusals cannot outgrow the bound', async () => {
    const { commits, log } = setup({ days: 30, maxRows: 100 });
    for (let i = 0; i < 1000; i++) log.record({ event: 'request:refused', grantId: `g${i}`, status: 401, code: 'GRANT_MISSING' });
    await commits.durable();
    const all = (await log.list({ limit: 500 })).entries;
    // Pruned every tenth of maxRows: never more than maxRows plus one tenth.
    expect(all.length).toBeLessThanOrEqual(110);
    expect(all[0]!.grantId).toBe('g999');
    log.prune();
    await commits.durable();
    expect((await log.list({ limit: 500 })).entries).toHaveLength(100);
    log.close();
  });
});

describe('migration 4 on a store from before it', () => {
  it('keeps old grants (without caveats) and old idempotency keys (without request hashes) readable', () => {
    const db = new Database(':memory:');
    expect(migrate(db, MIGRATIONS.filter((migration) => migration.version <= 3))).toEqual([1, 3]);
    db.prepare("INSERT INTO grants (id, kind, note, created_at) VALUES ('g_old', 'client', 'before v4', 1)").run();
    db.prepare(`INSERT INTO jobs (id, type, model, status, priority, album, classes, input, grant_id, idempotency_key, created_at, updated_at)
      VALUES ('j_old', 'image', 'gen', 'queued', 2, 'default', '["image"]', '{"prompt":"x"}', 'g_old', 'k', 1, 1)`).run();
    expect(migrate(db)).toEqual(MIGRATIONS.filter((m) => m.version >= 4).map((m) => m.version));
    expect(grants.getGrant(db, 'g_old')).toMatchObject({ id: 'g_old', caveats: null, revokedAt: null });
    expect(jobs.idempotencyEntry(db, 'g_old', 'k', 0)).toEqual({ id: 'j_old', requestHash: null });
    db.close();
  });
});
