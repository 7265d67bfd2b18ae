import { createHash } from 'node:crypto';
import onnxProto from 'onnx-proto';
import ort from 'onnxruntime-node';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import {
  GEN_CHANNELS,
  GEN_DEFAULT_STEPS,
  GEN_LATENT_DIM,
  Prng,
  buildGenerator,
  builtinModels,
  coordsFor,
  latentFor,
  latentsFor,
  sha256Digest,
  walkLatent,
} from '../../src/builtin-models/index.js';

const { onnx } = onnxProto;

/**
 * The content address of the generator. Weights use exact arithmetic only, so
 * every build on every machine must give exactly this; a deliberate change to
 * the network changes it (update it here, together with the model version).
 */
const GEN_DIGEST = 'sha256:afd7aab636a2e0a735d37ae0308d39c2ad4e7a9984a2244a144fce5bc10bf6ee';

const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

let session: ort.InferenceSession;

beforeAll(async () => {
  session = await ort.InferenceSession.create(buildGenerator());
});

interface Rendered {
  canvas: Float32Array;
  rgb: Uint8Array;
  /** rgb after every step */
  steps: Uint8Array[];
}

/** Renders a batch the way the engine does: one run per step, feeding canvas_out back. */
async function render(
  items: Array<{ prompt: string; seed: number }>,
  width: number,
  height: number,
  steps = GEN_DEFAULT_STEPS,
): Promise<Rendered> {
  const batch = items.length;
  const pixels = width * height;
  const latent = new ort.Tensor('float32', latentsFor(items), [batch, GEN_LATENT_DIM]);
  const coords = new ort.Tensor('float32', coordsFor(width, height), [pixels, 3]);
  let canvas: ort.Tensor = new ort.Tensor('float32', new Float32Array(batch * pixels * GEN_CHANNELS), [
    batch,
    pixels,
    GEN_CHANNELS,
  ]);
  const out: Uint8Array[] = [];
  for (let s = 0; s < steps; s++) {
    const octave = new ort.Tensor('float32', Float32Array.of(s), [1]);
    const result = await session.run({ latent, coords, canvas, octave });
    const next = result['canvas_out'];
    const rgb = result['rgb'];
    if (next === undefined || rgb === undefined) throw new Error('missing output');
    expect(next.type).toBe('float32');
    expect(next.dims).toEqual([batch, pixels, GEN_CHANNELS]);
    expect(rgb.type).toBe('uint8');
    expect(rgb.dims).toEqual([batch, pixels, GEN_CHANNELS]);
    canvas = next;
    out.push(new Uint8Array(rgb.data as Uint8Array));
  }
  return { canvas: new Float32Array(canvas.data as Float32Array), rgb: out[out.length - 1] ?? new Uint8Array(), steps: out };
}

function meanAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let d = 0;
  for (let i = 0; i < a.length; i++) d += Math.abs((a[i] ?? 0) - (b[i] ?? 0));
  return d / a.length;
}

function stdDev(a: ArrayLike<number>): number {
  let sum = 0;
  let sq = 0;
  for (let i = 0; i < a.length; i++) {
    const v = a[i] ?? 0;
    sum += v;
    sq += v * v;
  }
  const mean = sum / a.length;
  return Math.sqrt(sq / a.length - mean * mean);
}

/** Mean colour of an image, per channel. */
function meanColour(rgb: Uint8Array): number[] {
  const m = [0, 0, 0];
  for (let i = 0; i < rgb.length; i++) m[i % 3] = (m[i % 3] ?? 0) + (rgb[i] ?? 0);
  return m.map((v) => v / (rgb.length / 3));
}

