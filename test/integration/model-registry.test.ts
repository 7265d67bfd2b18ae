import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GraphBuilder } from '../../src/builtin-models/index.js';
import { narrowGrant } from '../../src/orchestrator/auth/index.js';
import { removeDir, startMesh, waitFor, type RunningMesh } from '../helpers/mesh.js';
import { gpumeshRun } from '../helpers/processes.js';
import { blobDirEntries, blobEntry } from '../helpers/blob-dir.js';

/**
 * People's own models while the mesh runs, against a real `gpumesh up` (its agent and ONNX worker): an ONNX file
 * stored by digest and added as a model — its inputs and outputs read from the file — run through the mesh with named
 * tensors checked at admission; versions, a traffic split recorded job by job, pins; removal refused while a job uses a
 * version; load and unload on request with the device's memory before and after; and all of it back after a restart.
 */
let mesh: RunningMesh;

beforeAll(async () => {
  mesh = await startMesh();
}, 120_000);
afterAll(async () => {
  await mesh?.stop();
  if (mesh) removeDir(mesh.data);
});

async function call(method: string, path: string, body?: unknown, grant = mesh.admin): Promise<{ status: number; json: any }> {
  const raw = body instanceof Uint8Array;
  const response = await fetch(`${mesh.url}${path}`, {
    method, headers: { authorization: `Bearer ${grant}`, ...(body === undefined ? {} : { 'content-type': raw ? 'application/octet-stream' : 'application/json' }) },
    body: body === undefined ? undefined : raw ? (body as Uint8Array<ArrayBuffer>) : JSON.stringify(body),
  });
  const text = await response.text();
  let json: any = null;
  try { json = JSON.parse(text); } catch { /* empty */ }
  return { status: response.status, json };
}

/** A small ONNX model: y = x × scale + bias, FP32 [batch, 4] → [batch, 4]. */
function scaler(scale: number): Uint8Array<ArrayBuffer> {
  const g = new GraphBuilder(`scale_${scale}`, 'y = x * scale');
  const x = g.input('x', 'float32', ['batch', 4]);
  const k = g.floatInit('k', [1], [scale]);
  g.op('Mul', [x, k], {}, 'y');
  g.output('y', 'float32', ['batch', 4]);
  return new Uint8Array(g.toBytes());
}

async function runJob(model: string, data: number[], rows = 1): Promise<any> {
  const submitted = await call('POST', '/v1/jobs', { type: 'tensor', model, input: { inputs: { x: { shape: [rows, 4], data } } } });
  expect(submitted.status, JSON.stringify(submitted.json)).toBe(202);
  return waitFor(async () => {
    const view = (await call('GET', `/v1/jobs/${String(submitted.json.id)}`)).json;
    if (view.status === 'failed') throw new Error(JSON.stringify(view));
    return view.status === 'succeeded' ? view : null;
  }, { timeoutMs: 60_000, what: `a job of ${model}` });
}

