import { describe, expect, it } from 'vitest';
import { GraphBuilder } from '../../src/builtin-models/index.js';
import { meshForFile } from '../helpers/mesh.js';

/**
 * The Open Inference Protocol v2 (REST) in front of a real `gpumesh up`, written from the spec's own examples
 * (KServe's inference_rest.md) and Triton's binary tensor data extension, the bytes built one by one here: health,
 * metadata, infer on the built-in `simple` (Triton's example) in JSON and in binary, a model added with versions, and
 * requests that do not fit answered 4xx with `{"error": "…"}`.
 */
const mesh = meshForFile();

async function call(method: string, path: string, options: { body?: string | Uint8Array<ArrayBuffer>; headers?: Record<string, string>; grant?: string | null } = {}): Promise<{ status: number; json: any; bytes: Buffer; headers: Headers }> {
  const grant = options.grant === undefined ? mesh().admin : options.grant;
  const response = await fetch(`${mesh().url}${path}`, {
    method, body: options.body, headers: { ...(grant ? { authorization: `Bearer ${grant}` } : {}), ...options.headers },
  });
  const bytes = Buffer.from(await response.arrayBuffer());
  let json: any = null;
  try { json = JSON.parse(bytes.toString()); } catch { /* binary */ }
  return { status: response.status, json, bytes, headers: response.headers };
}

const A = Array.from({ length: 16 }, (_, i) => i);
const B = Array.from({ length: 16 }, () => 1);

