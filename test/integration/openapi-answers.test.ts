import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import {
  ArtifactPage, AuditPage, BulkResults, ExplainView, GalleryView, GrantPage, GrantView, Hosts, JobAccepted, JobPage, JobView, Live, LoadAnswer, Minted,
  ModelFamily, Models, Narrowed, Ready, RemovedResults, SeriesView, StatusView, StorageView, UnloadAnswer,
} from '../../src/protocol/api/index.js';
import { ErrorBody } from '../../src/protocol/index.js';
import { OpenAiModelList } from '../../src/orchestrator/http/openai/docs.js';
import { Progress } from '../../src/orchestrator/http/a1111/docs.js';
import { meshForFile } from '../helpers/mesh.js';

/**
 * The jobs API's answers (and the hosts', and a job's explanation) as `/openapi.json` documents them, held to what a real `gpumesh up` (its agent making
 * pictures) answers: each answer parses, strictly (no field missing, none undocumented), with the zod schema the
 * document was made from, and the document shows each of those schemas' fields. The services build each answer as the type
 * inferred from its schema (protocol/api/); this holds the wire to them.
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
  const documentedSchema = doc.content?.['application/json']?.schema;
  // One schema, or one of a union's alternatives (a model with versions, or one version alone).
  const alternatives = (documentedSchema?.anyOf as { properties?: Record<string, unknown> }[] | undefined) ?? [documentedSchema ?? {}];
  const fields = alternatives.map((alternative) => Object.keys(alternative.properties ?? {}).sort());
  expect(fields, `${method} ${path} ${answer.status}`).toContainEqual(Object.keys(schema.shape).sort());
}

const picture = { type: 'image', input: { prompt: 'a documented lighthouse', width: 64, height: 64, steps: 2 } };

describe('the jobs API answers as /openapi.json says', () => {
  it('submit, get, list, results, bulk, delete results, cancel: each answer is its documented schema, field for field', async () => {
    const accepted = await call('POST', '/v1/jobs', picture);
    expect(accepted.status).toBe(202);
    await holds('POST', '/v1/jobs', accepted, JobAccepted);
    const id = (accepted.json as { id: string }).id;

    // With Prefer: wait, the ended job (the 200 documents either shape).
    const waited = await call('POST', '/v1/jobs', { ...picture, input: { ...picture.input, seed: 4 } }, { prefer: 'wait=30' });
    expect(waited.status).toBe(200);
    expect(JobView.safeParse(waited.json).success).toBe(true);
    expect((await documented('post', '/v1/jobs', 200)).content?.['application/json']?.schema?.anyOf).toHaveLength(2);

    await expect.poll(async () => ((await call('GET', `/v1/jobs/${id}`)).json as { status: string }).status, { timeout: 30_000 }).toBe('succeeded');
    const job = await call('GET', `/v1/jobs/${id}`);
    // A finished job with an attempt, its route and a result: every nested shape is in play.
    expect(job.json).toMatchObject({ attempts: [{ status: 'succeeded', route: { host: expect.any(String) } }], artifacts: [{ mediaType: 'image/png' }] });
    await holds('GET', '/v1/jobs/{id}', job, JobView);
    await holds('GET', '/v1/jobs', await call('GET', '/v1/jobs?limit=5'), JobPage);
    await holds('GET', '/v1/artifacts', await call('GET', '/v1/artifacts?limit=5'), ArtifactPage);

    const bulk = await call('POST', '/v1/jobs:batch', { jobs: [picture, { type: 'image', input: { prompt: 7 } }] });
    expect(bulk.status).toBe(207);
    await holds('POST', '/v1/jobs:batch', bulk, BulkResults);

    await holds('DELETE', '/v1/jobs/{id}/artifacts', await call('DELETE', `/v1/jobs/${id}/artifacts`), RemovedResults);

    // Cancelling a job that ended: the error envelope, as documented for 409.
    const refused = await call('DELETE', `/v1/jobs/${id}`);
    expect(refused.status).toBe(409);
    expect(ErrorBody.safeParse((refused.json as { error: unknown }).error).success).toBe(true);
    expect((await documented('delete', '/v1/jobs/{id}', 409)).description).toMatch(/JOB_NOT_CANCELLABLE/);
  });

  it('hosts, and a job explained — one that ran, one that waits for a host its grant allows — answer as documented', async () => {
    const hosts = await call('GET', '/v1/hosts');
    expect((hosts.json as { hosts: { replicas: unknown[] }[] }).hosts[0]!.replicas.length).toBeGreaterThan(0);
    await holds('GET', '/v1/hosts', hosts, Hosts);

    const ran = await call('POST', '/v1/jobs', { ...picture, input: { ...picture.input, seed: 9 } }, { prefer: 'wait=30' });
    await holds('GET', '/v1/jobs/{id}/explain', await call('GET', `/v1/jobs/${(ran.json as { id: string }).id}/explain`), ExplainView);

    // A grant limited to a host that is not there: its job waits, and says for what.
    const minted = await call('POST', '/v1/grants', { kind: 'client', hosts: ['elsewhere'], note: 'waits' });
    const waiting = await fetch(`${mesh().url}/v1/jobs`, {
      method: 'POST', body: JSON.stringify(picture), headers: { authorization: `Bearer ${(minted.json as { token: string }).token}`, 'content-type': 'application/json' },
    });
    const { id } = await waiting.json() as { id: string };
    const explained = await call('GET', `/v1/jobs/${id}/explain`);
    expect(explained.json).toMatchObject({ status: 'queued', waiting: { for: 'a host of its classes', hosts: [{ canTake: false }] } });
    await holds('GET', '/v1/jobs/{id}/explain', explained, ExplainView);
    expect((await call('DELETE', `/v1/jobs/${id}`)).status).toBe(200);
  });

  it('the mesh, its models, grants, the audit log, the gallery, health, OIP and OpenAI model lists, A1111\'s progress answer as documented', async () => {
    await holds('GET', '/healthz', await call('GET', '/healthz'), Live);
    await holds('GET', '/readyz', await call('GET', '/readyz'), Ready);
    await call('POST', '/v1/jobs', { ...picture, input: { ...picture.input, seed: 21 } }, { prefer: 'wait=30' }); // a point in the series
    await holds('GET', '/v1/status', await call('GET', '/v1/status'), StatusView);
    await holds('GET', '/v1/series', await call('GET', '/v1/series'), SeriesView);
    await holds('GET', '/v1/storage', await call('GET', '/v1/storage'), StorageView);
    await holds('GET', '/v1/models', await call('GET', '/v1/models'), Models);
    await holds('POST', '/v1/models/{name}/load', await call('POST', '/v1/models/simple/load', {}), LoadAnswer);
    await holds('POST', '/v1/models/{name}/unload', await call('POST', '/v1/models/simple/unload', {}), UnloadAnswer);

    // A model with versions: the built-in `simple` ONNX file (stored already) added under another name, shown and routed.
    const { models } = (await call('GET', '/v1/models')).json as { models: { name: string; digest: string }[] };
    const simple = models.find((model) => model.name === 'simple')!;
    const added = await call('POST', '/v1/models', { name: 'documented', file: simple.digest, types: ['tensor'] });
    expect(added.status, JSON.stringify(added.json)).toBe(201);
    await holds('GET', '/v1/models/{name}', await call('GET', '/v1/models/documented'), ModelFamily);
    await holds('PUT', '/v1/models/{name}/route', await call('PUT', '/v1/models/documented/route', { pinned: '1' }), ModelFamily);

    const minted = await call('POST', '/v1/grants', { kind: 'client', types: ['image'], note: 'documented' });
    await holds('POST', '/v1/grants', minted, Minted);
    const token = (minted.json as { token: string }).token;
    const narrowed = await fetch(`${mesh().url}/v1/grants:narrow`, { method: 'POST', body: JSON.stringify({ expires: '5m' }), headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' } });
    await holds('POST', '/v1/grants:narrow', { status: narrowed.status, json: await narrowed.json() }, Narrowed);
    await holds('GET', '/v1/grants', await call('GET', '/v1/grants?limit=5'), GrantPage);
    await holds('DELETE', '/v1/grants/{id}', await call('DELETE', `/v1/grants/${(minted.json as { id: string }).id}`), GrantView);
    await holds('GET', '/v1/audit', await call('GET', '/v1/audit?limit=5'), AuditPage);
    await holds('GET', '/v1/gallery', await call('GET', '/v1/gallery'), GalleryView);

    await holds('GET', '/openai/v1/models', await call('GET', '/openai/v1/models'), OpenAiModelList);
    await holds('GET', '/sdapi/v1/progress', await call('GET', '/sdapi/v1/progress'), Progress);
    const oip: [string, string][] = [['/v2', '/v2'], ['/v2/health/live', '/v2/health/live'], ['/v2/health/ready', '/v2/health/ready'], ['/v2/models/simple', '/v2/models/{model}'], ['/v2/models/simple/ready', '/v2/models/{model}/ready']];
    for (const [path, template] of oip) {
      const answer = await call('GET', path);
      expect(answer.status, path).toBe(200);
      const schema = (await documented('get', template, 200)).content?.['application/json']?.schema;
      expect(Object.keys(schema?.properties ?? {}).sort(), path).toEqual(Object.keys(answer.json as object).sort());
    }
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