describe('the model registry', () => {
  it('adds an ONNX file as a model, reads its signature, and runs named tensors through the mesh; bad tensors are 400s naming them', async () => {
    const stored = await call('PUT', '/v1/blobs', scaler(2));
    expect(stored.status).toBe(201);
    const added = await call('POST', '/v1/models', { name: 'scaler', file: stored.json.digest });
    expect(added.status, JSON.stringify(added.json)).toBe(201);
    expect(added.json).toMatchObject({
      name: 'scaler', version: '1', engine: 'onnx', types: ['tensor'],
      inputs: [{ name: 'x', datatype: 'FP32', shape: [-1, 4] }], outputs: [{ name: 'y', datatype: 'FP32', shape: [-1, 4] }],
      policy: { batching: { maxBatchSize: 8 } },
    });
    const job = await runJob('scaler', [1, 2, 3, 4]);
    expect(job.model).toBe('scaler@1');
    expect(job.result).toEqual({ outputs: { y: { datatype: 'FP32', shape: [1, 4], data: [2, 4, 6, 8] } } });

    const bad = async (inputs: unknown) => (await call('POST', '/v1/jobs', { type: 'tensor', model: 'scaler', input: { inputs } })).json.error;
    expect(await bad({ x: { shape: [1, 5], data: [1, 2, 3, 4, 5] } })).toMatchObject({ code: 'INVALID_INPUT', message: expect.stringContaining('inputs.x.shape: dimension 1 is 5; the model takes x FP32 [-1, 4]') });
    expect(await bad({ x: { datatype: 'INT64', shape: [1, 4], data: [1, 2, 3, 4] } })).toMatchObject({ message: expect.stringContaining('inputs.x: datatype INT64; the model takes FP32') });
    expect(await bad({ x: { shape: [2, 4], data: [1, 2, 3, 4] } })).toMatchObject({ message: expect.stringContaining('inputs.x.data: 4 values; shape [2, 4] holds 8') });
    expect(await bad({ z: { shape: [1, 4], data: [1, 2, 3, 4] } })).toMatchObject({ message: expect.stringContaining('inputs.z: the model has no input of that name (it takes: x)') });
    expect(await bad({ x: { shape: [1, 4], data: [1, 2, 'three', 4] } })).toMatchObject({ message: expect.stringContaining('inputs.x.data[2]') });
  });

  it('runs Triton\'s simple model, built in: INT32 sum and difference', async () => {
    const a = Array.from({ length: 16 }, (_, i) => i);
    const b = Array.from({ length: 16 }, () => 1);
    const submitted = await call('POST', '/v1/jobs', { type: 'tensor', model: 'simple', input: { inputs: { INPUT0: { shape: [1, 16], data: a }, INPUT1: { shape: [1, 16], data: b } } } });
    expect(submitted.status, JSON.stringify(submitted.json)).toBe(202);
    const job = await waitFor(async () => {
      const view = (await call('GET', `/v1/jobs/${String(submitted.json.id)}`)).json;
      return view.status === 'succeeded' ? view : null;
    }, { what: 'the simple job' });
    expect(job.result.outputs.OUTPUT0).toEqual({ datatype: 'INT32', shape: [1, 16], data: a.map((value) => value + 1) });
    expect(job.result.outputs.OUTPUT1.data).toEqual(a.map((value) => value - 1));
  });

  it('versions: the newest by default, a pin, a split recorded job by job; removal refused while a job uses a version', async () => {
    const v2 = await call('PUT', '/v1/blobs', scaler(3));
    expect((await call('POST', '/v1/models', { name: 'scaler', file: v2.json.digest })).json).toMatchObject({ name: 'scaler', version: '2' });
    expect((await call('POST', '/v1/models', { name: 'scaler', version: '2', file: v2.json.digest })).json.error.code).toBe('MODEL_EXISTS');
    expect((await runJob('scaler', [1, 1, 1, 1])).result.outputs.y.data).toEqual([3, 3, 3, 3]);
    expect((await runJob('scaler@1', [1, 1, 1, 1])).result.outputs.y.data).toEqual([2, 2, 2, 2]);
    await call('PUT', '/v1/models/scaler/route', { pinned: '1' });
    expect((await runJob('scaler', [1, 1, 1, 1])).model).toBe('scaler@1');

    const split = await call('PUT', '/v1/models/scaler/route', { split: { 1: 50, 2: 50 } });
    expect(split.json).toMatchObject({ name: 'scaler', split: { 1: 50, 2: 50 }, route: 'split 1: 50, 2: 50' });
    const served = new Set<string>();
    for (let i = 0; i < 24; i++) served.add((await runJob('scaler', [1, 1, 1, 1])).model);
    expect(served).toEqual(new Set(['scaler@1', 'scaler@2']));
    await call('PUT', '/v1/models/scaler/route', {});

    // A job waiting on version 1 (a deadline far away, its host made unable to take it by a grant naming no host).
    const held = await call('POST', '/v1/jobs', { type: 'tensor', model: 'scaler@1', input: { inputs: { x: { shape: [1, 4], data: [1, 1, 1, 1] } } } }, narrowGrant(mesh.admin, ['hosts nowhere']));
    expect(held.status).toBe(202);
    const refused = await call('DELETE', '/v1/models/scaler@1');
    expect(refused.status).toBe(409);
    expect(refused.json.error).toMatchObject({ code: 'MODEL_IN_USE' });
    await call('DELETE', `/v1/jobs/${String(held.json.id)}`);
    expect((await call('DELETE', '/v1/models/scaler@1')).status).toBe(204);
    expect((await call('GET', '/v1/models/scaler')).json.versions.map((version: { version: string }) => version.version)).toEqual(['2']);
  });

  it('loads and unloads on request, with the device memory before and after; a grant without models:write may not', async () => {
    const loaded = await call('POST', '/v1/models/scaler/load', {});
    expect(loaded.status, JSON.stringify(loaded.json)).toBe(200);
    // One host in this mesh and no minReplicas: one replica wanted, and loaded.
    expect(loaded.json).toMatchObject({ model: 'scaler@2', wanted: 1, note: null, loaded: [{ model: 'scaler@2', change: 'loaded', before: expect.any(Array), after: expect.any(Array) }] });
    const hosts = (await call('GET', '/v1/hosts')).json.hosts;
    expect(hosts[0].resident.map((entry: { model: string }) => entry.model)).toContain('scaler@2');
    const unloaded = await call('POST', '/v1/models/scaler/unload', {});
    expect(unloaded.json.unloaded).toEqual([expect.objectContaining({ model: 'scaler@2', change: 'unloaded' })]);
    const client = (await call('POST', '/v1/grants', { kind: 'client' })).json.token;
    expect((await call('POST', '/v1/models/scaler/load', {}, client)).status).toBe(403);
    expect((await call('POST', '/v1/models', { name: 'x', file: `sha256:${'0'.repeat(64)}` }, client)).status).toBe(403);
  });

  it('memory measured at a version\'s first load replaces the guess of a version added without one, a given figure stays', async () => {
    const guessed = (await call('POST', '/v1/models', { name: 'sized', file: (await call('PUT', '/v1/blobs', scaler(19))).json.digest })).json;
    expect(guessed).toMatchObject({ name: 'sized', version: '1', memoryMB: 64, memoryFrom: 'estimate' });
    const given = (await call('POST', '/v1/models', { name: 'sized', memoryMB: 500, file: (await call('PUT', '/v1/blobs', scaler(23))).json.digest })).json;
    expect(given).toMatchObject({ name: 'sized', version: '2', memoryMB: 500, memoryFrom: 'given' });
    const versions = async () => Object.fromEntries((await call('GET', '/v1/models/sized')).json.versions.map((version: { version: string; memoryMB: number; memoryFrom: string }) => [version.version, [version.memoryMB, version.memoryFrom]]));

    const first = await call('POST', '/v1/models/sized@1/load', {});
    expect(first.status, JSON.stringify(first.json)).toBe(200);
    const measured = first.json.loaded[0].memoryMB;
    expect(measured).toBeGreaterThan(0);
    expect(await versions()).toEqual({ 1: [Math.ceil(measured), 'measured'], 2: [500, 'given'] });
    expect((await call('POST', '/v1/models/sized@2/load', {})).json.loaded[0].memoryMB).toBeGreaterThan(0);
    expect((await versions())['2']).toEqual([500, 'given']);
    // Only the first measure counts: a later load leaves the recorded figure.
    await call('POST', '/v1/models/sized@1/unload', {});
    await call('POST', '/v1/models/sized@2/unload', {});
    await call('POST', '/v1/models/sized@1/load', {});
    expect((await versions())['1']).toEqual([Math.ceil(measured), 'measured']);
    await call('POST', '/v1/models/sized@1/unload', {});
  });

  it('a refused add of a model of several files stores nothing (its index is stored only with the version), and a stored index outlives a request that sends its bytes as a picture', async () => {
    const members = {
      detector: (await call('PUT', '/v1/blobs', scaler(29))).json.digest as string,
      recognizer: (await call('PUT', '/v1/blobs', scaler(31))).json.digest as string,
      dictionary: (await call('PUT', '/v1/blobs', new TextEncoder().encode('a\nb\nc\n'))).json.digest as string,
    };
    const client = (await call('POST', '/v1/grants', { kind: 'client' })).json.token;
    const before = blobDirEntries(mesh.data);
    const refusals: [string, unknown, string | undefined, number, Record<string, unknown>][] = [
      ['a member lacking', { name: 'reader', types: ['ocr'], files: { detector: members.detector, dictionary: members.dictionary } }, undefined,
        400, { code: 'VALIDATION_FAILED', message: expect.stringContaining('files: a ocr model holds files named detector, recognizer, dictionary; it lacks recognizer') }],
      ['settings the engine refuses', { name: 'reader', types: ['ocr'], files: members, settings: { pipeline: 'no-such-pipeline' } }, undefined,
        400, { code: 'VALIDATION_FAILED', message: expect.stringContaining('settings.pipeline') }],
      ['a job type the mesh does not route', { name: 'reader', types: ['no-such-type'], files: members }, undefined,
        400, { code: 'VALIDATION_FAILED', message: expect.stringContaining('this mesh routes no job type "no-such-type"') }],
      ['a member not stored', { name: 'reader', types: ['ocr'], files: { ...members, recognizer: `sha256:${'0'.repeat(64)}` } }, undefined,
        404, { code: 'NOT_FOUND', message: expect.stringContaining(`Blob sha256:${'0'.repeat(64)}`) }],
      ['a built-in model\'s name', { name: 'gen', types: ['ocr'], files: members }, undefined,
        409, { code: 'MODEL_EXISTS' }],
      ['a grant without models:write', { name: 'reader', types: ['ocr'], files: members }, client,
        403, { code: expect.stringMatching(/^GRANT_/) }],
    ];
    for (const [what, body, grant, status, error] of refusals) {
      const refused = await call('POST', '/v1/models', body, grant);
      expect(refused.status, what).toBe(status);
      expect(refused.json.error, what).toMatchObject(error);
      expect(blobDirEntries(mesh.data), what).toEqual(before);
    }
    // A tensor job or an OIP infer with a wrong tensor is refused at admission, writing nothing either.
    expect((await call('POST', '/v2/models/scaler/infer', { inputs: [{ name: 'x', shape: [1, 5], datatype: 'FP32', data: [1, 2, 3, 4, 5] }] })).status).toBe(400);
    expect((await call('POST', '/v1/jobs', { type: 'tensor', model: 'scaler', input: { inputs: { x: { shape: [1, 5], data: [1, 2, 3, 4, 5] } } } })).status).toBe(400);
    expect(blobDirEntries(mesh.data)).toEqual(before);

    // Taken: now, and only now, the index is stored.
    const added = await call('POST', '/v1/models', { name: 'reader', types: ['ocr'], files: members });
    expect(added.status, JSON.stringify(added.json)).toBe(201);
    const index = new Uint8Array(await (await fetch(`${mesh.url}/v1/blobs/${String(added.json.digest)}`, { headers: { authorization: `Bearer ${mesh.admin}` } })).arrayBuffer());
    expect(JSON.parse(new TextDecoder().decode(index))).toEqual({ files: added.json.files });
    const withIndex = blobDirEntries(mesh.data);
    expect(withIndex.filter((entry) => !before.includes(entry) && !entry.endsWith('/'))).toEqual([blobEntry(added.json.digest, index.length)]);
    // The index's bytes sent as a picture are refused before they are stored; the index the version needs stays.
    const refused = await fetch(`${mesh.url}/v1/blobs`, { method: 'PUT', headers: { authorization: `Bearer ${client}`, 'content-type': 'image/png' }, body: index as Uint8Array<ArrayBuffer> });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('IMAGE_REFUSED');
    expect(blobDirEntries(mesh.data)).toEqual(withIndex);
    expect((await call('DELETE', '/v1/models/reader@1')).status).toBe(204);
  });

  it('adds of one model at once: the next versions each, or one 201 and 409s for one version; what jobs run is what the API answered and what comes back after a restart', async () => {
    const files = await Promise.all([5, 7, 11, 13, 17].map(async (scale) => [scale, (await call('PUT', '/v1/blobs', scaler(scale))).json.digest as string] as const));
    const scaleOf = new Map(files.map(([scale, digest]) => [digest, scale]));
    // Without a version: each add takes the next number, in the order they were answered.
    const unnamed = await Promise.all(files.slice(0, 3).map(async ([, digest]) => call('POST', '/v1/models', { name: 'race', file: digest })));
    expect(unnamed.map((added) => added.status)).toEqual([201, 201, 201]);
    expect(unnamed.map((added) => `${added.json.name}@${added.json.version}`).sort()).toEqual(['race@1', 'race@2', 'race@3']);
    // One version asked twice at once: one add wins, the other is a 409 naming it.
    const same = await Promise.all(files.slice(3).map(async ([, digest]) => call('POST', '/v1/models', { name: 'race', version: '9', file: digest })));
    expect(same.map((added) => added.status).sort()).toEqual([201, 409]);
    expect(same.find((added) => added.status === 409)!.json.error).toMatchObject({ code: 'MODEL_EXISTS', message: expect.stringContaining('race@9') });
    const winner = same.find((added) => added.status === 201)!.json;
    const answered = [...unnamed.map((added) => added.json), winner];
    const shown = (await call('GET', '/v1/models/race')).json;
    expect(shown.versions.map((version: { version: string; digest: string }) => [version.version, version.digest]).sort())
      .toEqual(answered.map((manifest) => [manifest.version, manifest.digest]).sort());
    expect(shown.route).toBe('newest (9)');
    for (const manifest of answered) {
      expect((await runJob(`${manifest.name}@${manifest.version}`, [1, 1, 1, 1])).result.outputs.y.data).toEqual(Array(4).fill(scaleOf.get(manifest.digest)));
    }
  });

  it('is all back after a restart', async () => {
    const before = (await call('GET', '/v1/models/scaler')).json;
    const race = (await call('GET', '/v1/models/race')).json;
    const sized = (await call('GET', '/v1/models/sized')).json;
    expect(sized.versions[0].memoryFrom).toBe('measured');
    await mesh.stop();
    mesh = await startMesh({ data: mesh.data });
    expect((await call('GET', '/v1/models/scaler')).json).toEqual(before);
    expect((await call('GET', '/v1/models/race')).json).toEqual(race);
    expect((await call('GET', '/v1/models/sized')).json).toEqual(sized);
    expect((await runJob('scaler', [2, 2, 2, 2])).result.outputs.y.data).toEqual([6, 6, 6, 6]);
  }, 120_000);

  it('a mesh.yaml pin is the route everywhere a bare name is used, the API may not change it, and the API\'s route is back once it goes', async () => {
    // Version 3 (×5) beside 2 (×3), and the API's pin on 3; then mesh.yaml pins 2.
    const v3 = await call('PUT', '/v1/blobs', scaler(5));
    expect((await call('POST', '/v1/models', { name: 'scaler', file: v3.json.digest })).json).toMatchObject({ name: 'scaler', version: '3' });
    expect((await call('PUT', '/v1/models/scaler/route', { pinned: '3' })).json.route).toBe('pinned to 3');
    await mesh.stop();
    mesh = await startMesh({ data: mesh.data, config: { models: { scaler: { version: '2' } } } });

    expect((await call('GET', '/v1/models/scaler')).json).toMatchObject({ pinned: '2', split: null, pinnedIn: 'mesh.yaml', route: 'pinned to 2 (mesh.yaml)' });
    const ls = await gpumeshRun(['models', 'ls'], { GPUMESH_HOME: mesh.data, GPUMESH_URL: mesh.url });
    expect(ls.stdout).toMatch(/scaler\s+2,3\s+pinned to 2 \(mesh\.yaml\)/);
    for (let i = 0; i < 3; i++) expect((await runJob('scaler', [1, 1, 1, 1])).model).toBe('scaler@2');
    const oip = await call('POST', '/v2/models/scaler/infer', { inputs: [{ name: 'x', shape: [1, 4], datatype: 'FP32', data: [1, 1, 1, 1] }] });
    expect(oip.json).toMatchObject({ model_version: '2', outputs: [{ data: [3, 3, 3, 3] }] });
    const loaded = await call('POST', '/v1/models/scaler/load', {});
    expect(loaded.json.loaded.map((change: { model: string }) => change.model)).toEqual(['scaler@2']);
    await call('POST', '/v1/models/scaler/unload', {});

    const rerouted = await call('PUT', '/v1/models/scaler/route', { split: { 2: 0, 3: 100 } });
    expect(rerouted.status).toBe(409);
    expect(rerouted.json.error).toMatchObject({ code: 'MODEL_PINNED', message: expect.stringContaining('pinned to version 2 in mesh.yaml') });
    expect((await call('DELETE', '/v1/models/scaler@2')).json.error.code).toBe('MODEL_PINNED');
    expect((await runJob('scaler', [1, 1, 1, 1])).model).toBe('scaler@2');

    // The pin gone from mesh.yaml: the API's own pin, kept in the store, is the route again.
    await mesh.stop();
    rmSync(join(mesh.data, 'mesh.yaml'));
    mesh = await startMesh({ data: mesh.data });
    expect((await call('GET', '/v1/models/scaler')).json).toMatchObject({ pinned: '3', pinnedIn: 'api', route: 'pinned to 3' });
    expect((await runJob('scaler', [1, 1, 1, 1])).model).toBe('scaler@3');
  }, 180_000);

  it('a mesh.yaml pin naming a version the model does not have stops the start, naming it', async () => {
    await mesh.stop();
    await expect(startMesh({ data: mesh.data, config: { models: { scaler: { version: '8' } } } }))
      .rejects.toThrow(/models\.scaler\.version: model scaler has no version "8" \(it has: 2, 3\)/);
    rmSync(join(mesh.data, 'mesh.yaml'));
    mesh = await startMesh({ data: mesh.data });
  }, 180_000);
});
