import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PipelineEndSummary } from '../../src/protocol/api/index.js';
import { removeDir, startMesh, tempDir, waitFor, type RunningMesh } from '../helpers/mesh.js';
import { gpumeshRun } from '../helpers/processes.js';

/**
 * Callbacks through real processes: `gpumesh up` (an orchestrator and its agent) calls a receiver on loopback (which
 * the test's mesh.yaml allows: `webhooks.allow` the receiver's /hooks, `allowLoopback`). The receiver checks every
 * signature the way Standard Webhooks says (written here from the convention, not with gpumesh's code), answers 500
 * to its first two requests, and counts events by `webhook-id`: each job's end arrives, is accepted once, and keeps
 * its id and body across retries — and across a restart of the orchestrator while a delivery is pending. A pipeline's
 * end arrives once, when its last step ends, with every step's digests and the cause — also when the orchestrator
 * restarted while the pipeline ran.
 */

interface Received {
  id: string;
  timestamp: string;
  signature: string;
  path: string;
  body: string;
  answered: number;
}

const received: Received[] = [];
/** How the receiver answers: drops (500) its first `dropFirst` requests, and everything while `down`. */
const behaviour = { dropFirst: 2, down: false };
let server: Server;
let base = '';
const data = tempDir();
let mesh: RunningMesh | undefined;

function verify(secret: string, request: Received): boolean {
  const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64');
  const expected = createHmac('sha256', key).update(`${request.id}.${request.timestamp}.${request.body}`).digest();
  if (Math.abs(Date.now() / 1000 - Number(request.timestamp)) > 300) return false;
  return request.signature.split(' ').some((entry) => {
    const [version, value] = entry.split(',');
    const given = Buffer.from(value ?? '', 'base64');
    return version === 'v1' && given.length === expected.length && timingSafeEqual(given, expected);
  });
}

const header = (headers: IncomingHttpHeaders, name: string): string => String(headers[name] ?? '');

