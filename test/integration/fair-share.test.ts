import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MeshClient } from '../../src/cli/common/client.js';
import type { AuditView, GrantView, JobView } from '../../src/protocol/api/index.js';
import { removeDir, tempDir, waitFor } from '../helpers/mesh.js';
import { freePort, gpumesh, gpumeshRun, waitHealthy, type Proc } from '../helpers/processes.js';

/**
 * Sharing the mesh between people, through real processes (`gpumesh serve`, then `gpumesh agent`): a lineage's single
 * job overtakes another lineage's backlog, and a grant's caps are refused at submit with 429s that say which cap,
 * what is left and when it refills, on the single and the bulk route, shown by `gpumesh grant show` and audited.
 */
const procs: Proc[] = [];
let data: string;
let url: string;
let admin: MeshClient;

const picture = (prompt: string) => ({ type: 'image', input: { prompt, seed: 1, width: 64, height: 64, steps: 2 } });

async function mint(body: Record<string, unknown>): Promise<{ id: string; token: string }> {
  return admin.request<{ id: string; token: string }>('POST', '/v1/grants', { kind: 'client', ...body });
}

async function post(grant: string, path: string, body: unknown): Promise<{ status: number; headers: Headers; json: any }> {
  const response = await fetch(`${url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${grant}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: response.status, headers: response.headers, json: await response.json() };
}

beforeAll(async () => {
  data = tempDir();
  const port = await freePort();
  url = `http://127.0.0.1:${port}`;
  // No host yet: every job waits in its queue, so the order they leave in is the scheduler's alone.
  procs.push(gpumesh(['serve', '--data', data, '--port', String(port)]));
  await waitHealthy(url);
  admin = new MeshClient(url, readFileSync(join(data, 'admin.grant'), 'utf8').trim());
}, 60_000);

afterAll(async () => {
  for (const proc of procs) await proc.kill('SIGKILL');
  removeDir(data);
});