describe('Open Inference Protocol v2', () => {
  it('health, server metadata, model metadata and readiness', async () => {
    expect((await call('GET', '/v2/health/live')).json).toEqual({ live: true });
    expect((await call('GET', '/v2/health/ready')).json).toEqual({ ready: true });
    expect((await call('GET', '/v2')).json).toMatchObject({ name: 'gpumesh', extensions: ['binary_tensor_data'] });
    expect((await call('GET', '/v2/models/simple')).json).toEqual({
      name: 'simple', versions: ['1'], platform: 'onnxruntime_onnx',
      inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [-1, 16] }, { name: 'INPUT1', datatype: 'INT32', shape: [-1, 16] }],
      outputs: [{ name: 'OUTPUT0', datatype: 'INT32', shape: [-1, 16] }, { name: 'OUTPUT1', datatype: 'INT32', shape: [-1, 16] }],
    });
    expect((await call('GET', '/v2/models/simple/versions/1/ready')).json).toEqual({ name: 'simple', ready: true });
  });

  it('infers in JSON, as the spec\'s example does, nested data included', async () => {
    const answer = await call('POST', '/v2/models/simple/infer', {
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ id: '42', inputs: [
        { name: 'INPUT0', shape: [1, 16], datatype: 'INT32', data: A },
        { name: 'INPUT1', shape: [1, 16], datatype: 'INT32', data: [B] },
      ] }),
    });
    expect(answer.status, JSON.stringify(answer.json)).toBe(200);
    expect(answer.json).toEqual({
      model_name: 'simple', model_version: '1', id: '42',
      outputs: [
        { name: 'OUTPUT0', datatype: 'INT32', shape: [1, 16], data: A.map((value) => value + 1) },
        { name: 'OUTPUT1', datatype: 'INT32', shape: [1, 16], data: A.map((value) => value - 1) },
      ],
    });
  });

  it('infers with the binary tensor data extension, both ways, the bytes built by hand', async () => {
    const header = Buffer.from(JSON.stringify({
      inputs: [
        { name: 'INPUT0', shape: [1, 16], datatype: 'INT32', parameters: { binary_data_size: 64 } },
        { name: 'INPUT1', shape: [1, 16], datatype: 'INT32', parameters: { binary_data_size: 64 } },
      ],
      outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }, { name: 'OUTPUT1' }],
    }));
    const int32s = (values: number[]): Buffer => {
      const bytes = Buffer.alloc(values.length * 4);
      values.forEach((value, index) => {
        bytes[index * 4] = value & 0xff;
        bytes[index * 4 + 1] = (value >> 8) & 0xff;
        bytes[index * 4 + 2] = (value >> 16) & 0xff;
        bytes[index * 4 + 3] = (value >> 24) & 0xff;
      });
      return bytes;
    };
    const body = new Uint8Array(Buffer.concat([header, int32s(A), int32s(B)]));
    const answer = await call('POST', '/v2/models/simple/infer', {
      body, headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.length) },
    });
    expect(answer.status, answer.bytes.toString()).toBe(200);
    const length = Number(answer.headers.get('inference-header-content-length'));
    const json = JSON.parse(answer.bytes.subarray(0, length).toString());
    expect(json.outputs).toEqual([
      { name: 'OUTPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
      { name: 'OUTPUT1', datatype: 'INT32', shape: [1, 16], data: A.map((value) => value - 1) },
    ]);
    const out = answer.bytes.subarray(length);
    expect(out.length).toBe(64);
    expect(Array.from({ length: 16 }, (_, i) => out.readInt32LE(i * 4))).toEqual(A.map((value) => value + 1));
  });

  it('answers requests that do not fit with 4xx and {"error": "…"}', async () => {
    const infer = (inputs: unknown[], model = 'simple') => call('POST', `/v2/models/${model}/infer`, { headers: { 'content-type': 'application/json' }, body: JSON.stringify({ inputs }) });
    const shape = await infer([{ name: 'INPUT0', shape: [1, 8], datatype: 'INT32', data: A.slice(0, 8) }, { name: 'INPUT1', shape: [1, 16], datatype: 'INT32', data: B }]);
    expect(shape.status).toBe(400);
    expect(shape.json).toEqual({ error: expect.stringContaining('inputs.INPUT0.shape: dimension 1 is 8') });
    const datatype = await infer([{ name: 'INPUT0', shape: [1, 16], datatype: 'FP32', data: A }, { name: 'INPUT1', shape: [1, 16], datatype: 'INT32', data: B }]);
    expect(datatype.status).toBe(400);
    expect(datatype.json.error).toContain('datatype FP32; the model takes INT32');
    const missing = await infer([{ name: 'INPUT0', shape: [1, 16], datatype: 'INT32', data: A }]);
    expect(missing.json.error).toContain('inputs.INPUT1: missing');
    expect((await infer([], 'simple')).status).toBe(400);
    expect((await infer([{ name: 'x', shape: [1], datatype: 'FP32', data: [1] }], 'nothing')).status).toBe(404);
    expect((await infer([{ name: 'x', shape: [1], datatype: 'FP32', data: [1] }], 'gen')).json.error).toContain('not a tensor model with named inputs');
    const truncated = await call('POST', '/v2/models/simple/infer', {
      body: new Uint8Array(Buffer.concat([Buffer.from('{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","parameters":{"binary_data_size":64}}]}'), Buffer.alloc(10)])),
      headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': '101' },
    });
    expect(truncated.status).toBe(400);
    expect(truncated.json.error).toMatch(/binary_data_size 64 is more than the 10 bytes left/);
    const noGrant = await call('POST', '/v2/models/simple/infer', { grant: null, headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(noGrant.status).toBe(401);
    expect(typeof noGrant.json.error).toBe('string');
  });

  it('serves a model added with versions by name and by version', async () => {
    const g = new GraphBuilder('neg', 'y = -x');
    const x = g.input('x', 'float32', ['batch', 2]);
    g.op('Neg', [x], {}, 'y');
    g.output('y', 'float32', ['batch', 2]);
    const stored = await call('PUT', '/v1/blobs', { body: new Uint8Array(g.toBytes()), headers: { 'content-type': 'application/octet-stream' } });
    expect((await call('POST', '/v1/models', { body: JSON.stringify({ name: 'neg', file: stored.json.digest }), headers: { 'content-type': 'application/json' } })).status).toBe(201);
    const answer = await call('POST', '/v2/models/neg/versions/1/infer', { headers: { 'content-type': 'application/json' }, body: JSON.stringify({ inputs: [{ name: 'x', shape: [2, 2], datatype: 'FP32', data: [1, 2, 3, 4] }] }) });
    expect(answer.json).toMatchObject({ model_name: 'neg', model_version: '1', outputs: [{ name: 'y', shape: [2, 2], data: [-1, -2, -3, -4] }] });
    expect((await call('GET', '/v2/models/neg/versions/7')).status).toBe(404);
  });

  it('routes a bare name as /v1/jobs does: the traffic split, the pin, the version recorded on the job; metadata describes the version mainly served', async () => {
    // Both versions take x FP32 [batch, 2]; version 1 negates into `neg`, version 2 doubles into `twice`: each answer
    // and each metadata says which version it came from.
    const model = (op: 'Neg' | 'Add', output: string) => {
      const g = new GraphBuilder(`canary_${output}`, op);
      const x = g.input('x', 'float32', ['batch', 2]);
      g.op(op, op === 'Neg' ? [x] : [x, x], {}, output);
      g.output(output, 'float32', ['batch', 2]);
      return new Uint8Array(g.toBytes());
    };
    const json = { 'content-type': 'application/json' };
    for (const bytes of [model('Neg', 'neg'), model('Add', 'twice')]) {
      const stored = await call('PUT', '/v1/blobs', { body: bytes, headers: { 'content-type': 'application/octet-stream' } });
      expect((await call('POST', '/v1/models', { body: JSON.stringify({ name: 'canary', file: stored.json.digest }), headers: json })).status).toBe(201);
    }
    const route = async (body: unknown) => expect((await call('PUT', '/v1/models/canary/route', { body: JSON.stringify(body), headers: json })).status).toBe(200);
    const inferBare = async () => {
      const answer = await call('POST', '/v2/models/canary/infer', { headers: json, body: JSON.stringify({ inputs: [{ name: 'x', shape: [1, 2], datatype: 'FP32', data: [1, 2] }] }) });
      expect(answer.status, JSON.stringify(answer.json)).toBe(200);
      const job = await call('GET', `/v1/jobs/${String(answer.json.id)}`);
      const [output] = answer.json.outputs;
      return { version: answer.json.model_version as string, output: `${String(output.name)} ${String(output.data)}`, jobModel: job.json.model as string };
    };
    const V1 = 'neg -1,-2';
    const V2 = 'twice 2,4';
    const described = async () => (await call('GET', '/v2/models/canary')).json;

    // The newest by default.
    expect(await described()).toMatchObject({ name: 'canary', versions: ['1', '2'], outputs: [{ name: 'twice' }] });
    expect(await inferBare()).toEqual({ version: '2', output: V2, jobModel: 'canary@2' });

    // A split: both versions serve bare requests, each answer is its version's, and the job records it.
    await route({ split: { 1: 50, 2: 50 } });
    const seen = new Map<string, number>();
    for (let i = 0; i < 16; i++) {
      const served = await inferBare();
      expect(served.jobModel).toBe(`canary@${served.version}`);
      expect(served.output).toBe(served.version === '1' ? V1 : V2);
      seen.set(served.version, (seen.get(served.version) ?? 0) + 1);
    }
    expect([...seen.keys()].sort()).toEqual(['1', '2']);

    // Metadata describes the version the split sends most to.
    await route({ split: { 1: 90, 2: 10 } });
    expect(await described()).toMatchObject({ versions: ['1', '2'], outputs: [{ name: 'neg' }] });

    // A pin: every bare request, and the metadata; a version by path stays exact.
    await route({ pinned: '1' });
    for (let i = 0; i < 4; i++) expect(await inferBare()).toEqual({ version: '1', output: V1, jobModel: 'canary@1' });
    expect((await described()).outputs).toEqual([{ name: 'neg', datatype: 'FP32', shape: [-1, 2] }]);
    const exact = await call('POST', '/v2/models/canary/versions/2/infer', { headers: json, body: JSON.stringify({ inputs: [{ name: 'x', shape: [1, 2], datatype: 'FP32', data: [1, 2] }] }) });
    expect(exact.json).toMatchObject({ model_version: '2', outputs: [{ name: 'twice', data: [2, 4] }] });
  });
});
