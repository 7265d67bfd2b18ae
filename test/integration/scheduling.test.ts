import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { JobEvent, JobView } from '../../src/protocol/api/index.js';
import { removeDir, startMesh, waitFor, type RunningMesh } from '../helpers/mesh.js';

let mesh: RunningMesh;
const events: JobEvent[] = [];
let stopEvents: () => void = () => {};

beforeAll(async () => {
  mesh = await startMesh({
    config: {
      models: {
        gen: { maxQueueSize: 4, maxTimeoutMs: 60_000 },
        mlp: { batching: { maxBatchSize: 8, preferredBatchSizes: [8], maxQueueDelayMs: 5000 } },
      },
      priorities: { levels: 3, default: 2, agingMs: 600_000 },
    },
  });
  const controller = new AbortController();
  stopEvents = () => controller.abort();
  const response = await fetch(`${mesh.url}/v1/events`, { headers: { authorization: `Bearer ${mesh.admin}` }, signal: controller.signal });
  void (async () => {
    let buffer = '';
    const decoder = new TextDecoder();
    for await (const chunk of response.body!) {
      buffer += decoder.decode(chunk as Uint8Array, { stream: true });
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const data = /^data: (.*)$/m.exec(buffer.slice(0, end))?.[1];
        buffer = buffer.slice(end + 2);
        if (data) events.push(JSON.parse(data) as JobEvent);
      }
    }
  })().catch(() => {});
});

afterAll(async () => {
  stopEvents();
  await mesh?.stop();
  removeDir(mesh.data);
});