describe('gen model file', () => {
  it('is deterministic: identical bytes on every build, and the pinned digest', () => {
    const a = buildGenerator();
    const b = buildGenerator();
    expect(sha(a)).toBe(sha(b));
    expect(Buffer.compare(Buffer.from(a), Buffer.from(b))).toBe(0);
    expect(sha256Digest(a)).toBe(GEN_DIGEST);
  });

  it('does not depend on module state (fresh module instances build the same bytes)', async () => {
    // Use the PRNG in between, then build from freshly evaluated modules.
    new Prng(1234).normals(1000, 1);
    vi.resetModules();
    const fresh = await import('../../src/builtin-models/index.js');
    expect(sha256Digest(fresh.buildGenerator())).toBe(GEN_DIGEST);
    expect(fresh.builtinModels().find((m) => m.name === 'gen')?.digest).toBe(GEN_DIGEST);
  });

  it('declares opset 17, IR 8, producer gpumesh and the documented signature', () => {
    const model = onnx.ModelProto.decode(buildGenerator());
    expect(Number(model.irVersion)).toBe(8);
    expect(model.opsetImport.map((o) => [o.domain, Number(o.version)])).toEqual([['', 17]]);
    expect(model.producerName).toBe('gpumesh');
    const sig = (vs: onnxProto.onnx.IValueInfoProto[] | null | undefined) =>
      (vs ?? []).map((v) => [
        v.name,
        v.type?.tensorType?.elemType,
        (v.type?.tensorType?.shape?.dim ?? []).map((d) => d.dimParam || Number(d.dimValue)),
      ]);
    const F = onnx.TensorProto.DataType.FLOAT;
    const U8 = onnx.TensorProto.DataType.UINT8;
    expect(sig(model.graph?.input)).toEqual([
      ['latent', F, ['batch', 16]],
      ['coords', F, ['pixels', 3]],
      ['canvas', F, ['batch', 'pixels', 3]],
      ['octave', F, [1]],
    ]);
    expect(sig(model.graph?.output)).toEqual([
      ['canvas_out', F, ['batch', 'pixels', 3]],
      ['rgb', U8, ['batch', 'pixels', 3]],
    ]);
  });

  it('is described by builtinModels()', () => {
    const gen = builtinModels().find((m) => m.name === 'gen');
    expect(gen).toBeDefined();
    expect(gen?.kind).toBe('generator');
    expect(gen?.engine).toBe('onnx');
    expect(gen?.jobTypes).toEqual(['image']);
    expect(gen?.digest).toBe(GEN_DIGEST);
    expect(gen?.defaultSteps).toBe(GEN_DEFAULT_STEPS);
    expect(gen?.memoryMB).toBeGreaterThan(0);
    expect(gen?.inputs.map((t) => t.name)).toEqual(['latent', 'coords', 'canvas', 'octave']);
    expect(gen?.outputs.map((t) => t.name)).toEqual(['canvas_out', 'rgb']);
    // the bytes are built once per process
    expect(builtinModels().find((m) => m.name === 'gen')?.bytes).toBe(gen?.bytes);
  });
});

describe('latentFor / coordsFor', () => {
  it('maps prompt and seed to a fixed standard-normal latent', () => {
    const a = latentFor('a red fox in snow', 7);
    expect(a).toHaveLength(GEN_LATENT_DIM);
    expect(latentFor('a red fox in snow', 7)).toEqual(a);
    expect(latentFor('a red fox in snow', 8)).not.toEqual(a);
    expect(latentFor('a red fox in snow ', 7)).not.toEqual(a);
    for (const v of a) expect(Number.isFinite(v)).toBe(true);
    // many latents together look standard normal
    const many = latentsFor(Array.from({ length: 200 }, (_, i) => ({ prompt: `p${i}`, seed: i })));
    const mean = many.reduce((s, v) => s + v, 0) / many.length;
    expect(Math.abs(mean)).toBeLessThan(0.1);
    expect(stdDev(many)).toBeGreaterThan(0.9);
    expect(stdDev(many)).toBeLessThan(1.1);
    expect(Array.from(many.subarray(3 * GEN_LATENT_DIM, 4 * GEN_LATENT_DIM))).toEqual(Array.from(latentFor('p3', 3)));
  });

  it('rejects seeds that are not safe integers', () => {
    expect(() => latentFor('x', 1.5)).toThrow(RangeError);
    expect(() => latentFor('x', Number.NaN)).toThrow(RangeError);
  });

  it('lays out pixel-centre coordinates row-major with square pixels', () => {
    const c = coordsFor(4, 2);
    expect(c).toHaveLength(4 * 2 * 3);
    // first pixel: top-left; x spans [-1, 1] on the long side, y is cropped
    expect(c[0]).toBeCloseTo(-0.75);
    expect(c[1]).toBeCloseTo(-0.25);
    expect(c[2]).toBeCloseTo(Math.hypot(0.75, 0.25));
    // second pixel is to the right of the first
    expect(c[3]).toBeCloseTo(-0.25);
    expect(c[4]).toBeCloseTo(-0.25);
    // last pixel: bottom-right
    expect(Array.from(c.subarray(21))).toEqual([0.75, 0.25, Math.fround(Math.hypot(0.75, 0.25))]);
    expect(() => coordsFor(0, 4)).toThrow(RangeError);
  });
});

describe('walkLatent (the frames of a clip)', () => {
  it('starts at the image\'s latent, moves a little each frame, loops, and stays standard normal', () => {
    const frames = 48;
    const walk = Array.from({ length: frames }, (_, f) => walkLatent('waves on a shore', 5, f, frames));
    // Frame 0 is the image gen makes of the same prompt and seed.
    expect(walk[0]).toEqual(latentFor('waves on a shore', 5));
    expect(walkLatent('waves on a shore', 5, 17, frames)).toEqual(walk[17]);
    const distance = (a: Float32Array, b: Float32Array) => Math.hypot(...Array.from(a, (v, i) => v - b[i]!));
    const steps = walk.map((latent, f) => distance(latent, walk[(f + 1) % frames]!));
    // Each step, the last back to the first included, is short and about the same: a smooth loop with no jump.
    expect(Math.max(...steps)).toBeLessThan(1);
    expect(Math.max(...steps) / Math.min(...steps)).toBeLessThan(1.5);
    // Halfway round, the latent is far from the start: the clip moves.
    expect(distance(walk[0]!, walk[frames / 2]!)).toBeGreaterThan(3);
    const all = new Float32Array(walk.flatMap((latent) => Array.from(latent)));
    expect(stdDev(all)).toBeGreaterThan(0.6);
    expect(stdDev(all)).toBeLessThan(1.4);
    expect(walkLatent('waves on a shore', 6, 3, frames)).not.toEqual(walk[3]);
  });

  it('refuses a frame outside the clip', () => {
    expect(() => walkLatent('x', 1, 4, 4)).toThrow(RangeError);
    expect(() => walkLatent('x', 1, -1, 4)).toThrow(RangeError);
    expect(() => walkLatent('x', 1, 0, 0)).toThrow(RangeError);
  });
});

