import onnxProto from 'onnx-proto';
import ort from 'onnxruntime-node';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import {
  MLP_INPUT_DIM,
  MLP_OUTPUT_DIM,
  Prng,
  buildTensorMlp,
  builtinModels,
  sha256Digest,
} from '../../src/builtin-models/index.js';

const { onnx } = onnxProto;

/** Pinned content address of the MLP (see GEN_DIGEST in generator.test.ts). */
const MLP_DIGEST = 'sha256:aef087340b7563a76ced5fb3f091acba176d2175dd8dbd12d6cc529b1bd97f45';

let session: ort.InferenceSession;

beforeAll(async () => {
  session = await ort.InferenceSession.create(buildTensorMlp());
});

async function run(x: Float32Array, batch: number): Promise<Float32Array> {
  const out = await session.run({ x: new ort.Tensor('float32', x, [batch, MLP_INPUT_DIM]) });
  const y = out['y'];
  if (y === undefined) throw new Error('no output y');
  expect(y.type).toBe('float32');
  expect(y.dims).toEqual([batch, MLP_OUTPUT_DIM]);
  return y.data as Float32Array;
}

/** The initializers of the model, decoded from the file. */
function weights(): Map<string, { dims: number[]; data: Float32Array }> {
  const model = onnx.ModelProto.decode(buildTensorMlp());
  const map = new Map<string, { dims: number[]; data: Float32Array }>();
  for (const t of model.graph?.initializer ?? []) {
    const raw = t.rawData ?? new Uint8Array();
    const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
    const data = new Float32Array(raw.byteLength / 4);
    for (let i = 0; i < data.length; i++) data[i] = view.getFloat32(i * 4, true);
    map.set(t.name ?? '', { dims: (t.dims ?? []).map(Number), data });
  }
  return map;
}

describe('mlp model file', () => {
  it('is deterministic: identical bytes on every build, and the pinned digest', async () => {
    expect(sha256Digest(buildTensorMlp())).toBe(sha256Digest(buildTensorMlp()));
    expect(sha256Digest(buildTensorMlp())).toBe(MLP_DIGEST);
    vi.resetModules();
    const fresh = await import('../../src/builtin-models/index.js');
    expect(sha256Digest(fresh.buildTensorMlp())).toBe(MLP_DIGEST);
  });

  it('declares x [batch, 64] → y [batch, 16] with 64→256→256→16 weights', () => {
    const model = onnx.ModelProto.decode(buildTensorMlp());
    expect(Number(model.irVersion)).toBe(8);
    expect(model.opsetImport.map((o) => Number(o.version))).toEqual([17]);
    expect(model.producerName).toBe('gpumesh');
    const dims = (v: onnxProto.onnx.IValueInfoProto | undefined) =>
      (v?.type?.tensorType?.shape?.dim ?? []).map((d) => d.dimParam || Number(d.dimValue));
    const inputs = model.graph?.input ?? [];
    const outputs = model.graph?.output ?? [];
    expect(inputs.map((v) => v.name)).toEqual(['x']);
    expect(dims(inputs[0])).toEqual(['batch', 64]);
    expect(outputs.map((v) => v.name)).toEqual(['y']);
    expect(dims(outputs[0])).toEqual(['batch', 16]);
    const w = weights();
    expect(w.get('w1')?.dims).toEqual([64, 256]);
    expect(w.get('w2')?.dims).toEqual([256, 256]);
    expect(w.get('w3')?.dims).toEqual([256, 16]);
  });

  it('is described by builtinModels()', () => {
    const mlp = builtinModels().find((m) => m.name === 'mlp');
    expect(mlp?.kind).toBe('tensor');
    expect(mlp?.engine).toBe('onnx');
    expect(mlp?.jobTypes).toEqual(['tensor']);
    expect(mlp?.digest).toBe(MLP_DIGEST);
    expect(mlp?.memoryMB).toBeGreaterThan(0);
    expect(mlp?.inputs).toEqual([expect.objectContaining({ name: 'x', dtype: 'float32', shape: ['batch', 64] })]);
    expect(mlp?.outputs).toEqual([expect.objectContaining({ name: 'y', dtype: 'float32', shape: ['batch', 16] })]);
    expect(builtinModels().map((m) => m.name)).toEqual(['gen', 'gen-video', 'mlp', 'simple']);
    // gen-video is gen's own file, served for clips.
    const [gen, genVideo] = builtinModels();
    expect(genVideo).toMatchObject({ digest: gen!.digest, jobTypes: ['video'], kind: 'video' });
  });
});

describe('mlp in onnxruntime', () => {
  it('computes relu(relu(x W1 + b1) W2 + b2) W3 + b3', async () => {
    const w = weights();
    const x = new Prng(5).normals(2 * MLP_INPUT_DIM, 1);
    const y = await run(x, 2);
    const layer = (input: Float32Array, rows: number, name: string, relu: boolean): Float32Array => {
      const W = w.get(`w${name}`);
      const b = w.get(`b${name}`);
      if (W === undefined || b === undefined) throw new Error(`no layer ${name}`);
      const [n, m] = W.dims as [number, number];
      const out = new Float32Array(rows * m);
      for (let r = 0; r < rows; r++) {
        for (let j = 0; j < m; j++) {
          let s = b.data[j] ?? 0;
          for (let i = 0; i < n; i++) s += (input[r * n + i] ?? 0) * (W.data[i * m + j] ?? 0);
          out[r * m + j] = relu ? Math.max(0, s) : s;
        }
      }
      return out;
    };
    const expected = layer(layer(layer(x, 2, '1', true), 2, '2', true), 2, '3', false);
    for (let i = 0; i < expected.length; i++) expect(y[i]).toBeCloseTo(expected[i] ?? 0, 4);
    // the output is not degenerate
    expect(new Set(Array.from(y, (v) => v.toFixed(3))).size).toBeGreaterThan(20);
  });

  it('gives the same rows for a batch of 8 as for 8 single runs (random inputs)', async () => {
    const batch = 8;
    const x = new Prng(11).normals(batch * MLP_INPUT_DIM, 2);
    const together = await run(x, batch);
    for (let i = 0; i < batch; i++) {
      const single = await run(x.slice(i * MLP_INPUT_DIM, (i + 1) * MLP_INPUT_DIM), 1);
      for (let j = 0; j < MLP_OUTPUT_DIM; j++) {
        const a = together[i * MLP_OUTPUT_DIM + j] ?? NaN;
        const b = single[j] ?? NaN;
        expect(Math.abs(a - b)).toBeLessThan(1e-4 * Math.max(1, Math.abs(b)));
      }
    }
  });
});
