import { once } from 'node:events';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { narrowGrant } from '../../src/orchestrator/auth/index.js';
import { LINK_CLOSE, LINK_PATH, LINK_PROTOCOL_VERSION, type OrchestratorMessage } from '../../src/protocol/index.js';
import { removeDir, startMesh, waitFor, type RunningMesh } from '../helpers/mesh.js';

/**
 * Grants over the real API of a real `gpumesh up --no-agent` (scripted agents
 * join over the real WebSocket when a test needs hosts): rates shared along a
 * grant's lineage, revocation (routes, open event streams, agent links,
 * restarts), the audit log, and idempotency keys.
 */
let mesh: RunningMesh;

beforeAll(async () => {
  mesh = await startMesh({ args: ['--no-agent'] });
});
afterAll(async () => {
  await mesh?.stop();
  if (mesh) removeDir(mesh.data);
});

interface Answer {
  status: number;
  headers: Headers;
  json: any;
  text: string;
}

async function call(method: string, path: string, grant: string | null = mesh.admin, body?: unknown): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (grant) headers.authorization = `Bearer ${grant}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(`${mesh.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  let json: any = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: response.status, headers: response.headers, json, text };
}

async function mint(body: Record<string, unknown>): Promise<{ id: string; token: string }> {
  const minted = await call('POST', '/v1/grants', mesh.admin, body);
  expect(minted.status, minted.text).toBe(201);
  return minted.json;
}

const image = (prompt: string, extra: Record<string, unknown> = {}) => ({ type: 'image', input: { prompt, width: 8, height: 8, steps: 1 }, ...extra });

/** An open SSE stream: what arrived so far, and whether the server ended it. */
function listen(path: string, grant: string): { text: () => string; ended: Promise<void>; stop: () => void } {
  const controller = new AbortController();
  const chunks: string[] = [];
  const ended = fetch(`${mesh.url}${path}${path.includes('?') ? '&' : '?'}access_token=${encodeURIComponent(grant)}`, { signal: controller.signal })
    .then(async (response) => {
      expect(response.status).toBe(200);
      for await (const chunk of response.body!) chunks.push(Buffer.from(chunk as Uint8Array).toString());
    });
  return { text: () => chunks.join(''), ended, stop: () => controller.abort() };
}

/** An agent that speaks the link protocol over a real WebSocket and does nothing else (it says it loaded what it is asked to). */
class ScriptedAgent {
  readonly socket: WebSocket;
  readonly inbox: OrchestratorMessage[] = [];
  readonly closed: Promise<number>;

  constructor(readonly host: string, token: string) {
    const url = new URL(LINK_PATH, mesh.url);
    url.protocol = 'ws:';
    this.socket = new WebSocket(url, { headers: { authorization: `Bearer ${token}` } });
    this.socket.on('message', (data) => {
      const message = JSON.parse(data.toString()) as OrchestratorMessage;
      // The autoscaler places a replica before it sends batches: answer as an agent that loaded it.
      if (message.type === 'load') {
        this.socket.send(JSON.stringify({ type: 'loaded', model: message.model.name, digest: message.model.digest, device: 'cpu', memoryMB: message.model.memoryMB }));
      }
      this.inbox.push(message);
    });
    this.closed = once(this.socket, 'close').then(([code]) => code as number, () => -1);
    this.socket.on('error', () => {});
    this.socket.once('open', () => this.socket.send(JSON.stringify({
      type: 'hello', protocol: LINK_PROTOCOL_VERSION, host, classes: ['image'], engines: ['onnx'], models: [], inFlight: [],
      devices: [{ id: 'cpu', kind: 'cpu', name: 'scripted', memoryTotalMB: 8192, budgetMB: 4096, usedMB: 0 }], concurrency: 1, version: 'test',
    })));
  }

  runs(): string[] {
    return this.inbox.flatMap((message) => (message.type === 'run' ? message.jobs.map((job) => job.id) : []));
  }
}

