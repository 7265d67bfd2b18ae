import onnxProto from 'onnx-proto';
import { describe, expect, it } from 'vitest';
import { meshForFile } from '../helpers/mesh.js';

/**
 * Every datatype a tensor job and an OIP infer may carry, through a real `gpumesh up` (its agent, its ONNX worker, a
 * real onnxruntime session): an Identity model of each type added as a user adds one, its values sent and read back
 * unchanged — FP16 through its bits, INT64 beyond 2^32, BYTES as strings — and two jobs of different batch sizes
 * stacked along the first dimension into one batch, each given back its own rows; a model whose first dimension is
 * fixed runs its jobs one by one.
 */
const { onnx } = onnxProto;
const ELEMENT = {
  FP32: onnx.TensorProto.DataType.FLOAT, FP16: onnx.TensorProto.DataType.FLOAT16, INT64: onnx.TensorProto.DataType.INT64,
  INT32: onnx.TensorProto.DataType.INT32, INT8: onnx.TensorProto.DataType.INT8, UINT8: onnx.TensorProto.DataType.UINT8,
  BOOL: onnx.TensorProto.DataType.BOOL, BYTES: onnx.TensorProto.DataType.STRING,
} as const;
type Datatype = keyof typeof ELEMENT;

/** y = x, of one datatype, [first, 2]: `first` a name (variable: the model batches) or a number (fixed). */
function identity(datatype: Datatype, first: string | number = 'batch'): Uint8Array<ArrayBuffer> {
  const dims = [first, 2].map((dim) => (typeof dim === 'number' ? { dimValue: dim } : { dimParam: dim }));
  const value = (name: string) => ({ name, type: { tensorType: { elemType: ELEMENT[datatype], shape: { dim: dims } } } });
  const model = onnx.ModelProto.create({
    irVersion: 8, opsetImport: [{ domain: '', version: 13 }], producerName: 'gpumesh-test',
    graph: { name: `identity_${datatype}`, node: [{ opType: 'Identity', input: ['x'], output: ['y'] }], input: [value('x')], output: [value('y')] },
  });
  return Uint8Array.from(onnx.ModelProto.encode(model).finish());
}

/** Values at the edges of each type: what a careless conversion would change. */
const VALUES: Record<Datatype, unknown[]> = {
  FP32: [0.5, -3.25], FP16: [1.5, -2.25], INT64: [1, -9007199254740991], INT32: [2147483647, -2147483648],
  INT8: [-128, 127], UINT8: [0, 255], BOOL: [true, false], BYTES: ['hello', 'wörld'],
};

const mesh = meshForFile();

async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; json: any }> {
  const raw = body instanceof Uint8Array;
  const response = await fetch(`${mesh().url}${path}`, {
    method, headers: { authorization: `Bearer ${mesh().admin}`, ...(body === undefined ? {} : { 'content-type': raw ? 'application/octet-stream' : 'application/json' }), ...headers },
    body: body === undefined ? undefined : raw ? (body as Uint8Array<ArrayBuffer>) : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, json: text ? JSON.parse(text) : null };
}

async function addModel(name: string, bytes: Uint8Array<ArrayBuffer>): Promise<any> {
  const stored = await call('PUT', '/v1/blobs', bytes);
  expect(stored.status).toBe(201);
  const added = await call('POST', '/v1/models', { name, file: stored.json.digest });
  expect(added.status, JSON.stringify(added.json)).toBe(201);
  return added.json;
}

const tensorJob = (model: string, shape: number[], data: unknown[]) => ({ type: 'tensor', model, input: { inputs: { x: { shape, data } } } });

describe('tensor datatypes through the whole mesh (real onnxruntime)', () => {
  it.each(Object.keys(VALUES) as Datatype[])('%s: read from the file, sent and given back unchanged by /v1/jobs and by OIP infer', async (datatype) => {
    const name = `id-${datatype.toLowerCase()}`;
    const added = await addModel(name, identity(datatype));
    expect(added.inputs).toEqual([{ name: 'x', datatype, shape: [-1, 2] }]);
    const data = VALUES[datatype];
    const job = await call('POST', '/v1/jobs', tensorJob(name, [1, 2], data), { prefer: 'wait=60' });
    expect(job.json.status, JSON.stringify(job.json.error)).toBe('succeeded');
    expect(job.json.result.outputs.y).toMatchObject({ datatype, shape: [1, 2], data });
    const infer = await call('POST', `/v2/models/${name}/infer`, { inputs: [{ name: 'x', shape: [1, 2], datatype, data }] });
    expect(infer.status, JSON.stringify(infer.json)).toBe(200);
    expect(infer.json.outputs).toEqual([{ name: 'y', datatype, shape: [1, 2], data }]);
  });

  it('refuses a value of the wrong kind at admission, naming the tensor and the element', async () => {
    const refused = await call('POST', '/v1/jobs', tensorJob('id-bytes', [1, 2], [1, 2]));
    expect(refused.status).toBe(400);
    expect(refused.json.error.message).toContain('x');
    expect(refused.json.error.message).toMatch(/BYTES/);
  });

  it('stacks jobs of a batching model along the first dimension into one batch, each given back its own rows', async () => {
    await addModel('stacked', identity('FP32'));
    const jobs = Array.from({ length: 8 }, (_, i) => tensorJob('stacked', [1 + (i % 2), 2], Array.from({ length: 2 * (1 + (i % 2)) }, (_, k) => i * 10 + k)));
    const submitted = await call('POST', '/v1/jobs:batch', { jobs });
    expect(submitted.status).toBe(207);
    expect(submitted.json.results.map((result: { status: number }) => result.status)).toEqual(jobs.map(() => 202));
    const views = await Promise.all(submitted.json.results.map(async (result: { id: string }) => {
      let view = await call('GET', `/v1/jobs/${result.id}`);
      for (let turn = 0; turn < 400 && !['succeeded', 'failed'].includes(view.json.status); turn++) {
        await new Promise((resolve) => setTimeout(resolve, 25));
        view = await call('GET', `/v1/jobs/${result.id}`);
      }
      return view.json;
    }));
    views.forEach((view, i) => {
      expect(view.status).toBe('succeeded');
      expect(view.result.outputs.y.shape).toEqual([1 + (i % 2), 2]);
      expect(view.result.outputs.y.data).toEqual(jobs[i]!.input.inputs.x.data);
    });
    // Submitted together, they ran together: fewer batches than jobs, and at least one holding several.
    const batches = new Set(views.map((view) => view.batch.id));
    expect(batches.size).toBeLessThan(views.length);
    expect(Math.max(...views.map((view) => view.batch.size))).toBeGreaterThan(1);
  });

  it('runs a model whose first dimension is fixed one job at a time', async () => {
    const added = await addModel('fixed', identity('FP32', 1));
    expect(added.policy.batching.maxBatchSize).toBe(1);
    const views = await Promise.all(Array.from({ length: 4 }, async (_, i) => (await call('POST', '/v1/jobs', tensorJob('fixed', [1, 2], [i, i + 0.5]), { prefer: 'wait=60' })).json));
    views.forEach((view, i) => {
      expect(view.status).toBe('succeeded');
      expect(view.batch.size).toBe(1);
      expect(view.result.outputs.y.data).toEqual([i, i + 0.5]);
    });
  });
});
