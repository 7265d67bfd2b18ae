import { chmodSync, readdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { removeDir, startMesh, tempDir, waitFor, type RunningMesh } from '../helpers/mesh.js';
import { externalDataModel } from '../helpers/onnx-external.js';

/**
 * What a model file, or any engine process, can reach of gpumesh: its model's files and its own scratch folder, never
 * the keys. A real `gpumesh up`, started the way the attack used it — inside its own data folder, so the signing key
 * is `./secret.key` to anything that resolves a path against the working directory — with an ONNX file whose weights
 * are "external data" at a path of the host's choosing, and an engine command that tries to read every secret.
 */
const isRoot = process.getuid?.() === 0;
const SECRET_ENV = 'GPUMESH_TEST_SECRET';

let mesh: RunningMesh;
let probeDir: string;

/** An engine command (configured by this host's owner, in mesh.yaml) that reports what it could read of the secrets. */
const PROBE = String.raw`
const fs = require('fs');
const { join } = require('path');
const [data] = process.argv.slice(2);
const tried = {};
const targets = [
  'secret.key', 'admin.grant', 'store.sqlite', '../secret.key', '../../secret.key', '../../../secret.key', '../../../../secret.key',
  '.gpumesh/secret.key', join(data, 'secret.key'), join(data, 'admin.grant'), join(data, 'store.sqlite'), join(data, 'logs', 'orchestrator.log'),
];
for (const target of targets) {
  try { fs.readFileSync(target); tried[target] = 'read'; } catch (error) { tried[target] = error.code; }
}
const input = JSON.parse(fs.readFileSync(0, 'utf8'));
fs.writeFileSync(join(input.outputDir, 'result.json'), JSON.stringify({
  uid: process.getuid(), cwd: process.cwd(), cwdEntries: fs.readdirSync('.'), tried,
  env: Object.keys(process.env).filter((key) => key.startsWith('GPUMESH_')).sort(),
}));
`;

beforeAll(async () => {
  probeDir = tempDir('gpumesh-probe-');
  chmodSync(probeDir, 0o755);
  writeFileSync(join(probeDir, 'probe.cjs'), PROBE, { mode: 0o644 });
  const data = tempDir('gpumesh-confined-');
  writeFileSync(join(data, 'mesh.yaml'), [
    'models:',
    '  probe:',
    '    engine: exec',
    '    types: [image]',
    '    memoryMB: 16',
    '    settings:',
    `      command: ['${process.execPath}', '${join(probeDir, 'probe.cjs')}', '${data}']`,
    '',
  ].join('\n'));
  // Inside its data folder: the attack's own setting, where a relative `secret.key` is the signing key.
  mesh = await startMesh({ data, cwd: data, env: { [SECRET_ENV]: 'do not pass this on' } });
}, 120_000);
afterAll(async () => {
  await mesh?.stop();
  if (mesh) removeDir(mesh.data);
  if (probeDir) removeDir(probeDir);
});

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const raw = body instanceof Uint8Array;
  const response = await fetch(`${mesh.url}${path}`, {
    method, headers: { authorization: `Bearer ${mesh.admin}`, ...(body === undefined ? {} : { 'content-type': raw ? 'application/octet-stream' : 'application/json' }), prefer: 'wait=60' },
    body: body === undefined ? undefined : raw ? (body as Uint8Array<ArrayBuffer>) : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, json: text ? JSON.parse(text) : null };
}

async function store(bytes: Uint8Array<ArrayBuffer>): Promise<string> {
  const stored = await call('PUT', '/v1/blobs', bytes);
  expect(stored.status).toBe(201);
  return stored.json.digest as string;
}

describe('a model file cannot reach the keys (ONNX external data)', () => {
  it('an ONNX file whose weights name a file of the host is refused at models add, naming the initializer, and nothing is added', async () => {
    const locations = ['secret.key', 'package.json', '.gpumesh/secret.key', 'admin.grant', '../secret.key', 'sub/../secret.key', join(mesh.data, 'secret.key')];
    for (const [index, location] of locations.entries()) {
      const added = await call('POST', '/v1/models', { name: `sneaky${index}`, file: await store(externalDataModel(location)) });
      expect(added.status, `${location}: ${JSON.stringify(added.json)}`).toBe(400);
      expect(added.json.error.code).toBe('INVALID_INPUT');
      expect(added.json.error.message).toContain(`initializer "w" keeps its data outside the file, at ${JSON.stringify(location)}, which is not a file of the model`);
      expect((await call('GET', `/v1/models/sneaky${index}`)).status).toBe(404);
    }
  });

  it('a model of several files whose network names its own data file runs, its weights read from that file; a name outside its files is refused', async () => {
    const network = await store(externalDataModel('weights.bin'));
    const weights = await store(Uint8Array.from([5, 6, 7, 8]));
    const added = await call('POST', '/v1/models', {
      name: 'two-files', files: { 'model.onnx': network, 'weights.bin': weights }, settings: { pipeline: 'tensors' },
      inputs: [{ name: 'x', datatype: 'UINT8', shape: [4] }], outputs: [{ name: 'y', datatype: 'UINT8', shape: [4] }],
    });
    expect(added.status, JSON.stringify(added.json)).toBe(201);
    const job = await call('POST', '/v1/jobs', { type: 'tensor', model: 'two-files', input: { inputs: { x: { shape: [4], data: [10, 10, 10, 10] } } } });
    expect(job.json.status, JSON.stringify(job.json.error)).toBe('succeeded');
    expect(job.json.result.outputs.y).toMatchObject({ datatype: 'UINT8', shape: [4], data: [15, 16, 17, 18] });

    const stray = await call('POST', '/v1/models', {
      name: 'stray', files: { 'model.onnx': await store(externalDataModel('secret.key')), 'weights.bin': weights }, settings: { pipeline: 'tensors' },
      inputs: [{ name: 'x', datatype: 'UINT8', shape: [4] }], outputs: [{ name: 'y', datatype: 'UINT8', shape: [4] }],
    });
    expect(stray.status).toBe(400);
    expect(stray.json.error.message).toContain('model.onnx: initializer "w" keeps its data outside the file, at "secret.key", which is not a file of the model: only a file of the model itself may hold it (weights.bin)');
  });
});

describe('an engine process reaches its own folder, never the keys', () => {
  it('an engine command tries to read every secret by relative and absolute path and reads none; its environment carries none', async () => {
    const job = await call('POST', '/v1/jobs', { type: 'image', model: 'probe', input: { prompt: 'what can you read?' } });
    expect(job.json.status, JSON.stringify(job.json.error)).toBe('succeeded');
    const found = job.json.result as { uid: number; cwd: string; cwdEntries: string[]; tried: Record<string, string>; env: string[] };
    expect(Object.entries(found.tried).filter(([, outcome]) => outcome === 'read'), JSON.stringify(found.tried)).toEqual([]);
    // The agent's own variables stay with it; only what the exec engine hands a command is there.
    expect(found.env).toEqual(['GPUMESH_INPUT', 'GPUMESH_JOB_ID', 'GPUMESH_MODEL_PATH', 'GPUMESH_OUTPUT_DIR']);
    // Its working folder is its scratch (its input and its output folder), not the agent's.
    expect(found.cwd).not.toBe(mesh.data);
    expect(found.cwdEntries.sort()).toEqual(['input.json', 'out']);
    if (isRoot) expect(found.uid).toBe(65534);
  });

  it('the ONNX worker runs in an empty folder of its own, as the engine user, without the agent\'s variables', async () => {
    const job = await call('POST', '/v1/jobs', { type: 'image', input: { prompt: 'confined', width: 32, height: 32, steps: 1 } });
    expect(job.json.status, JSON.stringify(job.json.error)).toBe('succeeded');
    const worker = await waitFor(() => readdirSync('/proc').filter((entry) => /^\d+$/.test(entry)).find((pid) => {
      try {
        const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
        return cmdline.includes('onnx/worker') && readlinkSync(`/proc/${pid}/cwd`).startsWith(join(mesh.data, 'agent', 'engines'));
      } catch {
        return false;
      }
    }), { what: 'the ONNX worker of this mesh' });
    const cwd = readlinkSync(`/proc/${worker}/cwd`);
    expect(readdirSync(cwd)).toEqual([]);
    expect(readFileSync(`/proc/${worker}/environ`, 'utf8')).not.toContain(SECRET_ENV);
    const uid = /^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${worker}/status`, 'utf8'))![1];
    if (isRoot) expect(uid).toBe('65534');
    const status = await call('GET', '/v1/status');
    expect(status.json.hosts[0].engineUser).toBe(isRoot ? 'nobody' : expect.any(String));
  });
});