describe('revoking an agent grant', () => {
  // First in the file: the scripted agents must find the queue empty (they never finish what they are given).
  it('closes a revoked agent\'s link as refused (4403) and its job fails over to another host', async () => {
    const first = await mint({ kind: 'agent', host: 'first', classes: ['image'] });
    const second = await mint({ kind: 'agent', host: 'second', classes: ['image'] });
    const agents = [new ScriptedAgent('first', first.token), new ScriptedAgent('second', second.token)];
    const grants = { first, second };
    await waitFor(() => agents.every((agent) => agent.inbox.some((message) => message.type === 'welcome')), { what: 'both agents to be welcomed' });
    const job = await call('POST', '/v1/jobs', mesh.admin, image('moves on'));
    const holder = await waitFor(() => agents.find((agent) => agent.runs().includes(job.json.id)), { what: 'a run message' });
    const other = agents.find((agent) => agent !== holder)!;

    expect((await call('DELETE', `/v1/grants/${grants[holder.host as 'first' | 'second'].id}`)).status).toBe(200);
    expect(await holder.closed).toBe(LINK_CLOSE.rejected);
    await waitFor(() => other.runs().includes(job.json.id), { what: 'the job to be dispatched to the other host' });
    const status = await call('GET', '/v1/status');
    expect(status.json.hosts.map((host: { id: string }) => host.id)).toEqual([other.host]);
    // Reconnecting with the revoked grant is refused before the upgrade.
    const retry = new ScriptedAgent(holder.host, grants[holder.host as 'first' | 'second'].token);
    const refused = await new Promise<number>((resolve) => retry.socket.on('unexpected-response', (request, response) => {
      resolve(response.statusCode ?? 0);
      request.destroy();
    }));
    expect(refused).toBe(401);
    other.socket.close();
    await other.closed;
  });
});

