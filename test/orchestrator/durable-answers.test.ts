import { ServerResponse } from 'node:http';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { resolveConfig } from '../../src/orchestrator/config/config.js';
import { Orchestrator } from '../../src/orchestrator/index.js';
import { removeDir, tempDir } from '../helpers/mesh.js';

/**
 * The 202 to a submit (and the 207 to a bulk submit, and the 202 of a `Prefer: wait` that ran out) promises that the job is stored. Writes join a group commit
 * that ends with the loop turn, so the promise holds only if the answer waits for that commit. Checked at the
 * moment each answer is handed to the socket: a second connection to the store, which sees only committed rows,
 * must already find every job the answer names. (A kill -9 test cannot see this: the commit follows within the
 * same loop turn, long before a client could kill the process.)
 */
describe('answers that promise a stored job', () => {
  let data: string | undefined;
  afterEach(() => {
    vi.restoreAllMocks();
    if (data) removeDir(data);
  });

  it('a 202 or a 207 leaves only after the commit that stored its jobs, a waited-for job\'s 202 too', async () => {
    data = tempDir();
    const orchestrator = await Orchestrator.create({
      config: resolveConfig({ server: { port: 0 } }, data), logger: pino({ level: 'silent' }),
    });
    const reader = new Database(join(data, 'store.sqlite'), { readonly: true });
    const committed = reader.prepare('SELECT 1 FROM jobs WHERE id = ?').pluck();
    const answered: string[] = [];
    const uncommitted: string[] = [];
    const end = ServerResponse.prototype.end;
    vi.spyOn(ServerResponse.prototype, 'end').mockImplementation(function (this: ServerResponse, ...args: unknown[]) {
      const [chunk] = args;
      if ((this.statusCode === 202 || this.statusCode === 207) && chunk !== undefined && typeof chunk !== 'function') {
        for (const [, id] of String(chunk).matchAll(/"id":"(j_[^"]+)"/g)) {
          answered.push(id!);
          if (committed.get(id) === undefined) uncommitted.push(id!);
        }
      }
      return (end as (...rest: unknown[]) => ServerResponse).apply(this, args);
    });
    try {
      const url = await orchestrator.listen();
      const headers = { authorization: `Bearer ${orchestrator.adminGrant()}`, 'content-type': 'application/json' };
      const job = (i: number) => ({ type: 'image', input: { prompt: `stored ${i}`, width: 8, height: 8, steps: 1 } });
      // Many at once, so several land in each loop turn (one group commit), and bulk submits among them.
      const singles = Array.from({ length: 40 }, (_, i) => fetch(`${url}/v1/jobs`, { method: 'POST', headers, body: JSON.stringify(job(i)) }));
      const bulks = [0, 1].map((b) => fetch(`${url}/v1/jobs:batch`, {
        method: 'POST', headers, body: JSON.stringify({ jobs: Array.from({ length: 25 }, (_, i) => job(100 + 25 * b + i)) }),
      }));
      // A client that waits for its job's end: the job is written when it ends, or — here, with no agent to run it —
      // when the wait runs out, before the 202 that says it goes on.
      const waited = Array.from({ length: 4 }, (_, i) => fetch(`${url}/v1/jobs`, { method: 'POST', headers: { ...headers, prefer: 'wait=1' }, body: JSON.stringify(job(200 + i)) }));
      const statuses = await Promise.all([...singles, ...bulks, ...waited].map(async (response) => (await response).status));
      expect(statuses).toEqual([...Array<number>(40).fill(202), 207, 207, ...Array<number>(4).fill(202)]);
      expect(answered).toHaveLength(94);
      expect(uncommitted).toEqual([]);
    } finally {
      reader.close();
      await orchestrator.close();
    }
  });
});
