import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { JobEvent, JobView } from '../../src/protocol/api/index.js';
import { meshForFile, waitFor } from '../helpers/mesh.js';

const running = meshForFile();

async function call(method: string, path: string, options: { grant?: string | null; body?: unknown; raw?: string; headers?: Record<string, string> } = {}) {
  const grant = options.grant === undefined ? running().admin : options.grant;
  const headers: Record<string, string> = { ...options.headers };
  if (grant) headers.authorization = `Bearer ${grant}`;
  if (options.body !== undefined || options.raw !== undefined) headers['content-type'] ??= 'application/json';
  const response = await fetch(`${running().url}${path}`, {
    method, headers, body: options.raw ?? (options.body === undefined ? undefined : JSON.stringify(options.body)),
  });
  const text = await response.text();
  let json: any = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: response.status, headers: response.headers, json, text };
}

const image = (input: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({ type: 'image', input: { width: 64, height: 64, steps: 2, ...input }, ...extra });

async function runToEnd(body: unknown, grant = running().admin): Promise<{ job: JobView; events: JobEvent[] }> {
  const submitted = await call('POST', '/v1/jobs', { body, grant });
  expect(submitted.status).toBe(202);
  const events: JobEvent[] = [];
  await running().client(grant).follow(submitted.json.id, (event) => events.push(event));
  const job = await call('GET', `/v1/jobs/${submitted.json.id}`, { grant });
  return { job: job.json, events };
}

describe('health', () => {
  it('healthz and readyz answer without a grant', async () => {
    expect((await call('GET', '/healthz', { grant: null })).status).toBe(200);
    const ready = await call('GET', '/readyz', { grant: null });
    expect(ready.status).toBe(200);
    expect(ready.json.agents).toBe(1);
  });
});

describe('grants on the API', () => {
  it('no grant is 401, a bad one is 401, a grant without the job type is 403 naming the caveat', async () => {
    const none = await call('POST', '/v1/jobs', { grant: null, body: image({ prompt: 'x' }) });
    expect(none.status).toBe(401);
    expect(none.json.error.code).toBe('GRANT_MISSING');
    const bad = await call('GET', '/v1/jobs', { grant: 'garbage' });
    expect(bad.status).toBe(401);
    expect(bad.json.error.code).toBe('GRANT_INVALID');
    const minted = await call('POST', '/v1/grants', { body: { kind: 'client', types: ['tensor'] } });
    expect(minted.status).toBe(201);
    const denied = await call('POST', '/v1/jobs', { grant: minted.json.token, body: image({ prompt: 'x' }) });
    expect(denied.status).toBe(403);
    expect(denied.json.error.code).toBe('GRANT_DENIED');
    expect(denied.json.error.message).toContain('types tensor');
    const client = await call('POST', '/v1/grants', { grant: minted.json.token, body: { kind: 'admin' } });
    expect(client.status).toBe(403);
    expect(client.json.error.message).toContain('kind client');
  });

  it('every /v1 route needs a grant', async () => {
    for (const path of ['/v1/jobs', '/v1/jobs/j_x', '/v1/artifacts', '/v1/status', '/v1/models', '/v1/events', '/v1/jobs/j_x/events', `/v1/blobs/sha256:${'0'.repeat(64)}`]) {
      expect((await call('GET', path, { grant: null })).status, path).toBe(401);
    }
  });
});

describe('bad input gets a clear 4xx', () => {
  it.each([
    ['missing input', { type: 'image' }, 400, 'VALIDATION_FAILED', 'input'],
    ['unknown field', { type: 'image', input: { prompt: 'x' }, colour: 'red' }, 400, 'VALIDATION_FAILED', 'colour'],
    ['empty prompt', image({ prompt: '' }), 400, 'INVALID_INPUT', 'prompt'],
    ['too wide', image({ prompt: 'x', width: 5000 }), 400, 'INVALID_INPUT', 'width'],
    ['unknown type', { type: 'poem', input: {} }, 400, 'UNKNOWN_JOB_TYPE', 'poem'],
    ['unknown model', { type: 'image', model: 'nope', input: { prompt: 'x' } }, 400, 'UNKNOWN_MODEL', 'nope'],
    ['model of another type', { type: 'image', model: 'mlp', input: { prompt: 'x' } }, 400, 'MODEL_TYPE_MISMATCH', 'mlp'],
    ['priority beyond the levels', image({ prompt: 'x' }, { priority: 9 }), 400, 'VALIDATION_FAILED', 'priority'],
  ])('%s', async (_name, body, status, code, mention) => {
    const response = await call('POST', '/v1/jobs', { body });
    expect(response.status).toBe(status);
    expect(response.json.error.code).toBe(code);
    expect(response.json.error.message).toContain(mention);
  });

  it('malformed JSON, a huge body, a wrong content type and unknown routes', async () => {
    const malformed = await call('POST', '/v1/jobs', { raw: '{"type": "image",' });
    expect(malformed.status).toBe(400);
    expect(malformed.json.error.code).toBe('BAD_REQUEST');
    // An ordinary client (fetch) must read the 413 even though its upload is refused half-way.
    const huge = await call('POST', '/v1/jobs', { raw: JSON.stringify(image({ prompt: 'x'.repeat(2 * 1024 * 1024) })) });
    expect(huge.status).toBe(413);
    expect(huge.json.error).toEqual({ code: 'PAYLOAD_TOO_LARGE', message: 'The request body is larger than the limit of 1048576 bytes' });
    const wrongType = await call('POST', '/v1/jobs', { raw: 'prompt=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    expect(wrongType.status).toBe(415);
    const missing = await call('GET', '/v1/nothing');
    expect(missing.status).toBe(404);
    expect(missing.json.error.code).toBe('ROUTE_NOT_FOUND');
    const noJob = await call('GET', '/v1/jobs/j_missing');
    expect(noJob.status).toBe(404);
    expect(noJob.json.error.code).toBe('NOT_FOUND');
    const badDigest = await call('GET', '/v1/blobs/md5:abc');
    expect(badDigest.status).toBe(400);
    expect(badDigest.json.error.code).toBe('BAD_DIGEST');
  });
});

describe('one job, end to end', () => {
  it('streams queued, dispatched, per-step progress and succeeded, and publishes a verified PNG', async () => {
    // 256×256 so the job outlives the agent's report delay (agent/batches/batch-reports.ts): a job that ends sooner sends no progress.
    const { job, events } = await runToEnd(image({ prompt: 'a lighthouse at dusk', seed: 7, steps: 4, width: 256, height: 256 }));
    const types = events.map((event) => event.type);
    expect(types[0]).toBe('queued');
    expect(types).toContain('dispatched');
    expect(types.at(-1)).toBe('succeeded');
    const steps = events.filter((event) => event.type === 'progress').map((event) => (event as { step: number }).step);
    expect(steps).toEqual([1, 2, 3, 4]);
    expect(job.status).toBe('succeeded');
    expect(job.attempts).toHaveLength(1);
    expect(job.attempts[0]).toMatchObject({ n: 1, status: 'succeeded', batchSize: 1 });
    expect(job.attempts[0]!.host).toBeTruthy();
    expect(job.input).toEqual({ prompt: 'a lighthouse at dusk', seed: 7, width: 256, height: 256, steps: 4 });
    const [artifact] = job.artifacts;
    expect(artifact).toMatchObject({ mediaType: 'image/png', width: 256, height: 256, model: 'gen', prompt: 'a lighthouse at dusk' });

    const blob = await fetch(`${running().url}${artifact!.url}`, { headers: { authorization: `Bearer ${running().admin}` } });
    expect(blob.status).toBe(200);
    expect(blob.headers.get('content-type')).toBe('image/png');
    expect(blob.headers.get('etag')).toBe(`"${artifact!.digest}"`);
    expect(blob.headers.get('cache-control')).toContain('immutable');
    const bytes = Buffer.from(await blob.arrayBuffer());
    expect(`sha256:${createHash('sha256').update(bytes).digest('hex')}`).toBe(artifact!.digest);
    expect(bytes.subarray(1, 4).toString()).toBe('PNG');
    const cached = await fetch(`${running().url}${artifact!.url}`, { headers: { authorization: `Bearer ${running().admin}`, 'if-none-match': `"${artifact!.digest}"` } });
    expect(cached.status).toBe(304);
    const viaQuery = await fetch(`${running().url}${artifact!.url}?access_token=${encodeURIComponent(running().admin)}`);
    expect(viaQuery.status).toBe(200);
  });

  it('the same prompt and seed give the same image; another prompt gives another', async () => {
    const first = await runToEnd(image({ prompt: 'red fox', seed: 3 }));
    const again = await runToEnd(image({ prompt: 'red fox', seed: 3 }));
    const other = await runToEnd(image({ prompt: 'blue whale', seed: 3 }));
    expect(again.job.artifacts[0]!.digest).toBe(first.job.artifacts[0]!.digest);
    expect(other.job.artifacts[0]!.digest).not.toBe(first.job.artifacts[0]!.digest);
  });

  it('a client that connects after the end still gets the terminal event', async () => {
    const { job } = await runToEnd(image({ prompt: 'late listener' }));
    const events: JobEvent[] = [];
    const terminal = await running().client().follow(job.id, (event) => events.push(event));
    expect(terminal.type).toBe('succeeded');
    expect((terminal as { artifacts: unknown[] }).artifacts).toHaveLength(1);
  });

  it('the global event stream carries other jobs\' events, filtered by the grant', async () => {
    const tensorOnly = (await call('POST', '/v1/grants', { body: { kind: 'client', types: ['tensor'] } })).json.token as string;
    const listen = (grant: string, query = '') => {
      const controller = new AbortController();
      const seen: string[] = [];
      const done = fetch(`${running().url}/v1/events?access_token=${encodeURIComponent(grant)}${query}`, { signal: controller.signal })
        .then(async (response) => {
          expect(response.headers.get('content-type')).toContain('text/event-stream');
          const decoder = new TextDecoder();
          for await (const chunk of response.body!) seen.push(decoder.decode(chunk as Uint8Array));
        })
        .catch(() => {});
      return { text: () => seen.join(''), stop: async () => { controller.abort(); await done; } };
    };
    const admin = listen(running().admin);
    const narrow = listen(tensorOnly);
    const results = listen(running().admin, '&types=succeeded,failed');
    await waitFor(() => [admin, narrow, results].every((stream) => stream.text().includes('retry:')), { what: 'the streams to open' });
    const { job } = await runToEnd(image({ prompt: 'broadcast' }));
    await waitFor(() => admin.text().includes(`"type":"succeeded","jobId":"${job.id}"`), { what: 'the succeeded event on /v1/events' });
    await waitFor(() => results.text().includes(`"type":"succeeded","jobId":"${job.id}"`), { what: 'the succeeded event on the filtered stream' });
    expect(narrow.text()).not.toContain(job.id);
    // Asked for results only, the stream carried nothing else about the job.
    expect(results.text().match(/^event: .*$/gm)?.filter((line) => line !== 'event: succeeded')).toEqual([]);
    await Promise.all([admin, narrow, results].map((stream) => stream.stop()));
  });

  it('a stream asked for an event type that does not exist is 400 naming it', async () => {
    const answer = await call('GET', '/v1/events?types=succeeded,finished');
    expect(answer.status).toBe(400);
    expect(answer.json.error.message).toContain('"finished"');
  });
});

describe('jobs API', () => {
  it('lists newest first with a cursor and a status filter', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await runToEnd(image({ prompt: `page ${i}` }))).job.id);
    const first = await call('GET', '/v1/jobs?limit=2');
    expect(first.status).toBe(200);
    expect(first.json.jobs.map((job: JobView) => job.id)).toEqual([ids[2], ids[1]]);
    const second = await call('GET', `/v1/jobs?limit=2&cursor=${first.json.nextCursor}`);
    expect(second.json.jobs[0].id).toBe(ids[0]);
    const succeeded = await call('GET', '/v1/jobs?status=succeeded&limit=200');
    expect(succeeded.json.jobs.every((job: JobView) => job.status === 'succeeded')).toBe(true);
    expect((await call('GET', '/v1/jobs?status=bogus')).status).toBe(400);
    expect((await call('GET', '/v1/jobs?cursor=zzz')).status).toBe(400);
    const artifacts = await call('GET', '/v1/artifacts?limit=1');
    expect(artifacts.json.artifacts[0].jobId).toBe(ids[2]);
  });

  it('an idempotency key returns the first job, never a second', async () => {
    const body = image({ prompt: 'once only' }, { idempotencyKey: 'key-1' });
    const first = await call('POST', '/v1/jobs', { body });
    const second = await call('POST', '/v1/jobs', { body });
    expect(first.status).toBe(202);
    expect(second.status).toBe(200);
    expect(second.json.id).toBe(first.json.id);
  });

  it('a bulk submit admits or refuses each job on its own (207, one result per job, in order) in one commit', async () => {
    const narrow = (await call('POST', '/v1/grants', { body: { kind: 'client', types: ['image'] } })).json.token as string;
    const bulk = await call('POST', '/v1/jobs:batch', {
      grant: narrow,
      body: {
        jobs: [
          image({ prompt: 'bulk one', seed: 1 }),
          image({ prompt: 'bulk two', seed: 2 }, { idempotencyKey: 'bulk-key' }),
          image({ seed: 3 }),
          { type: 'tensor', input: { x: [1] } },
          { type: 'image', input: { prompt: 'x' }, colour: 'blue' },
          image({ prompt: 'bulk two', seed: 2 }, { idempotencyKey: 'bulk-key' }),
        ],
      },
    });
    expect(bulk.status).toBe(207);
    const results = bulk.json.results as { status: number; id?: string; error?: { code: string; message: string } }[];
    expect(results.map((result) => result.status)).toEqual([202, 202, 400, 403, 400, 200]);
    expect(results[2]!.error).toMatchObject({ code: 'INVALID_INPUT' });
    expect(results[2]!.error!.message).toContain('prompt');
    expect(results[3]!.error!.code).toBe('GRANT_DENIED');
    expect(results[4]!.error).toMatchObject({ code: 'VALIDATION_FAILED' });
    expect(results[4]!.error!.message).toContain('jobs.4');
    expect(results[5]!.id).toBe(results[1]!.id);
    for (const id of [results[0]!.id!, results[1]!.id!]) expect((await running().client().follow(id)).type).toBe('succeeded');
    expect((await call('POST', '/v1/jobs:batch', { body: { jobs: [] } })).status).toBe(400);
    const tooMany = await call('POST', '/v1/jobs:batch', { body: { jobs: Array.from({ length: 1001 }, () => image({ prompt: 'x' })) } });
    expect(tooMany.status).toBe(400);
    expect(tooMany.json.error.code).toBe('VALIDATION_FAILED');
  });

  it('cancels a queued job; cancelling again is 409', async () => {
    // A long job keeps the only replica busy so the next one stays queued.
    const busy = await call('POST', '/v1/jobs', { body: { type: 'image', input: { prompt: 'busy', width: 512, height: 512, steps: 12 } } });
    const queued = await call('POST', '/v1/jobs', { body: { type: 'image', input: { prompt: 'other shape', width: 128, height: 128, steps: 2 } } });
    const cancelled = await call('DELETE', `/v1/jobs/${queued.json.id}`);
    expect(cancelled.status).toBe(200);
    expect(cancelled.json.status).toBe('cancelled');
    const again = await call('DELETE', `/v1/jobs/${queued.json.id}`);
    expect(again.status).toBe(409);
    expect(again.json.error.code).toBe('JOB_NOT_CANCELLABLE');
    const terminal = await running().client().follow(queued.json.id);
    expect(terminal.type).toBe('cancelled');
    await running().client().follow(busy.json.id);
  });

  it('status shows the host, its device and memory, and queues', async () => {
    const status = await call('GET', '/v1/status');
    expect(status.status).toBe(200);
    expect(status.json.hosts).toHaveLength(1);
    expect(status.json.hosts[0].devices[0]).toMatchObject({ id: 'cpu', kind: 'cpu' });
    expect(status.json.hosts[0].resident.map((model: { model: string }) => model.model)).toContain('gen');
    expect(status.json.queues.gen).toMatchObject({ depth: 0 });
  });

  it('serves an OpenAPI document', async () => {
    const openapi = await call('GET', '/openapi.json', { grant: null });
    expect(openapi.status).toBe(200);
    expect(Object.keys(openapi.json.paths)).toEqual(expect.arrayContaining(['/v1/jobs', '/v1/jobs/{id}', '/v1/blobs/{digest}']));
  });
});

