import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import {
  ArtifactPageSchema, BulkResultsSchema, ErrorBodySchema, ExplainViewSchema, HostsSchema, JobAcceptedSchema, JobPageSchema, JobViewSchema, RemovedResultsSchema,
} from '../../src/orchestrator/http/answers.js';
import { meshForFile } from '../helpers/mesh.js';

/**
 * The jobs API's answers (and the hosts', and a job's explanation) as `/openapi.json` documents them, held to what a real `gpumesh up` (its agent making
 * pictures) answers: each answer parses, strictly (no field missing, none undocumented), with the zod schema the
 * document was made from, and the document shows each of those schemas' fields. The build already fails when a
 * schema and the type its answer is built from drift apart (http/answers.ts); this holds the wire to them.
 */
const mesh = meshForFile();

interface Documented { description?: string; content?: Record<string, { schema?: { properties?: Record<string, unknown>; anyOf?: unknown[]; type?: string; format?: string } }> }

async function documented(method: string, path: string, status: number): Promise<Documented> {
  const document = await (await fetch(`${mesh().url}/openapi.json`)).json() as { paths: Record<string, Record<string, { responses: Record<string, Documented> }>> };
  const answer = document.paths[path]?.[method]?.responses[String(status)];
  if (!answer) throw new Error(`${method.toUpperCase()} ${path} documents no ${status}`);
  return answer;
}

async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; json: unknown }> {
  const response = await fetch(`${mesh().url}${path}`, {
    method, body: body === undefined ? undefined : JSON.stringify(body),
    headers: { authorization: `Bearer ${mesh().admin}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
  });
  return { status: response.status, json: await response.json() };
}

/** The answer parses strictly with the schema, and the document lists the schema's fields for that status. */
async function holds(method: string, path: string, answer: { status: number; json: unknown }, schema: z.ZodObject): Promise<void> {
  const parsed = schema.safeParse(answer.json);
  expect(parsed.success, `${method} ${path} ${answer.status}: ${JSON.stringify(parsed.error?.issues)}`).toBe(true);
  const doc = await documented(method.toLowerCase(), path, answer.status);
  const properties = doc.content?.['application/json']?.schema?.properties;
  expect(Object.keys(properties ?? {}).sort(), `${method} ${path} ${answer.status}`).toEqual(Object.keys(schema.shape).sort());
}

const picture = { type: 'image', input: { prompt: 'a documented lighthouse', width: 64, height: 64, steps: 2 } };

describe('the jobs API answers as /openapi.json says', () => {
  it('submit, get, list, results, bulk, delete results, cancel: each answer is its documented schema, field for field', async () => {
    const accepted = await call('POST', '/v1/jobs', picture);
    expect(accepted.status).toBe(202);
    await holds('POST', '/v1/jobs', accepted, JobAcceptedSchema);
    const id = (accepted.json as { id: string }).id;

    // With Prefer: wait, the ended job (the 200 documents either shape).
    const waited = await call('POST', '/v1/jobs', { ...picture, input: { ...picture.input, seed: 4 } }, { prefer: 'wait=30' });
    expect(waited.status).toBe(200);
    expect(JobViewSchema.safeParse(waited.json).success).toBe(true);
    expect((await documented('post', '/v1/jobs', 200)).content?.['application/json']?.schema?.anyOf).toHaveLength(2);

    await expect.poll(async () => ((await call('GET', `/v1/jobs/${id}`)).json as { status: string }).status, { timeout: 30_000 }).toBe('succeeded');
    const job = await call('GET', `/v1/jobs/${id}`);
    // A finished job with an attempt, its route and a result: every nested shape is in play.
    expect(job.json).toMatchObject({ attempts: [{ status: 'succeeded', route: { host: expect.any(String) } }], artifacts: [{ mediaType: 'image/png' }] });
    await holds('GET', '/v1/jobs/{id}', job, JobViewSchema);
    await holds('GET', '/v1/jobs', await call('GET', '/v1/jobs?limit=5'), JobPageSchema);
    await holds('GET', '/v1/artifacts', await call('GET', '/v1/artifacts?limit=5'), ArtifactPageSchema);

    const bulk = await call('POST', '/v1/jobs:batch', { jobs: [picture, { type: 'image', input: { prompt: 7 } }] });
    expect(bulk.status).toBe(207);
    await holds('POST', '/v1/jobs:batch', bulk, BulkResultsSchema);

    await holds('DELETE', '/v1/jobs/{id}/artifacts', await call('DELETE', `/v1/jobs/${id}/artifacts`), RemovedResultsSchema);

    // Cancelling a job that ended: the error envelope, as documented for 409.
    const refused = await call('DELETE', `/v1/jobs/${id}`);
    expect(refused.status).toBe(409);
    expect(ErrorBodySchema.safeParse((refused.json as { error: unknown }).error).success).toBe(true);
    expect((await documented('delete', '/v1/jobs/{id}', 409)).description).toMatch(/JOB_NOT_CANCELLABLE/);
  });

  it('hosts, and a job explained — one that ran, one that waits for a host its grant allows — answer as documented', async () => {
    const hosts = await call('GET', '/v1/hosts');
    expect((hosts.json as { hosts: { replicas: unknown[] }[] }).hosts[0]!.replicas.length).toBeGreaterThan(0);
    await holds('GET', '/v1/hosts', hosts, HostsSchema);

    const ran = await call('POST', '/v1/jobs', { ...picture, input: { ...picture.input, seed: 9 } }, { prefer: 'wait=30' });
    await holds('GET', '/v1/jobs/{id}/explain', await call('GET', `/v1/jobs/${(ran.json as { id: string }).id}/explain`), ExplainViewSchema);

    // A grant limited to a host that is not there: its job waits, and says for what.
    const minted = await call('POST', '/v1/grants', { kind: 'client', hosts: ['elsewhere'], note: 'waits' });
    const waiting = await fetch(`${mesh().url}/v1/jobs`, {
      method: 'POST', body: JSON.stringify(picture), headers: { authorization: `Bearer ${(minted.json as { token: string }).token}`, 'content-type': 'application/json' },
    });
    const { id } = await waiting.json() as { id: string };
    const explained = await call('GET', `/v1/jobs/${id}/explain`);
    expect(explained.json).toMatchObject({ status: 'queued', waiting: { for: 'a host of its classes', hosts: [{ canTake: false }] } });
    await holds('GET', '/v1/jobs/{id}/explain', explained, ExplainViewSchema);
    expect((await call('DELETE', `/v1/jobs/${id}`)).status).toBe(200);
  });

  it('blobs, thumbnails and event streams say what they send: bytes, WebP, Server-Sent Events', async () => {
    expect((await documented('get', '/v1/blobs/{digest}', 200)).content).toEqual({ '*/*': { schema: { type: 'string', format: 'binary' } } });
    expect(Object.keys((await documented('get', '/v1/blobs/{digest}/thumbnail', 200)).content ?? {})).toEqual(['image/webp']);
    for (const path of ['/v1/jobs/{id}/events', '/v1/events']) {
      expect(Object.keys((await documented('get', path, 200)).content ?? {}), path).toEqual(['text/event-stream']);
    }
    expect(Object.keys((await documented('get', '/metrics', 200)).content ?? {})).toEqual(['text/plain']);
  });
});