beforeAll(async () => {
  server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const drop = behaviour.down || received.length < behaviour.dropFirst;
      const answered = drop ? 500 : 200;
      received.push({
        id: header(request.headers, 'webhook-id'), timestamp: header(request.headers, 'webhook-timestamp'),
        signature: header(request.headers, 'webhook-signature'), path: request.url ?? '', body: Buffer.concat(chunks).toString('utf8'), answered,
      });
      response.writeHead(answered, { 'content-type': 'text/plain' }).end(drop ? 'not now' : 'ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  mesh = await startMesh({ data, config: config() });
});

afterAll(async () => {
  await mesh?.stop();
  await new Promise((resolve) => server.close(resolve));
  removeDir(data);
});

function config(): Record<string, unknown> {
  return { webhooks: { allow: [`${base}/hooks/`], allowLoopback: true, firstRetryMs: 50, maxRetryMs: 200 } };
}

async function call(method: string, path: string, body?: unknown, grant = mesh!.admin): Promise<{ status: number; json: any }> {
  const response = await fetch(`${mesh!.url}${path}`, {
    method, body: body === undefined ? undefined : JSON.stringify(body),
    headers: { authorization: `Bearer ${grant}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
  });
  return { status: response.status, json: await response.json() };
}

const tensorJob = (extra: Record<string, unknown> = {}) => ({ type: 'tensor', input: { x: Array.from({ length: 64 }, () => 0.25) }, ...extra });

/** The events the receiver accepted (answered 2xx), by webhook-id: each id once, whatever was retried. */
function accepted(): Map<string, Received> {
  const byId = new Map<string, Received>();
  for (const request of received) {
    if (request.answered !== 200) continue;
    expect(byId.has(request.id), `webhook-id ${request.id} accepted twice`).toBe(false);
    byId.set(request.id, request);
  }
  return byId;
}

describe('webhooks', () => {
  it('delivers each job\'s end, signed, at least once with a stable id, through two dropped deliveries; records every delivery for the API and the CLI', async () => {
    // A grant that names a callback: minted by the CLI, which prints the secret once (stderr; stdout is the grant).
    const created = await gpumeshRun(['grant', 'create', '--webhook', `${base}/hooks/grant?token=abc`, '--json'], { GPUMESH_HOME: data, GPUMESH_URL: mesh!.url });
    expect(created.code, created.output).toBe(0);
    const minted = JSON.parse(created.stdout) as { token: string; caveats: string[]; webhook: { url: string; secret: string } };
    expect(minted.caveats).toContain(`webhook ${base}/hooks/grant?token=abc`);
    expect(minted.webhook).toEqual({ url: `${base}/hooks/grant?token=abc`, secret: expect.stringMatching(/^whsec_[A-Za-z0-9+/]{43}=$/) });
    const jobSecret = (await call('POST', '/v1/webhooks/secret', { url: `${base}/hooks/job` })).json as { url: string; secret: string };
    expect(jobSecret.secret).not.toBe(minted.webhook.secret);

    // One job calls back at its grant's URL, one at the URL it names itself.
    const viaGrant = await call('POST', '/v1/jobs', tensorJob(), minted.token);
    const named = await call('POST', '/v1/jobs', tensorJob({ webhook: `${base}/hooks/job` }));
    expect([viaGrant.status, named.status]).toEqual([202, 202]);

    await waitFor(() => accepted().size === 2, { what: 'both events accepted by the receiver' });
    const events = accepted();
    // The first two requests were dropped (500) and tried again: two more requests than events, no event lost.
    expect(received.filter((request) => request.answered === 500)).toHaveLength(2);
    for (const request of received) {
      const secret = request.path.startsWith('/hooks/grant') ? minted.webhook.secret : jobSecret.secret;
      expect(verify(secret, request), `signature of ${request.id} at ${request.path}`).toBe(true);
      // The wrong endpoint's secret does not verify: each URL has its own.
      expect(verify(secret === jobSecret.secret ? minted.webhook.secret : jobSecret.secret, request)).toBe(false);
      // Every try of an event is the same body under the same id.
      expect(request.body).toBe(events.get(request.id)!.body);
    }
    const bodies = [...events.values()].map((request) => ({ path: request.path, body: JSON.parse(request.body) }));
    expect(bodies).toEqual(expect.arrayContaining([
      { path: '/hooks/grant?token=abc', body: expect.objectContaining({ type: 'job.succeeded', data: expect.objectContaining({ id: viaGrant.json.id, status: 'succeeded' }) }) },
      { path: '/hooks/job', body: expect.objectContaining({ type: 'job.succeeded', data: expect.objectContaining({ id: named.json.id, status: 'succeeded' }) }) },
    ]));

    // The records: through the API (the URL's query, which may carry the receiver's token, left out)…
    let tries = 0;
    for (const [job, url] of [[viaGrant.json.id, `${base}/hooks/grant?…`], [named.json.id, `${base}/hooks/job`]] as const) {
      const { status, json } = await call('GET', `/v1/jobs/${job}/webhooks`);
      expect(status).toBe(200);
      expect(json.deliveries).toEqual([expect.objectContaining({ event: 'job.succeeded', url, status: 'delivered', lastStatus: 200, lastError: null, nextAttemptAt: null })]);
      expect(events.has(json.deliveries[0].id)).toBe(true);
      tries += json.deliveries[0].attempts;
    }
    expect(tries).toBe(received.length);
    // …a failed try's record names its answer while it is pending (seen here after the fact: the attempts counted it).
    expect(tries).toBeGreaterThan(2);

    // …and the CLI.
    const shown = await gpumeshRun(['jobs', 'show', named.json.id], { GPUMESH_HOME: data, GPUMESH_URL: mesh!.url });
    expect(shown.code, shown.output).toBe(0);
    expect(shown.stdout).toMatch(new RegExp(`webhook\\s+wh_\\w+ job\\.succeeded → ${base}/hooks/job: delivered after \\d+ tr(y|ies) \\(last answer 200\\)`));
  });

  it('refuses a callback outside the allowlist, whether a job or a grant names it, naming the rule', async () => {
    const outside = await call('POST', '/v1/jobs', tensorJob({ webhook: `${base}/elsewhere` }));
    expect(outside.status).toBe(403);
    expect(outside.json.error.code).toBe('WEBHOOK_NOT_ALLOWED');
    expect(outside.json.error.message).toContain('webhooks.allow');
    const otherHost = await call('POST', '/v1/grants', { kind: 'client', webhook: 'https://hooks.example.com/gpumesh' });
    expect(otherHost.status).toBe(403);
    expect(otherHost.json.error).toMatchObject({ code: 'WEBHOOK_NOT_ALLOWED', message: expect.stringContaining('webhooks.allow') });
    // The grant named: the CLI says the same.
    const cli = await gpumeshRun(['grant', 'create', '--webhook', 'http://10.0.0.7/hooks/'], { GPUMESH_HOME: data, GPUMESH_URL: mesh!.url });
    expect(cli.code).not.toBe(0);
    expect(cli.output).toContain('webhooks.allow');
    // A grant with a callback: its jobs may name no other URL (403 quoting the caveat), and a narrowing may not move it.
    const minted = (await call('POST', '/v1/grants', { kind: 'client', webhook: `${base}/hooks/a` })).json as { token: string };
    const elsewhere = await call('POST', '/v1/jobs', tensorJob({ webhook: `${base}/hooks/b` }), minted.token);
    expect(elsewhere.status).toBe(403);
    expect(elsewhere.json.error).toMatchObject({ code: 'GRANT_DENIED', message: expect.stringContaining(`webhook ${base}/hooks/a`) });
    const narrowed = await call('POST', '/v1/grants:narrow', { webhook: `${base}/hooks/b` }, minted.token);
    expect(narrowed.status).toBe(400);
    expect(narrowed.json.error.message).toMatch(/may not send its jobs' callbacks elsewhere/);
  });

  it('tries a pending delivery again after the orchestrator restarts, under the same id', async () => {
    behaviour.down = true;
    const before = received.length;
    const job = await call('POST', '/v1/jobs', tensorJob({ webhook: `${base}/hooks/restart` }));
    expect(job.status).toBe(202);
    const pending = await waitFor(async () => {
      const { json } = await call('GET', `/v1/jobs/${job.json.id}/webhooks`);
      const delivery = json.deliveries[0];
      return delivery && delivery.attempts >= 1 ? delivery : null;
    }, { what: 'a failed try recorded' });
    expect(pending).toMatchObject({ status: 'pending', lastStatus: 500, lastError: 'answered 500: not now', nextAttemptAt: expect.any(String) });
    await mesh!.stop();
    const triedBefore = received.slice(before).map((request) => request.id);
    expect(new Set(triedBefore)).toEqual(new Set([pending.id]));

    behaviour.down = false;
    mesh = await startMesh({ data, config: config() });
    await waitFor(() => accepted().has(pending.id), { what: 'the pending delivery accepted after the restart' });
    const { json } = await call('GET', `/v1/jobs/${job.json.id}/webhooks`);
    expect(json.deliveries).toEqual([expect.objectContaining({ id: pending.id, status: 'delivered', lastStatus: 200 })]);
    expect(json.deliveries[0].attempts).toBeGreaterThan(pending.attempts);
  });
});

describe('pipeline callbacks', () => {
  const picture = { prompt: 'a lighthouse at dusk', seed: 11, width: 32, height: 32, steps: 2 };
  const atNight = { prompt: 'the same lighthouse at night', seed: 12, image: { fromStep: 'picture', output: 0 }, strength: 0.6 };
  /** Steps long enough to be cancelled while they run. */
  const slowPipeline = (webhook: string) => ({
    webhook,
    steps: [
      { id: 'slow', type: 'image', input: { prompt: 'a long one', width: 1024, height: 1024, steps: 32 } },
      { id: 'after', type: 'image', input: { prompt: 'from the long one', image: { fromStep: 'slow' } } },
    ],
  });
  /** The events accepted at a path, as sent. */
  const bodiesAt = (path: string): { id: string; body: { type: string; data: PipelineEndSummary } }[] =>
    [...accepted().values()].filter((request) => request.path === path).map((request) => ({ id: request.id, body: JSON.parse(request.body) }));
  const stepRunning = (jobId: string) => waitFor(async () => (await call('GET', `/v1/jobs/${jobId}`)).json.status === 'running', { timeoutMs: 30_000, what: `job ${jobId} to run` });

  it('delivers one signed pipeline.succeeded when the last step ends, naming each step\'s job and what it made; recorded for GET /v1/pipelines/:id/webhooks', async () => {
    const submitted = await call('POST', '/v1/pipelines', {
      webhook: `${base}/hooks/pipeline`,
      steps: [{ id: 'picture', type: 'image', input: picture }, { id: 'night', type: 'image', input: atNight }],
    });
    expect(submitted.status, JSON.stringify(submitted.json)).toBe(202);
    const [event] = await waitFor(() => (bodiesAt('/hooks/pipeline').length > 0 ? bodiesAt('/hooks/pipeline') : null), { timeoutMs: 60_000, what: 'the pipeline\'s end' });
    const summary = PipelineEndSummary.parse(event!.body.data);
    expect(event!.body.type).toBe('pipeline.succeeded');
    const view = (await call('GET', `/v1/pipelines/${submitted.json.id}`)).json;
    expect(summary).toMatchObject({ id: submitted.json.id, status: 'succeeded', cause: null, links: { self: `/v1/pipelines/${submitted.json.id}` } });
    expect(summary.steps).toEqual(view.steps.map((step: any) => ({
      id: step.id, jobId: step.job.id, type: 'image', model: step.job.model, status: 'succeeded', error: null,
      artifacts: step.job.artifacts.map((artifact: any) => ({ digest: artifact.digest, mediaType: artifact.mediaType })),
    })));
    // The night picture started from the first step's output, by digest.
    expect(view.steps[1].job.input.image).toBe(summary.steps[0]!.artifacts[0]!.digest);
    const { secret } = (await call('POST', '/v1/webhooks/secret', { url: `${base}/hooks/pipeline` })).json as { secret: string };
    for (const request of received.filter((one) => one.path === '/hooks/pipeline')) expect(verify(secret, request)).toBe(true);

    const deliveries = await call('GET', `/v1/pipelines/${submitted.json.id}/webhooks`);
    expect(deliveries.status).toBe(200);
    expect(deliveries.json.deliveries).toEqual([expect.objectContaining({ id: event!.id, event: 'pipeline.succeeded', url: `${base}/hooks/pipeline`, status: 'delivered', lastStatus: 200 })]);
    // The steps named no callback of their own: their ends are the pipeline's event alone.
    expect((await call('GET', `/v1/jobs/${summary.steps[1]!.jobId}/webhooks`)).json.deliveries).toEqual([]);
    // Another lineage does not learn the pipeline exists.
    const other = (await call('POST', '/v1/grants', { kind: 'client' })).json as { token: string };
    expect((await call('GET', `/v1/pipelines/${submitted.json.id}/webhooks`, undefined, other.token)).status).toBe(404);
    // Once: nothing more comes for it.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(received.filter((request) => request.path === '/hooks/pipeline' && request.answered === 200)).toHaveLength(1);
  }, 90_000);

  it('a pipeline cancelled mid-way ends as pipeline.cancelled, its cause the step that was running', async () => {
    const submitted = await call('POST', '/v1/pipelines', slowPipeline(`${base}/hooks/cancelled`));
    expect(submitted.status, JSON.stringify(submitted.json)).toBe(202);
    const [slow, after] = submitted.json.steps as { jobId: string }[];
    await stepRunning(slow!.jobId);
    expect((await call('DELETE', `/v1/pipelines/${submitted.json.id}`)).status).toBe(200);
    const [event] = await waitFor(() => (bodiesAt('/hooks/cancelled').length > 0 ? bodiesAt('/hooks/cancelled') : null), { what: 'the cancelled pipeline\'s end' });
    expect(event!.body.type).toBe('pipeline.cancelled');
    expect(event!.body.data).toMatchObject({
      status: 'cancelled',
      steps: [{ id: 'slow', jobId: slow!.jobId, status: 'cancelled', artifacts: [] }, { id: 'after', jobId: after!.jobId, status: 'cancelled', artifacts: [] }],
      cause: { step: 'slow', jobId: slow!.jobId, status: 'cancelled' },
    });
  }, 60_000);

  it('a grant\'s callback hears its pipeline\'s end besides each step\'s; a pipeline may name no URL the allowlist or its grant refuses', async () => {
    const outside = await call('POST', '/v1/pipelines', { webhook: `${base}/elsewhere`, steps: [{ id: 'picture', type: 'image', input: picture }] });
    expect(outside.status).toBe(403);
    expect(outside.json.error).toMatchObject({ code: 'WEBHOOK_NOT_ALLOWED', message: expect.stringContaining('webhooks.allow') });
    const malformed = await call('POST', '/v1/pipelines', { webhook: 'not a url', steps: [{ id: 'picture', type: 'image', input: picture }] });
    expect(malformed.status).toBe(400);
    const minted = (await call('POST', '/v1/grants', { kind: 'client', webhook: `${base}/hooks/lineage` })).json as { token: string };
    const elsewhere = await call('POST', '/v1/pipelines', { webhook: `${base}/hooks/b`, steps: [{ id: 'picture', type: 'image', input: picture }] }, minted.token);
    expect(elsewhere.status).toBe(403);
    expect(elsewhere.json.error).toMatchObject({ code: 'GRANT_DENIED', message: expect.stringContaining(`webhook ${base}/hooks/lineage`) });
    // Nothing of the refused pipelines was admitted.
    expect((await call('GET', '/v1/jobs?status=waiting,queued,dispatched,running')).json.jobs).toEqual([]);

    const submitted = await call('POST', '/v1/pipelines', { steps: [{ id: 'picture', type: 'image', input: picture }, { id: 'night', type: 'image', input: atNight }] }, minted.token);
    expect(submitted.status).toBe(202);
    const events = await waitFor(() => {
      const heard = bodiesAt('/hooks/lineage');
      return heard.length === 3 ? heard : null;
    }, { timeoutMs: 60_000, what: 'two job events and one pipeline event at the grant\'s callback' });
    expect(events.map((event) => event.body.type).sort()).toEqual(['job.succeeded', 'job.succeeded', 'pipeline.succeeded']);
    // The pipeline's event comes after both steps' ends have happened.
    expect(events.find((event) => event.body.type === 'pipeline.succeeded')!.body.data.id).toBe(submitted.json.id);
  }, 90_000);

  it('a pipeline that ends after the orchestrator restarted still calls back, once', async () => {
    const submitted = await call('POST', '/v1/pipelines', slowPipeline(`${base}/hooks/restarted`));
    expect(submitted.status).toBe(202);
    const [slow] = submitted.json.steps as { jobId: string }[];
    await stepRunning(slow!.jobId);
    await mesh!.stop();
    mesh = await startMesh({ data, config: config() });
    // The pipeline goes on after the restart; it ends when its running step is cancelled, and the step waiting for it fails.
    expect((await call('DELETE', `/v1/jobs/${slow!.jobId}`)).status).toBe(200);
    const [event] = await waitFor(() => (bodiesAt('/hooks/restarted').length > 0 ? bodiesAt('/hooks/restarted') : null), { timeoutMs: 30_000, what: 'the pipeline\'s end after the restart' });
    expect(event!.body).toMatchObject({
      type: 'pipeline.cancelled',
      data: { id: submitted.json.id, steps: [{ status: 'cancelled' }, { status: 'failed', error: { code: 'SOURCE_FAILED' } }], cause: { step: 'slow', status: 'cancelled' } },
    });
    expect((await call('GET', `/v1/pipelines/${submitted.json.id}/webhooks`)).json.deliveries).toEqual([expect.objectContaining({ id: event!.id, status: 'delivered' })]);
  }, 90_000);
});