describe('sharing the mesh', () => {
  it("lineage B's single picture overtakes lineage A's backlog of 40", { timeout: 90_000 }, async () => {
    const a = await mint({ note: 'A' });
    const b = await mint({ note: 'B' });
    // A narrowing of A is A's lineage: its jobs take A's turns, not turns of their own.
    const narrowedA = (await gpumeshRun(['grant', 'narrow', a.token, '--types', 'image'])).stdout.trim();
    const burst = await post(a.token, '/v1/jobs:batch', { jobs: Array.from({ length: 30 }, (_, i) => picture(`A ${i}`)) });
    expect(burst.status).toBe(207);
    const more = await post(narrowedA, '/v1/jobs:batch', { jobs: Array.from({ length: 10 }, (_, i) => picture(`A narrowed ${i}`)) });
    const aIds: string[] = [...burst.json.results, ...more.json.results].map((result: { status: number; id: string }) => {
      expect(result.status).toBe(202);
      return result.id;
    });
    const single = await post(b.token, '/v1/jobs', picture('B alone'));
    expect(single.status).toBe(202);

    const { token: agentGrant } = await admin.request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host: 'box', classes: ['image'] });
    procs.push(gpumesh(['agent', '--url', url, '--host', 'box', '--classes', 'image', '--data', join(data, 'agent')], { GPUMESH_GRANT: agentGrant }));
    const views = await waitFor(async () => {
      const all = await Promise.all([...aIds, single.json.id].map((id) => admin.request<JobView>('GET', `/v1/jobs/${id}`)));
      return all.every((view) => view.status === 'succeeded') ? all : null;
    }, { timeoutMs: 80_000, what: 'every job to succeed' });
    const dispatched = (view: JobView): number => Date.parse(view.attempts[0]!.dispatchedAt);
    const bView = views.at(-1)!;
    const aViews = views.slice(0, -1);
    // B's turn is at the front with A's first job: it leaves in the first batch, whatever its size; before turns it
    // left after all 40.
    const firstBatch = aViews.filter((view) => view.attempts[0]!.batchId === bView.attempts[0]!.batchId).length;
    expect(firstBatch).toBeGreaterThan(0);
    expect(aViews.filter((view) => dispatched(view) < dispatched(bView))).toHaveLength(0);
    expect(aViews.filter((view) => dispatched(view) > dispatched(bView)).length).toBeGreaterThanOrEqual(40 - 4);
  });

  it('refuses past max-queued with a 429 naming the cap, on the single and the bulk route; a narrowing may only lower it', { timeout: 30_000 }, async () => {
    // The agent is connected now: a drained host takes no batch, so the jobs stay queued while they are counted.
    await fetch(`${url}/v1/hosts/box/drain`, { method: 'POST', headers: { authorization: `Bearer ${readFileSync(join(data, 'admin.grant'), 'utf8').trim()}` } });
    await waitFor(async () => (await admin.request<{ hosts: { connected: boolean }[] }>('GET', '/v1/hosts')).hosts.every((host) => !host.connected), { what: 'the host to leave' });
    const capped = await mint({ maxQueued: 3, note: 'capped' });
    const bulk = await post(capped.token, '/v1/jobs:batch', { jobs: Array.from({ length: 5 }, (_, i) => picture(`capped ${i}`)) });
    expect(bulk.json.results.map((result: { status: number }) => result.status)).toEqual([202, 202, 202, 429, 429]);
    const refused = bulk.json.results[3].error;
    expect(refused.code).toBe('QUEUED_CAP_REACHED');
    expect(refused.message).toMatch(/allows 3 jobs of its lineage queued at once \(caveat "max-queued 3"\): 3 are queued, so 0 more fit/);
    expect(refused.details).toMatchObject({ cap: 'max-queued', limit: 3, used: 3, left: 0 });

    const one = await post(capped.token, '/v1/jobs', picture('one more'));
    expect(one.status).toBe(429);
    expect(Number(one.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(one.json.error.details).toMatchObject({ cap: 'max-queued', limit: 3, used: 3, left: 0, retryAfter: Number(one.headers.get('retry-after')) });

    // A narrowing that would raise the cap is refused where it is made, offline and over the API.
    const raised = await gpumeshRun(['grant', 'narrow', capped.token, '--max-queued', '10']);
    expect(raised.code).not.toBe(0);
    expect(raised.output).toMatch(/does not tighten "max-queued 3"/);
    expect((await post(capped.token, '/v1/grants:narrow', { maxQueued: 10 })).status).toBe(400);

    // The cap and its use, in the API's view and in `gpumesh grant show`.
    const view = await admin.request<GrantView>('GET', `/v1/grants/${capped.id}`);
    expect(view.caps).toEqual({ maxQueued: { limit: 3, used: 3, left: 0, refillsAt: null }, deviceSecondsPerDay: null });
    const shown = await gpumeshRun(['grant', 'show', capped.id, '--url', url], { GPUMESH_GRANT: readFileSync(join(data, 'admin.grant'), 'utf8').trim() });
    expect(shown.stdout).toContain('queued   3 of 3 at once (0 left)');

    // One audit entry per request and cap: the bulk's two refusals together, the single one on its own.
    const audit = await admin.request<{ entries: AuditView[] }>('GET', `/v1/audit?grant=${capped.id}&event=request:refused`);
    expect(audit.entries.map((entry) => [entry.code, entry.status, entry.detail?.split(':')[0]])).toEqual([
      ['QUEUED_CAP_REACHED', 429, '1 job refused'], ['QUEUED_CAP_REACHED', 429, '2 jobs refused'],
    ]);
  });

  it('refuses past device-seconds-per-day with when it refills', { timeout: 30_000 }, async () => {
    const spent = await mint({ deviceSecondsPerDay: 0, note: 'no device time' });
    const refused = await post(spent.token, '/v1/jobs', picture('none left'));
    expect(refused.status).toBe(429);
    const midnight = new Date(Math.ceil(Date.now() / 86_400_000) * 86_400_000).toISOString();
    expect(refused.json.error).toMatchObject({
      code: 'DEVICE_TIME_CAP_REACHED',
      details: { cap: 'device-seconds-per-day', limit: 0, used: 0, left: 0, refillsAt: midnight },
    });
    expect(refused.json.error.message).toContain(`it refills at ${midnight}`);
    const retryAfter = Number(refused.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(86_400);
  });
});