describe('rates are shared along a grant\'s lineage (finding 3)', () => {
  it('a grant with rate 2/m is refused on its third job, and so is every offline narrowing of it', async () => {
    const { token } = await mint({ kind: 'client', rate: '2/m' });
    expect((await call('POST', '/v1/jobs', token, image('one'))).status).toBe(202);
    expect((await call('POST', '/v1/jobs', token, image('two'))).status).toBe(202);
    const third = await call('POST', '/v1/jobs', token, image('three'));
    expect(third.status).toBe(429);
    expect(third.json.error.code).toBe('RATE_LIMITED');
    expect(third.json.error.message).toContain('2 jobs per minute');
    const retryAfter = Number(third.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThan(50);
    expect(retryAfter).toBeLessThanOrEqual(60);
    for (const expires of ['10m', '20m', '30m']) {
      const narrowed = narrowGrant(token, [`time-before ${new Date(Date.now() + Number.parseInt(expires, 10) * 60_000).toISOString()}`]);
      const refused = await call('POST', '/v1/jobs', narrowed, image(`narrowed ${expires}`));
      expect(refused.status, `narrowed to ${expires}`).toBe(429);
    }
  });

  it('rate 1/h holds for the hour, not a minute', async () => {
    const { token } = await mint({ kind: 'client', rate: '1/h' });
    expect((await call('POST', '/v1/jobs', token, image('hourly'))).status).toBe(202);
    const again = await call('POST', '/v1/jobs', token, image('hourly again'));
    expect(again.status).toBe(429);
    expect(Number(again.headers.get('retry-after'))).toBeGreaterThan(3500);
  });
});

describe('idempotency keys (finding 8)', () => {
  it('the same request gets its job back; another request with the key is 422 and learns nothing about the job', async () => {
    const { token } = await mint({ kind: 'client' });
    const body = image('idempotent', { idempotencyKey: 'order-1' });
    const first = await call('POST', '/v1/jobs', token, body);
    expect(first.status).toBe(202);
    // Key order in the body does not matter: requests are compared by a canonical hash.
    const again = await call('POST', '/v1/jobs', token, { idempotencyKey: 'order-1', input: { steps: 1, height: 8, width: 8, prompt: 'idempotent' }, type: 'image' });
    expect(again.status).toBe(200);
    expect(again.json.id).toBe(first.json.id);
    expect(again.json.created).toBe(false);

    const changes = [
      image('another prompt', { idempotencyKey: 'order-1' }),
      image('idempotent', { idempotencyKey: 'order-1', priority: 1 }),
      image('idempotent', { idempotencyKey: 'order-1', album: 'elsewhere' }),
      image('idempotent', { idempotencyKey: 'order-1', timeoutMs: 60_000 }),
      { type: 'tensor', input: { x: Array.from({ length: 64 }, () => 0.5) }, idempotencyKey: 'order-1' },
    ];
    for (const changed of changes) {
      const refused = await call('POST', '/v1/jobs', token, changed);
      expect(refused.status, JSON.stringify(changed)).toBe(422);
      expect(refused.json.error.code).toBe('IDEMPOTENCY_MISMATCH');
      expect(refused.text).not.toContain(first.json.id);
      expect(refused.headers.get('location')).toBeNull();
    }
  });

  it('a narrowing that cannot see the key\'s job cannot get it back: it is refused like any other different request', async () => {
    const { token } = await mint({ kind: 'client' });
    const original = await call('POST', '/v1/jobs', token, image('in the default album', { idempotencyKey: 'shared-key' }));
    expect(original.status).toBe(202);
    const elsewhere = narrowGrant(token, ['albums elsewhere']);
    // The same body lands in its own album (it names none), so it is another request: 422, without the id.
    const sameBody = await call('POST', '/v1/jobs', elsewhere, image('in the default album', { idempotencyKey: 'shared-key' }));
    expect(sameBody.status).toBe(422);
    expect(sameBody.text).not.toContain(original.json.id);
    // Naming the job's album is refused by the albums caveat before any key is looked at.
    const named = await call('POST', '/v1/jobs', elsewhere, image('in the default album', { idempotencyKey: 'shared-key', album: 'default' }));
    expect(named.status).toBe(403);
    expect(named.text).not.toContain(original.json.id);
    // It can read neither the job nor anything about it.
    expect((await call('GET', `/v1/jobs/${original.json.id}`, elsewhere)).status).toBe(404);
    // A key it uses for its own requests works as usual.
    const own = await call('POST', '/v1/jobs', elsewhere, image('its own', { idempotencyKey: 'its-key' }));
    expect(own.status).toBe(202);
    expect((await call('POST', '/v1/jobs', elsewhere, image('its own', { idempotencyKey: 'its-key' }))).json.id).toBe(own.json.id);
  });
});

describe('revocation', () => {
  it('DELETE /v1/grants/:id refuses the grant and every narrowing of it at once, on every route; idempotent; 404 for an unknown id; admin only', async () => {
    const minted = await mint({ kind: 'client', note: 'to revoke' });
    const narrowed = narrowGrant(minted.token, ['types image']);
    const job = await call('POST', '/v1/jobs', narrowed, image('before revocation'));
    expect(job.status).toBe(202);
    expect((await call('DELETE', `/v1/grants/${minted.id}`, narrowed)).status).toBe(403);

    const revoked = await call('DELETE', `/v1/grants/${minted.id}`);
    expect(revoked.status).toBe(200);
    expect(revoked.json).toMatchObject({ id: minted.id, kind: 'client', note: 'to revoke', revokedAt: expect.any(String) });
    for (const grant of [minted.token, narrowed]) {
      for (const [method, path, body] of [['GET', '/v1/jobs'], ['GET', `/v1/jobs/${job.json.id}`], ['POST', '/v1/jobs', image('after')], ['DELETE', `/v1/jobs/${job.json.id}`], ['GET', '/v1/artifacts']] as const) {
        const refused = await call(method, path, grant, body);
        expect(refused.status, `${method} ${path}`).toBe(401);
        expect(refused.json.error.code).toBe('GRANT_REVOKED');
      }
    }
    const again = await call('DELETE', `/v1/grants/${minted.id}`);
    expect(again.status).toBe(200);
    expect(again.json.revokedAt).toBe(revoked.json.revokedAt);
    const unknown = await call('DELETE', '/v1/grants/nosuchgrant');
    expect(unknown.status).toBe(404);
    expect(unknown.json.error.code).toBe('NOT_FOUND');

    const listed = await call('GET', '/v1/grants?limit=500');
    expect(listed.json.grants.find((grant: { id: string }) => grant.id === minted.id)).toMatchObject({
      kind: 'client', note: 'to revoke', caveats: ['kind client'], revokedAt: revoked.json.revokedAt,
    });
  });

  it('ends event streams open on the grant or a narrowing of it, with a grant:ended event', async () => {
    const minted = await mint({ kind: 'client' });
    const job = await call('POST', '/v1/jobs', minted.token, image('a stream to end'));
    const all = listen('/v1/events', narrowGrant(minted.token, ['types image']));
    const one = listen(`/v1/jobs/${job.json.id}/events`, minted.token);
    const other = listen('/v1/events', (await mint({ kind: 'client' })).token);
    await waitFor(() => all.text().includes('retry:') && one.text().includes('event: queued') && other.text().includes('retry:'), { what: 'the streams to open' });
    expect((await call('DELETE', `/v1/grants/${minted.id}`)).status).toBe(200);
    await Promise.all([all.ended, one.ended]);
    for (const stream of [all, one]) {
      expect(stream.text()).toContain('event: grant:ended');
      expect(stream.text()).toContain('"code":"GRANT_REVOKED"');
    }
    // Another grant's stream stays open.
    expect(other.text()).not.toContain('grant:ended');
    other.stop();
    await other.ended.catch(() => {});
  });

});

describe('the audit log', () => {
  it('records grants minted and revoked, refused requests with the failing caveat, and admin actions; newest first; admin only', async () => {
    const minted = await mint({ kind: 'client', types: ['tensor'], note: 'audited' });
    const refused = await call('POST', '/v1/jobs', minted.token, image('refused'));
    expect(refused.status).toBe(403);
    expect((await call('GET', '/v1/jobs', null)).status).toBe(401);
    await call('DELETE', `/v1/grants/${minted.id}`);
    expect((await call('GET', '/v1/jobs', minted.token)).status).toBe(401);
    expect((await call('GET', '/v1/audit', minted.token)).status).toBe(401);
    const client = await mint({ kind: 'client' });
    expect((await call('GET', '/v1/audit', client.token)).json.error.message).toContain('kind client');

    const admin = await call('GET', '/v1/grants?limit=500');
    const adminId = admin.json.grants.find((grant: { note: string | null }) => grant.note === 'admin.grant').id as string;
    const page = await call('GET', '/v1/audit?limit=20');
    expect(page.status).toBe(200);
    const entries = page.json.entries as { at: string; event: string; grantId: string | null; actor: string | null; route: string | null; client: string | null; status: number | null; code: string | null; detail: string | null }[];
    const times = entries.map((entry) => Date.parse(entry.at));
    expect([...times].sort((a, b) => b - a)).toEqual(times);
    expect(entries).toEqual(expect.arrayContaining([
      expect.objectContaining({ event: 'grant:minted', grantId: minted.id, actor: adminId, route: 'POST /v1/grants', client: '127.0.0.1', detail: expect.stringContaining('kind client; types tensor') }),
      expect.objectContaining({ event: 'request:refused', grantId: minted.id, route: 'POST /v1/jobs', status: 403, code: 'GRANT_DENIED', detail: expect.stringContaining('caveat "types tensor" failed') }),
      expect.objectContaining({ event: 'request:refused', grantId: null, route: 'GET /v1/jobs', status: 401, code: 'GRANT_MISSING', client: '127.0.0.1' }),
      expect.objectContaining({ event: 'grant:revoked', grantId: minted.id, actor: adminId, route: `DELETE /v1/grants/${minted.id}` }),
      expect.objectContaining({ event: 'request:refused', grantId: minted.id, route: 'GET /v1/jobs', status: 401, code: 'GRANT_REVOKED' }),
      expect.objectContaining({ event: 'request:refused', grantId: client.id, route: 'GET /v1/audit', status: 403, code: 'GRANT_DENIED' }),
      expect.objectContaining({ event: 'admin:action', actor: adminId, route: 'GET /v1/grants', detail: 'listed grants' }),
    ]));
    const next = await call('GET', `/v1/audit?limit=20&cursor=${page.json.nextCursor}`);
    expect(Date.parse(next.json.entries[0].at)).toBeLessThanOrEqual(times.at(-1)!);
  });
});

describe('across a restart', () => {
  it('revocations, grant records and the audit log persist', async () => {
    const minted = await mint({ kind: 'client', note: 'revoked before the restart' });
    await call('DELETE', `/v1/grants/${minted.id}`);
    const kept = await mint({ kind: 'client' });
    await mesh.stop();
    mesh = await startMesh({ data: mesh.data, args: ['--no-agent'] });
    const refused = await call('GET', '/v1/jobs', minted.token);
    expect(refused.status).toBe(401);
    expect(refused.json.error.code).toBe('GRANT_REVOKED');
    expect((await call('GET', '/v1/jobs', kept.token)).status).toBe(200);
    const listed = await call('GET', '/v1/grants?limit=500');
    expect(listed.json.grants.find((grant: { id: string }) => grant.id === minted.id).revokedAt).toEqual(expect.any(String));
    const audit = await call('GET', '/v1/audit?limit=500');
    expect(audit.json.entries).toEqual(expect.arrayContaining([expect.objectContaining({ event: 'grant:revoked', grantId: minted.id })]));
  });
});