describe('Prefer: wait — the finished job in the submit\'s answer', () => {
  it('answers 200 with the finished job (as GET /v1/jobs/:id) when it ends within the wait', async () => {
    const submitted = await call('POST', '/v1/jobs', { body: image({ prompt: 'at once', seed: 4 }), headers: { prefer: 'wait=30' } });
    expect(submitted.status).toBe(200);
    expect(submitted.headers.get('preference-applied')).toBe('wait=30');
    expect(submitted.headers.get('location')).toBe(`/v1/jobs/${submitted.json.id}`);
    expect(submitted.json).toMatchObject({ status: 'succeeded', type: 'image', artifacts: [{ mediaType: 'image/png' }] });
    // Written once, when it ended (its client waited): read back, it is the same job, its result published.
    const read = await call('GET', `/v1/jobs/${submitted.json.id}`);
    expect(read.json).toEqual(submitted.json);
    const tensor = await call('POST', '/v1/jobs', { body: { type: 'tensor', input: { x: Array.from({ length: 64 }, () => 0.5) } }, headers: { prefer: 'respond-async, wait=10' } });
    expect(tensor.status).toBe(200);
    expect(tensor.json.result).toMatchObject({ y: expect.any(Array) });
  });

  it('answers 202 as without it when the job is still running at the end of the wait', async () => {
    const started = Date.now();
    const submitted = await call('POST', '/v1/jobs', { body: image({ prompt: 'slow', seed: 5, width: 1024, height: 1024, steps: 32 }), headers: { prefer: 'wait=1' } });
    expect(submitted.status).toBe(202);
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    expect(submitted.headers.get('preference-applied')).toBe('wait=1');
    expect(submitted.json).toMatchObject({ id: expect.any(String), created: true, links: { events: `/v1/jobs/${submitted.json.id}/events` } });
    expect((await call('DELETE', `/v1/jobs/${submitted.json.id}`)).status).toBe(200);
  });

  it('a wait that is not whole seconds from 1 to 60 is a 400 naming it, and nothing is submitted', async () => {
    const before = (await call('GET', '/v1/jobs?limit=1')).json.jobs[0]?.id;
    expect(before).toEqual(expect.any(String));
    for (const value of ['0', '61', 'soon', '1.5']) {
      const refused = await call('POST', '/v1/jobs', { body: image({ prompt: 'never' }), headers: { prefer: `wait=${value}` } });
      expect(refused.status, value).toBe(400);
      expect(refused.json.error).toMatchObject({ code: 'BAD_REQUEST' });
      expect(refused.json.error.message).toContain(`Prefer: wait=${value}`);
    }
    expect((await call('GET', '/v1/jobs?limit=1')).json.jobs[0]?.id).toBe(before);
  });
});