describe('gen in onnxruntime', () => {
  it('renders the same prompt and seed to byte-identical images', async () => {
    const a = await render([{ prompt: 'a lighthouse at dusk', seed: 1 }], 64, 64);
    const b = await render([{ prompt: 'a lighthouse at dusk', seed: 1 }], 64, 64);
    expect(sha(a.rgb)).toBe(sha(b.rgb));
  });

  it('renders images that are not flat, and differ clearly between prompts', async () => {
    const prompts = ['a lighthouse at dusk', 'a red fox in snow', 'neon city rain', 'calm blue ocean'];
    const images: Uint8Array[] = [];
    for (const prompt of prompts) images.push((await render([{ prompt, seed: 1 }], 96, 96)).rgb);
    for (const img of images) {
      expect(stdDev(img)).toBeGreaterThan(30);
      // not saturated to a single colour either
      const m = meanColour(img);
      for (const v of m) expect(v).toBeGreaterThan(10);
      for (const v of m) expect(v).toBeLessThan(245);
    }
    for (let i = 0; i < images.length; i++) {
      for (let j = i + 1; j < images.length; j++) {
        expect(meanAbsDiff(images[i] ?? [], images[j] ?? [])).toBeGreaterThan(30);
      }
    }
    // the seed matters as much as the prompt
    const reseeded = (await render([{ prompt: prompts[0] ?? '', seed: 2 }], 96, 96)).rgb;
    expect(meanAbsDiff(images[0] ?? [], reseeded)).toBeGreaterThan(30);
  });

  it('needs every step: each step changes the image, coarse first', async () => {
    const { steps } = await render([{ prompt: 'calm blue ocean', seed: 3 }], 128, 128);
    expect(steps).toHaveLength(GEN_DEFAULT_STEPS);
    const changes: number[] = [];
    for (let s = 1; s < steps.length; s++) changes.push(meanAbsDiff(steps[s - 1] ?? [], steps[s] ?? []));
    for (const c of changes) expect(c).toBeGreaterThan(1);
    expect(changes[0]).toBeGreaterThan(changes[changes.length - 1] ?? Infinity);
  });

  it('gives the same results for a batch as for single runs (random inputs)', async () => {
    const rng = new Prng(99);
    const batch = 3;
    const pixels = 40 * 30;
    const coords = new ort.Tensor('float32', coordsFor(40, 30), [pixels, 3]);
    const latent = rng.normals(batch * GEN_LATENT_DIM, 1);
    const canvas = rng.normals(batch * pixels * GEN_CHANNELS, 1.5);
    for (const octave of [0, 2, 5]) {
      const oct = new ort.Tensor('float32', Float32Array.of(octave), [1]);
      const together = await session.run({
        latent: new ort.Tensor('float32', latent, [batch, GEN_LATENT_DIM]),
        coords,
        canvas: new ort.Tensor('float32', canvas, [batch, pixels, GEN_CHANNELS]),
        octave: oct,
      });
      const tCanvas = together['canvas_out']?.data as Float32Array;
      const tRgb = together['rgb']?.data as Uint8Array;
      for (let i = 0; i < batch; i++) {
        const single = await session.run({
          latent: new ort.Tensor('float32', latent.slice(i * GEN_LATENT_DIM, (i + 1) * GEN_LATENT_DIM), [1, GEN_LATENT_DIM]),
          coords,
          canvas: new ort.Tensor('float32', canvas.slice(i * pixels * 3, (i + 1) * pixels * 3), [1, pixels, GEN_CHANNELS]),
          octave: oct,
        });
        const sCanvas = single['canvas_out']?.data as Float32Array;
        const sRgb = single['rgb']?.data as Uint8Array;
        let maxCanvas = 0;
        let maxRgb = 0;
        for (let k = 0; k < pixels * 3; k++) {
          maxCanvas = Math.max(maxCanvas, Math.abs((sCanvas[k] ?? 0) - (tCanvas[i * pixels * 3 + k] ?? 0)));
          maxRgb = Math.max(maxRgb, Math.abs((sRgb[k] ?? 0) - (tRgb[i * pixels * 3 + k] ?? 0)));
        }
        expect(maxCanvas).toBeLessThan(1e-4);
        expect(maxRgb).toBeLessThanOrEqual(1);
      }
    }
  });

  it('renders non-square sizes', async () => {
    const { rgb } = await render([{ prompt: 'wide', seed: 5 }], 48, 16, 2);
    expect(rgb).toHaveLength(48 * 16 * 3);
  });
});