async function call(method: string, path: string, body?: unknown, grant = mesh.admin) {
  const response = await fetch(`${mesh.url}${path}`, {
    method, body: body === undefined ? undefined : JSON.stringify(body),
    headers: { authorization: `Bearer ${grant}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
  });
  return { status: response.status, headers: response.headers, json: (await response.json()) as any };
}

const submit = (input: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
  call('POST', '/v1/jobs', { type: 'image', input: { width: 64, height: 64, steps: 2, ...input }, ...extra });
const job = async (id: string): Promise<JobView> => (await call('GET', `/v1/jobs/${id}`)).json;
const finished = (id: string) => mesh.client().follow(id);

/** A job big enough to keep the only replica busy for a few seconds; resolves once it runs. */
async function occupy(): Promise<string> {
  const { json } = await submit({ prompt: 'occupy the replica', width: 768, height: 768, steps: 12 });
  await waitFor(async () => (await job(json.id)).status === 'running', { what: 'the long job to run' });
  return json.id as string;
}

describe('admission', () => {
  it('a full queue answers 429 at once with Retry-After and a message naming the model and bound; nothing admitted is lost', async () => {
    const busy = await occupy();
    const admitted = [];
    for (let i = 0; i < 4; i++) admitted.push((await submit({ prompt: `fill ${i}`, width: 64 + 8 * i })).json.id as string);
    const refused = await submit({ prompt: 'one too many' });
    expect(refused.status).toBe(429);
    expect(refused.json.error.code).toBe('QUEUE_FULL');
    expect(refused.json.error.message).toContain('"gen"');
    expect(refused.json.error.message).toContain('4 of 4');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    for (const id of [busy, ...admitted]) expect((await finished(id)).type).toBe('succeeded');
    const metrics = await fetch(`${mesh.url}/metrics`, { headers: { authorization: `Bearer ${mesh.admin}` } }).then((r) => r.text());
    expect(metrics).toMatch(/gpumesh_rejected_total\{model="gen",reason="queue_full"\} 1/);
  });

  it('a grant\'s rate and priority ceiling are enforced', async () => {
    const limited = (await call('POST', '/v1/grants', { kind: 'client', rate: '2/m', maxPriority: 2 })).json.token as string;
    const body = { type: 'tensor', input: { x: Array(64).fill(0.5) } };
    expect((await call('POST', '/v1/jobs', { ...body, priority: 1 }, limited)).json.error.code).toBe('PRIORITY_DENIED');
    expect((await call('POST', '/v1/jobs', body, limited)).status).toBe(202);
    expect((await call('POST', '/v1/jobs', body, limited)).status).toBe(202);
    const third = await call('POST', '/v1/jobs', body, limited);
    expect(third.status).toBe(429);
    expect(third.json.error.code).toBe('RATE_LIMITED');
    expect(third.json.error.message).toContain('2 jobs per minute');
    expect(Number(third.headers.get('retry-after'))).toBeGreaterThan(0);
    expect((await submit({ prompt: 'x' }, { timeoutMs: 120_000 })).json.error.code).toBe('TIMEOUT_TOO_LONG');
  });
});

describe('priorities and deadlines', () => {
  it('serves higher priorities first, first come first served within a level', async () => {
    const busy = await occupy();
    // Different sizes keep them in separate batches, so the dispatch order is visible.
    const ids: Record<string, string> = {};
    for (const [name, priority, width] of [['low-a', 3, 72], ['low-b', 3, 80], ['mid', 2, 88], ['high', 1, 96]] as const) {
      ids[name] = (await submit({ prompt: name, width }, { priority })).json.id;
    }
    for (const id of Object.values(ids)) await finished(id);
    await finished(busy);
    const order = events.filter((event) => event.type === 'dispatched' && Object.values(ids).includes(event.jobId)).map((event) => event.jobId);
    expect(order).toEqual([ids.high, ids.mid, ids['low-a'], ids['low-b']]);
  });

  it('a queued job expires at its deadline even while every replica is busy', async () => {
    const busy = await occupy();
    const { json } = await submit({ prompt: 'too late', width: 120 }, { timeoutMs: 300 });
    const terminal = await finished(json.id);
    expect(terminal.type).toBe('expired');
    const expired = await job(json.id);
    const waited = Date.parse(expired.finishedAt!) - Date.parse(expired.createdAt);
    expect(waited).toBeGreaterThanOrEqual(300);
    expect(waited).toBeLessThan(1500);
    expect((await job(busy)).status).toBe('running'); // the long batch had not ended
    expect(expired.error?.code).toBe('DEADLINE_EXCEEDED');
    await finished(busy);
  });

  it('a running job past its deadline is cancelled on the agent, which stops and takes the next job', async () => {
    // About ten seconds of work: if the engine did not stop, the next job would wait for all of it.
    const { json } = await submit({ prompt: 'deadline mid-run', width: 1024, height: 1024, steps: 24 }, { timeoutMs: 1500 });
    await waitFor(async () => (await job(json.id)).status === 'running', { what: 'the job to run' });
    expect((await finished(json.id)).type).toBe('expired');
    const next = await submit({ prompt: 'after the expired one' });
    const started = Date.now();
    expect((await finished(next.json.id)).type).toBe('succeeded');
    expect(Date.now() - started).toBeLessThan(4000);
    const attempts = (await job(json.id)).attempts;
    expect(attempts[0]!.status).toBe('cancelled');
  });

  it('cancelling a running job stops it on the agent', async () => {
    const { json: long } = await submit({ prompt: 'cancel mid-run', width: 1024, height: 1024, steps: 24 });
    await waitFor(async () => (await job(long.id)).status === 'running', { what: 'the job to run' });
    const busy = long.id as string;
    const cancelled = await call('DELETE', `/v1/jobs/${busy}`);
    expect(cancelled.json.status).toBe('cancelled');
    const next = await submit({ prompt: 'after the cancelled one' });
    const started = Date.now();
    expect((await finished(next.json.id)).type).toBe('succeeded');
    expect(Date.now() - started).toBeLessThan(4000);
  });
});

describe('dynamic batching', () => {
  it('compatible jobs that queue behind a busy replica run as one fused batch, recorded on each job', async () => {
    const busy = await occupy();
    const ids: string[] = [];
    for (let i = 0; i < 8; i++) {
      ids.push((await call('POST', '/v1/jobs', { type: 'tensor', input: { x: Array.from({ length: 64 }, (_, k) => Math.sin(i + k)) } })).json.id);
    }
    for (const id of ids) expect((await finished(id)).type).toBe('succeeded');
    await finished(busy);
    const views = await Promise.all(ids.map(job));
    expect(new Set(views.map((view) => view.batch!.id)).size).toBe(1);
    expect(views.every((view) => view.batch!.size === 8 && view.attempts[0]!.batchSize === 8)).toBe(true);
    expect((views[0]!.result as { y: number[] }).y).toHaveLength(16);
    const metrics = await fetch(`${mesh.url}/metrics`, { headers: { authorization: `Bearer ${mesh.admin}` } }).then((r) => r.text());
    const count = Number(/gpumesh_inference_count_total\{model="mlp"\} (\d+)/.exec(metrics)?.[1]);
    const executions = Number(/gpumesh_execution_count_total\{model="mlp"\} (\d+)/.exec(metrics)?.[1]);
    expect(count / executions).toBeGreaterThan(1);
  });
});

describe('metrics', () => {
  it('GET /metrics is Prometheus text that promtool accepts, and needs a grant', async () => {
    expect((await fetch(`${mesh.url}/metrics`)).status).toBe(401);
    const response = await fetch(`${mesh.url}/metrics`, { headers: { authorization: `Bearer ${mesh.admin}` } });
    expect(response.headers.get('content-type')).toContain('text/plain');
    const text = await response.text();
    for (const name of [
      'gpumesh_requests_total', 'gpumesh_inference_count_total', 'gpumesh_execution_count_total', 'gpumesh_queue_duration_seconds_bucket',
      'gpumesh_compute_duration_seconds_bucket', 'gpumesh_request_duration_seconds_bucket', 'gpumesh_queue_depth', 'gpumesh_rejected_total',
      'gpumesh_host_connected', 'gpumesh_host_jobs_in_flight', 'gpumesh_device_memory_used_bytes', 'gpumesh_device_memory_budget_bytes',
    ]) expect(text, name).toContain(name);
    expect(text).toMatch(/gpumesh_requests_total\{model="gen",outcome="expired"\} [1-9]/);
    const file = join(mesh.data, 'metrics.txt');
    writeFileSync(file, text);
    const { stdout, stderr } = await promisify(execFile)('sh', ['-c', `promtool check metrics < ${file}`]).catch((error) => {
      throw new Error(`promtool check metrics failed: ${error.stdout}${error.stderr}`);
    });
    expect(stdout + stderr).not.toMatch(/error/i);
  });
});
